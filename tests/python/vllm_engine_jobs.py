"""Processes of test_vllm_engine.py: vLLM's own engine (LLM, its engine-core and worker
processes) serving a tiny random-init Qwen2 on the CPU, updated by wsync.

    python vllm_engine_jobs.py trainer|engine|joiner|rejoining|reference '<json args>'

trainer: a transformers Qwen2 (fp32) trained for real; per version it publishes through wsync,
saves the version's checkpoint (for the reference role), records the greedy continuation of a
fixed prompt, and waits until the engine has checked that version (on-policy RL: the next step
starts after the rollout). args["paced"]: the test sequences the versions instead: version v is
published once the file go_v<v> exists, and what each publish reached (replicas ready / skipped /
lost, bytes, seconds) is recorded in trainer_versions.json.
engine, args["driver"] == "backend": ``LLM(..., load_format="dummy", weight_transfer_config=
WeightTransferConfig(backend="wsync"))``; vLLM's worker process loads our plugin entry point and
creates the backend through vLLM's factory. Per version: ``llm.start_weight_update()``,
``llm.update_weights({"update_info": {"version": v}})``, ``llm.finish_weight_update()``.
engine, args["driver"] == "extension": ``LLM(..., worker_extension_cls=
"wsync.engines.vllm.WsyncWorkerExtension")`` and no weight-transfer config; the driver calls the
extension on every worker through vLLM's ``llm.collective_rpc`` as verl / OpenRLHF drive vLLM's
workers: "wsync_init" once, "wsync_update" per version (its returns recorded), "wsync_close".
Either way ``llm.generate`` after each version, recorded with the trainer's own greedy tokens
(transformers' CPU kernels are not vLLM's: test_vllm_engine.py compares with the reference role).
joiner / rejoining: engine B joining from init info alone (rejoining: restartable, for the kill
scenario; each function's docstring says what it records).
reference: vLLM loading each version's checkpoint with its own loader: a fresh LLM on the last
version's, then vLLM's in-place ``reload_weights`` from disk for each earlier one.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch

from job_main import run

VOCAB, PROMPT, NEW_TOKENS = 256, [5, 17, 42, 7, 99, 3], 8


def config():
    from transformers import Qwen2Config

    # head_dim 64: vLLM's CPU attention has no kernel for small head sizes
    cfg = Qwen2Config(vocab_size=VOCAB, hidden_size=128, intermediate_size=256,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      head_dim=64, max_position_embeddings=256, tie_word_embeddings=False)
    cfg.architectures = ["Qwen2ForCausalLM"]
    return cfg


def wait_for(path: Path, timeout_s: float = 300) -> None:
    deadline = time.time() + timeout_s
    while not path.exists():
        if time.time() > deadline:
            raise TimeoutError(f"{path} did not appear in {timeout_s} s")
        time.sleep(0.05)


def trainer(a: dict) -> None:
    import wsync
    from transformers import Qwen2ForCausalLM

    out = Path(a["out"])
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config()).float()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-2)
    shapes = {n: list(p.shape) for n, p in model.named_parameters()}
    (out / "hf_shapes.tmp").write_text(json.dumps(shapes))
    os.replace(out / "hf_shapes.tmp", out / "hf_shapes.json")
    t = wsync.Trainer(wsync.Bootstrap.explicit(0, 1, a["tp"], a["address"], a["secret"]),
                      timeout_ms=300000)
    t.register_module(model)
    t.commit()
    batch = torch.randint(0, VOCAB, (4, 24), generator=torch.Generator().manual_seed(1))
    record = []
    for v in range(1, a["versions"] + 1):
        model.train()
        loss = model(input_ids=batch, labels=batch).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        if a.get("paced"):  # the test says when each version goes (engine B joins / is killed)
            wait_for(out / f"go_v{v}", timeout_s=600)
            record.append(publish_recorded(t, v, out))
            write_json(out / "trainer_versions.json", record)
        else:
            t.publish(v, wait=True)
        model.eval()
        with torch.no_grad():
            ids = torch.tensor([PROMPT])
            tokens, logprobs = [], []
            for _ in range(NEW_TOKENS):  # greedy, as the engine samples with temperature 0
                logits = model(input_ids=ids).logits[0, -1].float()
                token = int(logits.argmax())
                tokens.append(token)
                logprobs.append(float(torch.log_softmax(logits, -1)[token]))
                ids = torch.cat([ids, torch.tensor([[token]])], 1)
        model.save_pretrained(out / f"checkpoint_v{v}")  # for vLLM's own loading (reference)
        torch.save({"tokens": tokens, "logprobs": logprobs, "loss": float(loss)},
                   out / f"trainer_v{v}.tmp")
        os.replace(out / f"trainer_v{v}.tmp", out / f"trainer_v{v}.pt")  # readers wait for it
        if a.get("paced"):
            continue
        wait_for(out / f"checked_v{v}", timeout_s=600)
        if a.get("join"):  # engine B joins after version 1 and checks every later version
            wait_for(out / f"joiner_checked_v{v}", timeout_s=600)
    t.close()


def write_json(path: Path, value) -> None:
    """Writes `path` atomically (the test polls these files)."""
    path.with_suffix(".tmp").write_text(json.dumps(value))
    os.replace(path.with_suffix(".tmp"), path)


def publish_recorded(t, v: int, out: Path) -> dict:
    """Publishes version v and waits for it (bounded: 120 s); returns which replicas took it,
    skipped it or were lost while it was in flight, with the coordinator's bytes / seconds. A
    marker file (publishing_v<v>, with the time) is written right before the publish call."""
    import wsync

    started = time.time()
    write_json(out / f"publishing_v{v}", started)
    request = t.publish(v)
    request.wait(timeout_ms=120000)  # WsyncTimeoutError: the publish did not complete
    stats = t.version_stats()
    return {"version": v, "ready": request.replicas(wsync.Replicas.READY),
            "skipped": request.replicas(wsync.Replicas.SKIPPED),
            "lost": request.replicas(wsync.Replicas.LOST), "started": started,
            "publish_s": time.time() - started, "bytes": stats.bytes if stats else 0,
            "seconds": stats.seconds if stats else 0.0}


def generate(llm) -> tuple:
    """Greedy tokens of PROMPT and their log-probabilities (the KV cache of earlier weights
    dropped first, as RL drivers do after an update)."""
    from vllm import SamplingParams

    llm.reset_prefix_cache()
    params = SamplingParams(max_tokens=NEW_TOKENS, temperature=0, logprobs=0, detokenize=False)
    o = llm.generate([{"prompt_token_ids": PROMPT}], params, use_tqdm=False)[0].outputs[0]
    return list(o.token_ids), [lp[t].logprob for t, lp in zip(o.token_ids, o.logprobs)]


ENGINE_ARGS = dict(skip_tokenizer_init=True, dtype="float32", enforce_eager=True,
                   max_model_len=128, max_num_seqs=2)


def engine(a: dict) -> None:
    from vllm import LLM

    out = Path(a["out"])
    config().save_pretrained(out / "model")
    if a["driver"] == "backend":
        from vllm.config.weight_transfer import WeightTransferConfig

        wiring = {"weight_transfer_config": WeightTransferConfig(backend="wsync")}
    else:
        wiring = {"worker_extension_cls": "wsync.engines.vllm.WsyncWorkerExtension"}
    llm = LLM(model=str(out / "model"), load_format="dummy", tensor_parallel_size=a["tp"],
              **ENGINE_ARGS, **wiring)
    dummy_tokens, _ = generate(llm)  # dummy weights before the first version
    wait_for(out / "hf_shapes.json")
    init_info = {
        "coordinator_address": a["address"], "secret": a["secret"], "num_trainers": 1,
        "num_rollouts": a["tp"], "rollout_rank_base": 0, "replica": 0, "timeout_ms": 300000,
        "hf_shapes": json.loads((out / "hf_shapes.json").read_text())}
    if a["driver"] == "backend":
        llm.init_weight_transfer_engine({"init_info": init_info})
    else:
        llm.collective_rpc("wsync_init", args=(init_info,))
    seen = []
    for v in range(1, a["versions"] + 1):
        wait_for(out / f"trainer_v{v}.pt", timeout_s=900)  # paced: engine B starts meanwhile
        live = None
        if a["driver"] == "backend":
            llm.start_weight_update()
            llm.update_weights({"update_info": {"version": v}})
            llm.finish_weight_update()
        else:
            live = llm.collective_rpc("wsync_update", args=(v,))
        tokens, logprobs = generate(llm)
        want = torch.load(out / f"trainer_v{v}.pt")
        seen.append({"version": v, "tokens": tokens, "logprobs": logprobs, "live": live,
                     "trainer_tokens": want["tokens"]})
        (out / f"checked_v{v}").write_text("")
    if a["driver"] == "extension":
        llm.collective_rpc("wsync_close")
    (out / "engine.json").write_text(json.dumps({"dummy_tokens": dummy_tokens, "seen": seen}))


def joiner(a: dict) -> None:
    """Engine B, started while the job runs (after engine A checked version 1): joins from init
    info alone (address and secret; TP size from vLLM, replica id from vLLM's instance_id, the
    tensors' names and shapes from vLLM's model config) through WsyncWorkerExtension. Its first version must come from engine A (peer
    cold start); then it follows the trainer's versions. Leaves by wsync_close."""
    from vllm import LLM

    out = Path(a["out"])
    wait_for(out / "checked_v1")
    (out / "joiner_started").write_text(str(time.time()))
    llm = LLM(model=str(out / "model"), load_format="dummy", tensor_parallel_size=a["tp"],
              worker_extension_cls="wsync.engines.vllm.WsyncWorkerExtension", **ENGINE_ARGS)
    # The address and the secret only: TP size, replica id and the tensors' names and shapes
    # all come from vLLM (its parallel state, instance_id and model config).
    init_info = {"coordinator_address": a["address"], "secret": a["secret"]}
    t0 = time.time()
    places = llm.collective_rpc("wsync_init", args=(init_info,))
    live = llm.collective_rpc("wsync_update", args=(None,))
    stats = llm.collective_rpc("wsync_stats")
    joined_s = time.time() - t0
    first = live[0]
    seen = []
    tokens, logprobs = generate(llm)
    seen.append({"version": first, "tokens": tokens, "logprobs": logprobs, "live": live})
    (out / f"joiner_checked_v{first}").write_text("")
    for v in range(first + 1, a["versions"] + 1):
        wait_for(out / f"trainer_v{v}.pt")
        live = llm.collective_rpc("wsync_update", args=(v,))
        tokens, logprobs = generate(llm)
        seen.append({"version": v, "tokens": tokens, "logprobs": logprobs, "live": live})
        (out / f"joiner_checked_v{v}").write_text("")
    llm.collective_rpc("wsync_close")
    (out / "joiner.json").write_text(json.dumps({"places": places, "stats": stats, "seen": seen,
                                                 "join_to_first_version_s": joined_s}))


def rejoining(a: dict) -> None:
    """Engine B of the kill scenario (args["name"]: one start of it; the test kill -9s the first
    start's whole process tree mid-transfer and starts it again with the same init info). Joins
    like `joiner` (init info: address and secret only), records its place, its first version's
    wsync stats and the seconds from wsync_init to the first version ({name}.json, rewritten
    after every version so that a killed start leaves its record); then, per version v up to
    args["versions"], writes {name}_waiting_v<v> and waits in wsync_update(v) (bounded) while the
    trainer publishes, generates, records, writes {name}_checked_v<v>. Leaves by wsync_close."""
    from vllm import LLM

    out, name = Path(a["out"]), a["name"]
    llm = LLM(model=str(out / "model"), load_format="dummy", tensor_parallel_size=a["tp"],
              worker_extension_cls="wsync.engines.vllm.WsyncWorkerExtension", **ENGINE_ARGS)
    init_info = {"coordinator_address": a["address"], "secret": a["secret"],
                 "timeout_ms": 180000}
    t0 = time.time()
    places = llm.collective_rpc("wsync_init", args=(init_info,))
    live = llm.collective_rpc("wsync_update", args=(None, 180000))
    first_s = time.time() - t0
    stats = llm.collective_rpc("wsync_stats")
    record = {"places": places, "stats": stats, "init_started": t0, "first_version_at": t0 +
              first_s, "init_to_first_version_s": first_s, "seen": []}

    def check(v: int, live: list) -> None:
        tokens, logprobs = generate(llm)
        record["seen"].append({"version": v, "tokens": tokens, "logprobs": logprobs,
                               "live": live, "t": time.time()})
        write_json(out / f"{name}.json", record)
        (out / f"{name}_checked_v{v}").write_text("")

    check(live[0], live)
    for v in range(live[0] + 1, a["versions"] + 1):
        (out / f"{name}_waiting_v{v}").write_text(str(time.time()))
        check(v, llm.collective_rpc("wsync_update", args=(v, 180000)))
    llm.collective_rpc("wsync_close")
    record["closed"] = True
    write_json(out / f"{name}.json", record)


def reference(a: dict) -> None:
    """vLLM loading each version's checkpoint with its own loader: a fresh engine on the last
    version (the strongest check where the test ends), vLLM's reload_weights for the others."""
    from vllm import LLM

    out = Path(a["out"])
    last = a["versions"]
    llm = LLM(model=str(out / f"checkpoint_v{last}"), tensor_parallel_size=a["tp"],
              **ENGINE_ARGS)
    by_version = {last: generate(llm)}
    for v in range(1, last):
        llm.collective_rpc("reload_weights", kwargs={"weights_path": str(out / f"checkpoint_v{v}")})
        by_version[v] = generate(llm)
    (out / "reference.json").write_text(json.dumps({
        str(v): {"tokens": t, "logprobs": lp} for v, (t, lp) in sorted(by_version.items())}))


if __name__ == "__main__":
    role, args = sys.argv[1], json.loads(sys.argv[2])
    run(lambda: {"trainer": trainer, "engine": engine, "joiner": joiner, "rejoining": rejoining,
                 "reference": reference}[role](args))
