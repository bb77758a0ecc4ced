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

Joining (args["join"]): the job's one fixed rollout is "fixed" (whole HF tensors, their names and
shapes from SGLang's own ModelConfig through wsync.engines.sglang.hf_tensors), reading every
version; the trainer publishes versions 1-2, then waits until the SGLang engine (the workers and
schedulers above) joined: each worker's rollout comes from wsync.engines.sglang.join_rollout with
only the coordinator's address and secret, SGLang's TP size and rank and the engine's server
address (replica id derived from it), its TP layout from SGLang's ModelConfig of the model
directory. Its first version is copied from the fixed replica (peer cold start); then versions
3-4 come from the trainer.
"""
from __future__ import annotations

import json
import os
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


SERVER = "http://127.0.0.1:30000"  # the joining engine's own id (its server address)


def sglang_model_config(a: dict, name: str):
    """SGLang's own ModelConfig of the job's Llama (saved to a directory of this process)."""
    from sglang.srt.configs.model_config import ModelConfig

    path = Path(a["out"]) / f"model_{name}"
    cfg = llama_config()
    cfg.architectures = ["LlamaForCausalLM"]
    cfg.save_pretrained(path)
    return ModelConfig(str(path))


def wait_for(path: Path, timeout_s: float = 300) -> None:
    import time

    deadline = time.time() + timeout_s
    while not path.exists():
        if time.time() > deadline:
            raise TimeoutError(f"{path} did not appear in {timeout_s} s")
        time.sleep(0.05)


def trainer(a: dict) -> None:
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(llama_config()).float()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    batch = torch.randint(0, 250, (2, 12), generator=torch.Generator().manual_seed(1234))
    rollouts = 1 if a.get("join") else TP
    t = wsync.Trainer(wsync.Bootstrap.explicit(0, 1, rollouts, a["address"], a["secret"]),
                      timeout_ms=300000)
    t.register_module(model)
    t.commit()
    for v in range(1, a["versions"] + 1):
        if a.get("join") and v == 3:  # the engine joins between versions 2 and 3
            wait_for(Path(a["out"]) / "joined")
        loss = model(input_ids=batch, labels=batch).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        t.publish(v, wait=True)
        # Written whole, then renamed: the fixed replica waits for the name and reads it at once.
        tmp = Path(a["out"]) / f"trainer_v{v}.tmp"
        torch.save({"state": {k: p.detach().clone() for k, p in model.state_dict().items()},
                    "loss": float(loss)}, tmp)
        os.replace(tmp, Path(a["out"]) / f"trainer_v{v}.pt")
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
    if a.get("join"):  # SGLang TP rank `rank` of an engine joining the running job
        wait_for(Path(a["out"]) / "fixed_v2")
        rollout = adapter.join_rollout(a["address"], a["secret"], TP, rank, engine_id=SERVER,
                                       timeout_ms=300000)
        hf_config = sglang_model_config(a, f"worker{rank}").hf_config
    else:
        rollout = wsync.Rollout(wsync.Bootstrap.explicit(rank, 1, TP, a["address"],
                                                         a["secret"]),
                                replica=0, timeout_ms=300000)
        hf_config = llama_config()
    tensors = adapter.rank_tensors(rollout, models.llama_tp_layout(hf_config, rank, TP),
                                   dtype=torch.float32)
    pointers = {n: t.data_ptr() for n, t in tensors.items()}
    rollout.commit()
    if a.get("join"):  # the engine joined once every TP rank committed
        (Path(a["out"]) / f"committed{rank}").write_text("")
        if rank == 0:
            for r in range(TP):
                wait_for(Path(a["out"]) / f"committed{r}")
            (Path(a["out"]) / "joined").write_text("")
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
    stats = rollout.version_stats()
    (Path(a["out"]) / f"worker{rank}.json").write_text(json.dumps({
        "replica": rollout.replica, "first_version": stats.first_version,
        "first_version_from_peer": stats.first_version_from_peer}))
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


def fixed(a: dict) -> None:
    """The job's fixed rollout (joining mode): whole HF tensors, their names and shapes derived
    from SGLang's ModelConfig; bit-checks every version against the trainer's state."""
    from wsync.engines import sglang as adapter

    out = Path(a["out"])
    rollout = wsync.Rollout(wsync.Bootstrap.explicit(0, 1, 1, a["address"], a["secret"]),
                            replica=0, timeout_ms=300000)
    rollout.register_slots(adapter.hf_tensors(sglang_model_config(a, "fixed"),
                                              torch.float32))
    rollout.commit()
    for v in range(1, a["versions"] + 1):
        while (rollout.newest_version() or 0) < v:
            rollout.wait_for_version(v - 1, timeout_ms=120000)
        got = {n: t.clone() for n, t in rollout.named_tensors(v)}
        wait_for(out / f"trainer_v{v}.pt")
        want = torch.load(out / f"trainer_v{v}.pt")["state"]
        assert got.keys() == want.keys(), (sorted(got)[:3], sorted(want)[:3])
        for n, t in want.items():
            assert torch.equal(got[n], t), (v, n)
        (out / f"fixed_v{v}").write_text("")
    wait_for(out / "worker0.json")  # the joined engine is done (it may still cold-start)
    rollout.close()


if __name__ == "__main__":
    run(lambda: {"trainer": trainer, "worker": worker, "scheduler": scheduler,
                 "fixed": fixed}[sys.argv[1]](
        json.loads(sys.argv[2])))
