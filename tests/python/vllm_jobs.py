"""Worker processes of test_vllm.py, run by a Python that has the real vLLM installed.

    python vllm_jobs.py trainer|worker '<json args>'

trainer: a transformers Qwen2 (fp32, random init) trained for real, publishing whole tensors
through wsync; saves its state per version.
worker: one vLLM TP rank (vLLM's own Qwen2ForCausalLM on the CPU platform, TP over gloo) with
the "wsync" weight-transfer backend created by vLLM's factory after vLLM's plugin loader ran our
entry point; receives each version with vLLM's init_weight_transfer_engine / start_weight_update
/ update_weights / finish_weight_update sequence, and saves its parameters and, for comparison,
those that vLLM's own load_weights gives from the trainer's full state.
"""
from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")  # vLLM's CPU platform (no GPU here)

import torch  # noqa: E402


def qwen2_config():
    from transformers import Qwen2Config

    cfg = Qwen2Config(vocab_size=250, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                      max_position_embeddings=128, tie_word_embeddings=False,
                      torch_dtype="float32")
    cfg.architectures = ["Qwen2ForCausalLM"]
    return cfg


def trainer(a: dict) -> None:
    import wsync
    from transformers import Qwen2ForCausalLM

    torch.manual_seed(0)
    model = Qwen2ForCausalLM(qwen2_config()).float()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    t = wsync.Trainer(wsync.Bootstrap.explicit(0, 1, a["tp"], a["address"], a["secret"]),
                      timeout_ms=300000)
    # The checkpoint's names and shapes go to the workers first: joining the job (inside
    # register_module) waits for every rank, and the workers need them to join.
    shapes = Path(a["out"], "hf_shapes.json")
    shapes.with_suffix(".tmp").write_text(json.dumps(
        {n: list(p.shape) for n, p in model.named_parameters()}))
    os.replace(shapes.with_suffix(".tmp"), shapes)
    t.register_module(model)
    t.commit()
    tokens = torch.randint(0, 250, (2, 16), generator=torch.Generator().manual_seed(3))
    for v in range(1, a["versions"] + 1):
        loss = model(input_ids=tokens, labels=tokens).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        torch.save({n: p.detach().clone() for n, p in model.named_parameters()},
                   Path(a["out"]) / f"trainer_v{v}.pt")
        t.publish(v, wait=True)
    t.close()


def vllm_model(tp: int, rank: int, port: int, model_dir: Path):
    from vllm.config import DeviceConfig, ModelConfig, VllmConfig, set_current_vllm_config
    from vllm.distributed import init_distributed_environment, initialize_model_parallel
    from vllm.config import ParallelConfig

    qwen2_config().save_pretrained(model_dir)
    mc = ModelConfig(model=str(model_dir), skip_tokenizer_init=True, dtype="float32",
                     enforce_eager=True)
    vc = VllmConfig(model_config=mc, device_config=DeviceConfig(device="cpu"),
                    parallel_config=ParallelConfig(tensor_parallel_size=tp))
    ctx = set_current_vllm_config(vc)
    ctx.__enter__()
    init_distributed_environment(world_size=tp, rank=rank, local_rank=rank,
                                 distributed_init_method=f"tcp://127.0.0.1:{port}",
                                 backend="gloo")
    initialize_model_parallel(tp)
    from vllm.model_executor.models.qwen2 import Qwen2ForCausalLM

    # The second model (vLLM's own loading, for comparison) needs other layer names.
    return vc, Qwen2ForCausalLM(vllm_config=vc), Qwen2ForCausalLM(vllm_config=vc,
                                                                  prefix="reference")


def worker(a: dict) -> None:
    from vllm.config.weight_transfer import WeightTransferConfig
    from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory
    from vllm.plugins import load_general_plugins

    rank, out = a["rank"], Path(a["out"])
    model_dir = out / f"model_{rank}"
    model_dir.mkdir(exist_ok=True)
    vc, model, reference = vllm_model(a["tp"], rank, a["dist_port"], model_dir)
    load_general_plugins()  # runs the vllm.general_plugins entry points: wsync's register()
    engine = WeightTransferEngineFactory.create_engine(WeightTransferConfig(backend="wsync"), vc,
                                                       torch.device("cpu"), model)
    while not (out / "hf_shapes.json").exists():
        import time

        time.sleep(0.05)
    init = {"coordinator_address": a["address"], "secret": a["secret"], "num_trainers": 1,
            "num_rollouts": a["tp"], "rollout_rank_base": 0, "replica": 0,
            "timeout_ms": 300000,
            "hf_shapes": json.loads((out / "hf_shapes.json").read_text())}
    engine.init_transfer_engine(engine.parse_init_info(init))  # as Worker.init_weight_transfer_engine
    report = {"fallback": engine.receiver.fallback,
              "registered": sorted(engine.receiver.boxes)}
    for v in range(1, a["versions"] + 1):
        engine.start_weight_update()
        engine.update_weights({"version": v})
        engine.finish_weight_update()
        state = torch.load(out / f"trainer_v{v}.pt")
        reference.load_weights(state.items())  # vLLM's own loaders on the full tensors
        got = {n: p.detach().clone() for n, p in model.named_parameters()}
        want = {n: p.detach().clone() for n, p in reference.named_parameters()}
        torch.save({"got": got, "want": want, "version": engine.version},
                   out / f"worker{rank}_v{v}.pt")
    engine.shutdown()
    (out / f"worker{rank}.json").write_text(json.dumps(report))


def main() -> int:
    role, args = sys.argv[1], json.loads(sys.argv[2])
    try:
        {"trainer": trainer, "worker": worker}[role](args)
    except Exception:
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
