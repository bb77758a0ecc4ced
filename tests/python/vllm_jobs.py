"""Worker processes of test_vllm.py, run by a Python that has the real vLLM installed.

    python vllm_jobs.py trainer|worker '<json args>'

For each model of args["models"] in turn (one wsync job per model, each with its own coordinator):
trainer: the transformers model (fp32, random init) trained for real, publishing whole tensors
through wsync; saves its state per version.
worker: one vLLM TP rank: the model built by vLLM's own initialize_model (as vLLM's loader does)
on the CPU platform, TP over gloo, with the "wsync" weight-transfer backend created by vLLM's
factory after vLLM's plugin loader ran our entry point, its init info without hf_shapes (the
backend derives the tensors' names and shapes from vLLM's model config); receives each version with vLLM's
init_weight_transfer_engine / start_weight_update / update_weights / finish_weight_update
sequence (as vLLM's Worker calls them), and saves its parameters and, for comparison, those that
vLLM's own load_weights gives from the trainer's full state. Models:
  qwen2      fused qkv_proj (grouped-query heads, biases) and gate_up_proj, padded vocabulary
  qwen2_moe  FusedMoE experts: transformers' stacked [E, 2I, H] gate_up_proj into vLLM's w13
  gpt2       Conv1D weights that vLLM's loader transposes: received whole, through load_weights
  qwen2_draft  speculative decoding with a draft model (vLLM's "draft_model" method builds the
             draft with the same model classes): the target Qwen2 and a 1-layer draft Qwen2, both
             built by vLLM's initialize_model, registered in one wsync context the way
             WsyncWorkerExtension does with model_runner.get_draft_model() (WsyncReceiver with
             draft=... and both vLLM model configs: target and draft shapes derived from them);
             the trainer publishes the draft's tensors as "draft."+name
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")  # vLLM's CPU platform (no GPU here)

import torch  # noqa: E402

from job_main import run  # noqa: E402

VOCAB = 250


def hf_config(model: str):
    import transformers

    if model == "qwen2_small":  # the draft model of qwen2_draft
        cfg = transformers.Qwen2Config(
            vocab_size=VOCAB, hidden_size=64, intermediate_size=64, num_hidden_layers=1,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            max_position_embeddings=128, tie_word_embeddings=False)
        cfg.architectures = ["Qwen2ForCausalLM"]
    elif model in ("qwen2", "qwen2_draft"):
        cfg = transformers.Qwen2Config(
            vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            max_position_embeddings=128, tie_word_embeddings=False)
        cfg.architectures = ["Qwen2ForCausalLM"]
    elif model == "qwen2_moe":
        cfg = transformers.Qwen2MoeConfig(
            vocab_size=VOCAB, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
            shared_expert_intermediate_size=64, num_experts=4, num_experts_per_tok=2,
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            max_position_embeddings=128, tie_word_embeddings=False)
        cfg.architectures = ["Qwen2MoeForCausalLM"]
    else:  # vLLM's gelu_new needs its compiled kernels; plain gelu does not
        cfg = transformers.GPT2Config(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4,
                                      n_positions=128, activation_function="gelu")
        cfg.architectures = ["GPT2LMHeadModel"]
    return cfg


def hf_model(model: str):
    import transformers

    cls = {"qwen2": transformers.Qwen2ForCausalLM, "qwen2_moe": transformers.Qwen2MoeForCausalLM,
           "gpt2": transformers.GPT2LMHeadModel, "qwen2_draft": transformers.Qwen2ForCausalLM,
           "qwen2_small": transformers.Qwen2ForCausalLM}[model]
    torch.manual_seed(0 if model != "qwen2_small" else 5)
    return cls(hf_config(model)).float()


class TargetAndDraft(torch.nn.Module):
    """The trainer's policy of qwen2_draft: the target's tensors under their names, the draft's
    under "draft." + theirs; both trained."""

    def __init__(self) -> None:
        super().__init__()
        self.target, self.drafter = hf_model("qwen2_draft"), hf_model("qwen2_small")

    def named_parameters(self, *args, **kwargs):  # type: ignore[override]
        yield from self.target.named_parameters()
        for n, p in self.drafter.named_parameters():
            yield "draft." + n, p

    def forward(self, input_ids, labels):
        out = self.target(input_ids=input_ids, labels=labels)
        out.loss = out.loss + self.drafter(input_ids=input_ids, labels=labels).loss
        return out


def train(a: dict, model_name: str, job: dict) -> None:
    import wsync

    model = TargetAndDraft() if model_name == "qwen2_draft" else hf_model(model_name)
    opt = torch.optim.AdamW([p for _, p in model.named_parameters()], lr=1e-2)
    t = wsync.Trainer(wsync.Bootstrap.explicit(0, 1, a["tp"], job["address"], job["secret"]),
                      timeout_ms=300000)
    # The checkpoint's names and shapes go to the workers first: joining the job (inside
    # register_module) waits for every rank, and the workers need them to join.
    shapes = Path(a["out"], f"hf_shapes_{model_name}.json")
    shapes.with_suffix(".tmp").write_text(json.dumps(
        {n: list(p.shape) for n, p in model.named_parameters()}))
    os.replace(shapes.with_suffix(".tmp"), shapes)
    t.register_module(dict(model.named_parameters()))
    t.commit()
    tokens = torch.randint(0, VOCAB, (2, 16), generator=torch.Generator().manual_seed(3))
    for v in range(1, a["versions"] + 1):
        loss = model(input_ids=tokens, labels=tokens).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        torch.save({n: p.detach().clone() for n, p in model.named_parameters()},
                   Path(a["out"]) / f"trainer_{model_name}_v{v}.pt")
        t.publish(v, wait=True)
    t.close()


def trainer(a: dict) -> None:
    for name in a["models"]:
        train(a, name, a["jobs"][name])


def vllm_config(model_name: str, tp: int, model_dir: Path):
    from vllm.config import DeviceConfig, ModelConfig, ParallelConfig, VllmConfig

    hf_config(model_name).save_pretrained(model_dir)
    mc = ModelConfig(model=str(model_dir), skip_tokenizer_init=True, dtype="float32",
                     enforce_eager=True)
    return VllmConfig(model_config=mc, device_config=DeviceConfig(device="cpu"),
                      parallel_config=ParallelConfig(tensor_parallel_size=tp))


def serve_draft(a: dict, job: dict) -> dict:
    """qwen2_draft: target and draft built by vLLM, received as WsyncWorkerExtension.wsync_init /
    wsync_update do (WsyncReceiver with the draft)."""
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.model_loader.utils import initialize_model

    from wsync.engines.vllm import WsyncInitInfo, WsyncReceiver

    rank, out = a["rank"], Path(a["out"])
    vc = vllm_config("qwen2_draft", a["tp"], out / f"qwen2_draft_{rank}")
    vc_draft = vllm_config("qwen2_small", a["tp"], out / f"qwen2_small_{rank}")
    with set_current_vllm_config(vc):
        model = initialize_model(vc)
        reference = initialize_model(vc, prefix="reference")
    with set_current_vllm_config(vc_draft):
        draft = initialize_model(vc_draft, prefix="draft_model")
        draft_reference = initialize_model(vc_draft, prefix="draft_reference")
    shapes_file = out / "hf_shapes_qwen2_draft.json"
    while not shapes_file.exists():
        time.sleep(0.05)
    shapes = json.loads(shapes_file.read_text())
    # No hf_shapes / draft_hf_shapes: both derived from vLLM's model configs (target, draft).
    info = WsyncInitInfo(coordinator_address=job["address"], secret=job["secret"],
                         num_trainers=1, num_rollouts=a["tp"], timeout_ms=300000)
    with set_current_vllm_config(vc):
        receiver = WsyncReceiver(model, model.load_weights, info, dtype=torch.float32,
                                 draft=draft, model_config=vc.model_config,
                                 draft_model_config=vc_draft.model_config)
    assert receiver.draft is not None
    derived = dict(receiver.hf_shapes)
    derived.update({"draft." + n: s for n, s in receiver.draft.hf_shapes.items()})
    report = {"hf_shapes": {n: list(s) for n, s in derived.items()},"fallback": receiver.fallback + receiver.draft.fallback,
              "registered": sorted(receiver.boxes) + sorted(
                  n for n, _ in draft.named_parameters()),
              "box_elements": {n: sum(b.numel() for b in bs) for n, bs in receiver.boxes.items()},
              "param_elements": {n: p.numel() for n, p in model.named_parameters()
                                 if n in receiver.boxes}}
    for v in range(1, a["versions"] + 1):
        with set_current_vllm_config(vc):  # WsyncWorkerExtension.wsync_update's order
            receiver.start_reload()
            live = receiver.receive(v)
            receiver.finish_reload(vc.model_config)
            state = torch.load(out / f"trainer_qwen2_draft_v{v}.pt")
            reference.load_weights((n, t) for n, t in state.items() if not n.startswith("draft."))
        with set_current_vllm_config(vc_draft):
            draft_reference.load_weights((n[len("draft."):], t) for n, t in state.items()
                                         if n.startswith("draft."))
        got = {n: p.detach().clone() for n, p in model.named_parameters()}
        got.update({"draft." + n: p.detach().clone() for n, p in draft.named_parameters()})
        want = {n: p.detach().clone() for n, p in reference.named_parameters()}
        want.update({"draft." + n: p.detach().clone()
                     for n, p in draft_reference.named_parameters()})
        torch.save({"got": got, "want": want, "version": live},
                   out / f"worker{rank}_qwen2_draft_v{v}.pt")
    receiver.close()
    return report


def serve(a: dict, model_name: str, job: dict) -> dict:
    if model_name == "qwen2_draft":
        return serve_draft(a, job)
    from vllm.config import set_current_vllm_config
    from vllm.config.weight_transfer import WeightTransferConfig
    from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory
    from vllm.model_executor.model_loader.utils import initialize_model

    rank, out = a["rank"], Path(a["out"])
    model_dir = out / f"{model_name}_{rank}"
    model_dir.mkdir(exist_ok=True)
    vc = vllm_config(model_name, a["tp"], model_dir)
    with set_current_vllm_config(vc):
        model = initialize_model(vc)
        # The second model (vLLM's own loading, for comparison) needs other layer names.
        reference = initialize_model(vc, prefix="reference")
    engine = WeightTransferEngineFactory.create_engine(WeightTransferConfig(backend="wsync"), vc,
                                                       torch.device("cpu"), model)
    # No hf_shapes: the backend derives them from vLLM's model config (test_vllm.py compares
    # them with the trainer's).
    init = {"coordinator_address": job["address"], "secret": job["secret"], "num_trainers": 1,
            "num_rollouts": a["tp"], "rollout_rank_base": 0, "replica": 0,
            "timeout_ms": 300000}
    # as Worker.init_weight_transfer_engine (without a current vLLM config)
    engine.init_transfer_engine(engine.parse_init_info(init))
    params = dict(model.named_parameters())
    receiver = engine.receiver
    report = {"hf_shapes": {n: list(s) for n, s in receiver.hf_shapes.items()},
              "fallback": receiver.fallback, "registered": sorted(receiver.boxes),
              # elements this rank receives into each parameter (never more than it holds)
              "box_elements": {n: sum(b.numel() for b in bs) for n, bs in receiver.boxes.items()},
              "param_elements": {n: params[n].numel() for n in receiver.boxes}}
    for v in range(1, a["versions"] + 1):
        with set_current_vllm_config(vc):  # the Worker's calls, in its order
            engine.start_weight_update()
            engine.update_weights({"version": v})
            engine.finish_weight_update()
            state = torch.load(out / f"trainer_{model_name}_v{v}.pt")
            reference.load_weights(state.items())  # vLLM's own loaders on the full tensors
        got = {n: p.detach().clone() for n, p in model.named_parameters()}
        want = {n: p.detach().clone() for n, p in reference.named_parameters()}
        torch.save({"got": got, "want": want, "version": engine.version},
                   out / f"worker{rank}_{model_name}_v{v}.pt")
    engine.shutdown()
    return report


def worker(a: dict) -> None:
    from vllm.config import set_current_vllm_config
    from vllm.distributed import init_distributed_environment, initialize_model_parallel
    from vllm.plugins import load_general_plugins

    first = vllm_config(a["models"][0], a["tp"], Path(a["out"]) / f"init_{a['rank']}")
    with set_current_vllm_config(first):
        init_distributed_environment(world_size=a["tp"], rank=a["rank"], local_rank=a["rank"],
                                     distributed_init_method=f"tcp://127.0.0.1:{a['dist_port']}",
                                     backend="gloo")
        initialize_model_parallel(a["tp"])
    load_general_plugins()  # runs the vllm.general_plugins entry points: wsync's register()
    reports = {name: serve(a, name, a["jobs"][name]) for name in a["models"]}
    Path(a["out"], f"worker{a['rank']}.json").write_text(json.dumps(reports))


if __name__ == "__main__":
    run(lambda: {"trainer": trainer, "worker": worker}[sys.argv[1]](json.loads(sys.argv[2])))
