"""Worker processes of test_fsdp.py: trainers whose model is wrapped by FSDP2 (fully_shard), on
CPU under torch.distributed with gloo, publishing straight from their local DTensor shards.

    python fsdp_jobs.py fsdp trainer|rollout_tp '<json args>'
    torchrun --nproc-per-node N fsdp_jobs.py fsdp trainer '{"torchrun": true, ...}'

trainer: a transformers Llama; mesh "1d": fully_shard over all trainers (Shard(0), uneven
         chunks); mesh "2d": a (dp, tp) mesh, q/k/v/gate/up ColwiseParallel and o/down
         RowwiseParallel over tp, then fully_shard over dp (_StridedShard(0) + Shard(0) and
         Shard(0) + Shard(1) parameters). The model is registered with one register_module call;
         the full parameters (full_tensor(), gathered here for the test only) are saved per
         version by trainer rank 0.
rollout_tp: jobs.llama_rollout_tp (vLLM's TP layout with fused qkv / gate_up, copy flip).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

import wsync
from jobs import fixed_batch, llama_rollout_tp, tiny_llama
from job_main import run

TP_PLAN = {"self_attn.q_proj": "col", "self_attn.k_proj": "col", "self_attn.v_proj": "col",
           "self_attn.o_proj": "row", "mlp.gate_proj": "col", "mlp.up_proj": "col",
           "mlp.down_proj": "row"}


def shard_model(model: torch.nn.Module, mesh_kind: str, world: int):
    """Wraps `model` in place: FSDP2 alone (1d) or TP inside FSDP2 (2d). Returns the mesh."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    if mesh_kind == "1d":
        mesh = init_device_mesh("cpu", (world,))
        dp_mesh = mesh
    else:
        from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                       parallelize_module)

        mesh = init_device_mesh("cpu", (world // 2, 2), mesh_dim_names=("dp", "tp"))
        dp_mesh = mesh["dp"]
        for layer in model.model.layers:
            parallelize_module(layer, mesh["tp"], {
                name: ColwiseParallel() if kind == "col" else RowwiseParallel()
                for name, kind in TP_PLAN.items()})
    for layer in model.model.layers:
        fully_shard(layer, mesh=dp_mesh)
    fully_shard(model, mesh=dp_mesh)
    return mesh


def fsdp_trainer(args: dict) -> None:
    """A trainer started by the test (explicit rank), or by torchrun (args["torchrun"]: rank,
    world and rendezvous from torchrun's environment, wsync's job from WSYNC_* variables)."""
    import torch.distributed as dist

    if args.get("torchrun"):
        dist.init_process_group("gloo")  # env://: RANK, WORLD_SIZE, MASTER_ADDR set by torchrun
        rank, world = dist.get_rank(), dist.get_world_size()
        bootstrap = wsync.Bootstrap.from_torch_distributed()
    else:
        rank, world = args["rank"], args["trainers"]
        dist.init_process_group("gloo", rank=rank, world_size=world,
                                init_method=f"tcp://127.0.0.1:{args['dist_port']}")
        bootstrap = wsync.Bootstrap.from_torch_distributed(args["address"], args["rollouts"],
                                                           args["secret"])
    model = tiny_llama()  # the same seeded init on every rank: FSDP2 keeps each rank's chunk
    model.train()
    shard_model(model, args["mesh"], world)
    placements = {n: [repr(p) for p in param.placements]
                  for n, param in model.named_parameters()}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    batch = fixed_batch()
    trainer = wsync.Trainer(bootstrap, timeout_ms=300000)
    names = trainer.register_module(model)  # the one call: placements -> boxes
    trainer.commit()
    out = Path(args["out"])
    for version in range(1, args["versions"] + 1):
        loss = model(input_ids=batch, labels=batch).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        trainer.publish(version)  # snapshot: the next step may start at once
        # The test's reference only: every parameter gathered (a collective on every rank).
        full = {n: p.full_tensor().detach().clone() for n, p in model.named_parameters()}
        if rank == 0:
            torch.save({"state": full, "loss": float(loss)}, out / f"trainer_v{version}.pt")
    trainer.last_request.wait()
    boxes = {e.name: [[list(b.offset), list(b.extent)] for b in e.boxes] for e in trainer.entries}
    Path(out, f"trainer{rank}.json").write_text(json.dumps(
        {"names": names, "boxes": boxes, "placements": placements}))
    trainer.close()
    dist.destroy_process_group()


SCENARIOS = {("fsdp", "trainer"): fsdp_trainer, ("fsdp", "rollout_tp"): llama_rollout_tp}


if __name__ == "__main__":
    run(lambda: SCENARIOS[(sys.argv[1], sys.argv[2])](json.loads(sys.argv[3])))
