"""Worker processes of test_sglang.py, run by a Python that has the real SGLang installed.

    python sglang_jobs.py trainer|worker|scheduler '<json args>'

trainer: a transformers Llama (fp32) trained for real, publishing whole tensors each version;
         saves its state per version.
worker r: the wsync rollout beside SGLang TP rank r: its tensors in SGLang's TP-local layout
         (fused qkv_proj / gate_up_proj, padded vocabulary), copy-flipped each version and handed
         on as SGLang MultiprocessingSerializer payloads (wsync.engines.sglang.serialize_rank).
         Worker 0 also drives: it gathers every rank's part and builds the named tensors of
         Engine.update_weights_from_tensor (engine_named_tensors: SGLang's LocalSerializedTensor),
         serialized once per TP rank as SGLang's Engine does.
scheduler r: SGLang TP rank r's side, with SGLang's own functions: monkey_patch_torch_reductions
         and MultiprocessingSerializer.deserialize of its own rank's payload (as
         TpModelWorker.deserialize_own_rank), _unwrap_tensor, and _model_load_weights_direct (the
         load_format="direct" path of WeightUpdater.update_weights_from_tensor) into a module with
         SGLang's parameter names and TP-local shapes; saves the parameters per version.
Workers and schedulers share one gloo group (ranks 0-1 workers, 2-3 schedulers) that stands in
for SGLang's tokenizer-to-scheduler channel.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

import wsync
from wsync import models
from job_main import run

TP = 2


def llama_config():
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=250, hidden_size=64, intermediate_size=96,
                       num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                       head_dim=16, max_position_embeddings=64, attention_bias=False,
                       tie_word_embeddings=False)


def trainer(a: dict) -> None:
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(llama_config()).float()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    batch = torch.randint(0, 250, (2, 12), generator=torch.Generator().manual_seed(1234))
    t = wsync.Trainer(wsync.Bootstrap.explicit(0, 1, TP, a["address"], a["secret"]),
                      timeout_ms=300000)
    t.register_module(model)
    t.commit()
    for v in range(1, a["versions"] + 1):
        loss = model(input_ids=batch, labels=batch).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        t.publish(v, wait=True)
        torch.save({"state": {k: p.detach().clone() for k, p in model.state_dict().items()},
                    "loss": float(loss)}, Path(a["out"]) / f"trainer_v{v}.pt")
    t.close()


def _group(a: dict, rank: int) -> None:
    """The gloo group of workers and schedulers; one multiprocessing authkey for all, as SGLang's
    processes inherit from the engine that spawned them (torch passes CPU shared-memory fds
    through multiprocessing's resource sharer, which checks it)."""
    import multiprocessing

    import torch.distributed as dist

    multiprocessing.current_process().authkey = a["secret"].encode()

    dist.init_process_group("gloo", rank=rank, world_size=2 * TP,
                            init_method=f"tcp://127.0.0.1:{a['dist_port']}")


def _next_version(last: int, rollout=None) -> int:
    """Rank 0 picks the version every TP rank loads (ready on the whole replica together)."""
    import torch.distributed as dist

    box = [rollout.wait_for_version(last, timeout_ms=120000) if rollout is not None else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def worker(a: dict) -> None:
    import torch.distributed as dist
    from sglang.srt.utils import MultiprocessingSerializer

    from wsync.engines import sglang as adapter

    rank = a["rank"]
    _group(a, rank)
    rollout = wsync.Rollout(wsync.Bootstrap.explicit(rank, 1, TP, a["address"], a["secret"]),
                            replica=0, timeout_ms=300000)
    tensors = adapter.rank_tensors(rollout, models.llama_tp_layout(llama_config(), rank, TP),
                                   dtype=torch.float32)
    pointers = {n: t.data_ptr() for n, t in tensors.items()}
    rollout.commit()
    version = 0
    while version < a["versions"]:
        version = _next_version(version, rollout if rank == 0 else None)
        assert rollout.flip(version) == version
        parts = [None] * (2 * TP) if rank == 0 else None
        dist.gather_object(adapter.serialize_rank(tensors), parts, dst=0)
        payloads = [None]
        if rank == 0:  # the driver: Engine.update_weights_from_tensor's payload, per TP rank
            named = adapter.engine_named_tensors(parts[:TP])
            payloads = [[MultiprocessingSerializer.serialize(named) for _ in range(TP)]]
        dist.broadcast_object_list(payloads, src=0)
        dist.barrier()  # the schedulers loaded this version: the next flip may overwrite
    assert pointers == {n: t.data_ptr() for n, t in tensors.items()}, "storage moved"
    rollout.close()
    dist.destroy_process_group()


def scheduler(a: dict) -> None:
    import torch.distributed as dist
    from sglang.srt.model_executor.model_runner_components.weight_updater import (
        _model_load_weights_direct, _unwrap_tensor)
    from sglang.srt.utils import MultiprocessingSerializer
    from sglang.srt.utils.patch_torch import monkey_patch_torch_reductions

    tp_rank = a["rank"]
    _group(a, TP + tp_rank)
    local = models.llama_tp_layout(llama_config(), tp_rank, TP)
    model = torch.nn.Module()  # SGLang's parameter names and TP-local shapes, other values
    for name, t in local.items():
        *path, leaf = name.split(".")
        parent = model
        for part in path:
            if not hasattr(parent, part):
                parent.add_module(part, torch.nn.Module())
            parent = getattr(parent, part)
        parent.register_parameter(leaf, torch.nn.Parameter(torch.full(t.shape, -7.0),
                                                           requires_grad=False))
    named_params = dict(model.named_parameters())
    version, seen, out = 0, [], Path(a["out"])
    while version < a["versions"]:
        version = _next_version(version)
        dist.gather_object(None, None, dst=0)
        payloads = [None]
        dist.broadcast_object_list(payloads, src=0)
        monkey_patch_torch_reductions()  # TpModelWorker.deserialize_own_rank
        named = MultiprocessingSerializer.deserialize(payloads[0][tp_rank])
        named = [(n, _unwrap_tensor(t, tp_rank=tp_rank, device="cpu")) for n, t in named]
        _model_load_weights_direct(model, named)
        torch.save({n: p.detach().clone() for n, p in named_params.items()},
                   out / f"tp{tp_rank}_v{version}.pt")
        seen.append(version)
        dist.barrier()
    (out / f"seen_tp{tp_rank}.json").write_text(json.dumps(seen))
    dist.destroy_process_group()


if __name__ == "__main__":
    run(lambda: {"trainer": trainer, "worker": worker, "scheduler": scheduler}[sys.argv[1]](
        json.loads(sys.argv[2])))
