"""Worker processes of the Python tests: trainers and rollouts of real multi-process wsync jobs.

    python jobs.py <scenario> <role> '<json args>'

Every worker writes what it saw under args["out"] (torch.save files, one per version) and exits
non-zero on any failure; the tests (test_jobs.py) compare the bytes. Scenarios:
  llama   transformers Llama trained by trainers that each register a dim-0 shard; rollout replica
          0 holds a vLLM-like TP layout (fused qkv / gate_up, copy flip), replica 1 a whole
          transformers model (pointer swap) whose logits are saved per version.
  dtensor trainers under torch.distributed (gloo, CPU) holding DTensor parameters (Shard(0)/(1)
          uneven, Replicate, _StridedShard); one rollout receives whole tensors.
  mismatch / errors   error paths (see test_errors.py).
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch

import wsync
from wsync import layout, models
from job_main import run

HERE = Path(__file__).resolve().parent


def tiny_llama_config(bias: bool = False):
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=250, hidden_size=64, intermediate_size=96,
                       num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                       head_dim=16, max_position_embeddings=64, attention_bias=bias,
                       tie_word_embeddings=False)


def tiny_llama(seed: int = 0):
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    model = LlamaForCausalLM(tiny_llama_config()).float()
    model.eval()  # no dropout; training below is still real (backward + optimizer step)
    return model


def fixed_batch():
    g = torch.Generator().manual_seed(1234)
    return torch.randint(0, 250, (2, 12), generator=g)


def bootstrap(args: dict, rank: int, trainers: int, rollouts: int) -> wsync.Bootstrap:
    if args.get("mpi"):
        return wsync.Bootstrap.mpi()
    return wsync.Bootstrap.explicit(rank, trainers, rollouts, args["address"], args["secret"])


# ---- llama -------------------------------------------------------------------------------------
def llama_trainer(args: dict) -> None:
    rank, trainers = args["rank"], args["trainers"]
    model = tiny_llama()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    batch = fixed_batch()
    # A dim-0 shard of every parameter (this rank's chunk, torch.chunk's rule), registered in place.
    shards, specs = {}, {}
    for name, p in model.named_parameters():
        lo, hi = layout.chunk_range(p.shape[0], rank, trainers)
        if hi > lo:
            shards[name] = p.data.narrow(0, lo, hi - lo)
            specs[name] = layout.chunk_shard(name, tuple(p.shape), 0, rank, trainers)
    trainer = wsync.Trainer(bootstrap(args, rank, trainers, args["rollouts"]),
                            timeout_ms=args.get("timeout_ms", 300000))
    trainer.register_tensors(shards, specs=specs)
    trainer.commit()
    out = Path(args["out"])
    for version in range(1, args["versions"] + 1):
        loss = model(input_ids=batch, labels=batch).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        trainer.publish(version)  # snapshot: the next step may start at once
        if rank == 0:
            with torch.no_grad():
                logits = model(input_ids=batch).logits
            torch.save({"state": {k: v.detach().clone() for k, v in model.state_dict().items()},
                        "logits": logits, "loss": float(loss)}, out / f"trainer_v{version}.pt")
    trainer.last_request.wait()
    trainer.close()


def llama_rollout_tp(args: dict) -> None:
    """Replica 0: TP ranks holding vLLM's fused layout (copy flip into their own tensors)."""
    rank, tp = args["rank"], args["tp"]
    config = tiny_llama_config()
    local = models.llama_tp_layout(config, rank, tp)
    tensors = {name: torch.zeros(t.shape, dtype=getattr(torch, args.get("dtype", "float32")))
               for name, t in local.items()}
    rollout = wsync.Rollout(bootstrap(args, rank, args["trainers"], args["rollouts"]), replica=0,
                            timeout_ms=300000)
    rollout.register_module(tensors, specs=models.specs_of(local), mode="copy_flip")
    rollout.commit()
    _follow(rollout, args, lambda v: torch.save({k: t.clone() for k, t in tensors.items()},
                                                Path(args["out"]) / f"tp{rank}_v{v}.pt"),
            f"tp{rank}")
    rollout.close()


def llama_rollout_hf(args: dict) -> None:
    """Replica 1: a whole transformers model whose parameters become views of the leased slot."""
    model = tiny_llama(seed=99)  # different init: every byte must come from wsync
    batch = fixed_batch()
    rollout = wsync.Rollout(bootstrap(args, args["rank"], args["trainers"], args["rollouts"]),
                            replica=1, timeout_ms=300000)
    rollout.register_module(model, mode="pointer_swap")
    rollout.commit()

    def record(v: int) -> None:
        with torch.no_grad():
            logits = model(input_ids=batch).logits
        torch.save({"logits": logits,
                    "state": {k: p.detach().clone() for k, p in model.named_parameters()}},
                   Path(args["out"]) / f"hf_v{v}.pt")

    _follow(rollout, args, record, "hf")
    rollout.close()


def _follow(rollout: "wsync.Rollout", args: dict, record, name: str) -> None:
    """Generation loop: at the start of every batch bring the model to the newest version and
    record each new version once, until the last one."""
    seen = []
    while not seen or seen[-1] < args["versions"]:
        with rollout.batch() as version:
            if version is not None and (not seen or version > seen[-1]):
                record(version)
                seen.append(version)
            elif version is not None:
                rollout.wait_for_version(version, timeout_ms=30000)
            else:
                rollout.wait_for_version(0, timeout_ms=30000)
    Path(args["out"], f"seen_{name}.json").write_text(json.dumps(seen))


# ---- dtensor -----------------------------------------------------------------------------------
def dtensor_params(mesh):
    """Parameters of several placements, from the same seeded full tensors on every rank."""
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.placement_types import _StridedShard

    torch.manual_seed(7)
    full = {"w_rows": torch.randn(7, 5), "w_cols": torch.randn(6, 9), "w_rep": torch.randn(3, 4),
            "w_strided": torch.randn(8, 3), "w_3d": torch.randn(3, 5, 4)}
    placements = {"w_rows": [Shard(0)], "w_cols": [Shard(1)], "w_rep": [Replicate()],
                  "w_strided": [_StridedShard(0, split_factor=2)], "w_3d": [Shard(1)]}
    module = torch.nn.Module()
    for name, t in full.items():
        module.register_parameter(name, torch.nn.Parameter(
            distribute_tensor(t, mesh, placements[name])))
    return module, full


def dtensor_trainer(args: dict) -> None:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    dist.init_process_group("gloo", rank=args["rank"], world_size=args["trainers"],
                            init_method=f"tcp://127.0.0.1:{args['dist_port']}")
    mesh = init_device_mesh("cpu", (args["trainers"],))
    module, initial = dtensor_params(mesh)
    # torch 2.11 cannot redistribute a _StridedShard on a 1-D mesh (its backward fails), so that
    # parameter is published as distributed and checked against its initial value.
    trained = {n: p for n, p in module.named_parameters() if n != "w_strided"}
    opt = torch.optim.SGD(trained.values(), lr=0.1)
    trainer = wsync.Trainer(wsync.Bootstrap.from_torch_distributed(
        args["address"], args["rollouts"], args["secret"]), timeout_ms=300000)
    names = trainer.register_module(module, name_map=lambda n: "model." + n)
    trainer.commit()
    out = Path(args["out"])
    for version in range(1, args["versions"] + 1):
        loss = sum((p * p).sum() for p in trained.values())  # DTensor math over gloo
        opt.zero_grad()
        loss.backward()
        opt.step()
        trainer.publish(version, wait=True)
        full = {n: p.full_tensor() for n, p in trained.items()}  # the test's reference only
        full["w_strided"] = initial["w_strided"]
        if args["rank"] == 0:
            torch.save(full, out / f"trainer_v{version}.pt")
    # The boxes wsync derived, and torch's own view of the contiguous shards, for the test.
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    boxes = {e.name: [[list(b.offset), list(b.extent)] for b in e.boxes] for e in trainer.entries}
    torch_view = {}
    for n, p in module.named_parameters():
        if n != "w_strided":
            shape, offset = compute_local_shape_and_global_offset(p.shape, mesh, p.placements)
            torch_view["model." + n] = [[list(offset), list(shape)]]
    Path(out, f"boxes_{args['rank']}.json").write_text(json.dumps(
        {"names": names, "boxes": boxes, "torch": torch_view}))
    trainer.close()
    dist.destroy_process_group()


def dtensor_rollout(args: dict) -> None:
    shapes = {"w_rows": (7, 5), "w_cols": (6, 9), "w_rep": (3, 4), "w_strided": (8, 3),
              "w_3d": (3, 5, 4)}
    rollout = wsync.Rollout(wsync.Bootstrap.explicit(0, args["trainers"], 1, args["address"],
                                                     args["secret"]), timeout_ms=300000)
    rollout.register_slots({f"model.{n}": (s, torch.float32) for n, s in shapes.items()})
    rollout.commit()
    v = rollout.wait_for_version(args["versions"] - 1, timeout_ms=60000)
    got = {name: t.clone() for name, t in rollout.named_tensors(v)}
    torch.save({"version": rollout.last_named_version, "tensors": got},
               Path(args["out"]) / "rollout.pt")
    rollout.close()


# ---- errors ------------------------------------------------------------------------------------
def mismatch(args: dict) -> None:
    """A trainer offers w [4, 4]; the rollout asks for w [4, 5]: commit fails on both sides."""
    b = bootstrap(args, 0, 1, 1)
    if args["side"] == "trainer":
        endpoint = wsync.Trainer(b, timeout_ms=10000)
        endpoint.register_tensors({"w": torch.ones(4, 4)})
    else:
        endpoint = wsync.Rollout(b, timeout_ms=10000)
        endpoint.register_module({"w": torch.zeros(4, 5)})
    try:
        endpoint.commit()
        result = {"error": None}
    except wsync.WsyncError as e:
        result = {"error": type(e).__name__, "status": e.status_name, "message": e.message}
    Path(args["out"], f"mismatch_{args['side']}.json").write_text(json.dumps(result))
    endpoint.ctx.abort()


def wait_for_file(path: Path, timeout_s: float = 120) -> None:
    deadline = time.time() + timeout_s
    while not path.exists() and time.time() < deadline:
        time.sleep(0.01)


def errors(args: dict) -> None:
    """Calls out of order and waits that time out, each recorded with wsync's status and message;
    then a normal version goes through (the errors left the job usable)."""
    b = bootstrap(args, 0, 1, 1)
    seen = {}

    def record(what, fn):
        try:
            fn()
            seen[what] = None
        except wsync.WsyncError as e:
            seen[what] = [type(e).__name__, e.status_name, e.message]

    if args["side"] == "trainer":
        t = wsync.Trainer(b, timeout_ms=300000)
        t.register_tensors({"w": torch.arange(12.).view(3, 4)})
        record("publish_before_commit", lambda: t.ctx.publish(1))
        t.commit()
        # The rollout first checks that no version is ready yet (stats_before), then we publish.
        marker = Path(args["out"], "stats_before_done")
        deadline = time.time() + 120
        while not marker.exists() and time.time() < deadline:
            time.sleep(0.01)
        request = t.publish(2, wait=True)
        stats = t.version_stats()
        seen["delivered"] = {"ready": request.replicas(wsync.Replicas.READY),
                             "skipped": request.replicas(wsync.Replicas.SKIPPED),
                             "lost": request.replicas(wsync.Replicas.LOST),
                             "version": stats.version, "bytes": stats.bytes,
                             "replicas_ready": stats.replicas_ready}
        record("version_not_increasing", lambda: t.publish(1))
        # Stay in the job until the rollout's timeout checks ran (trainers that left would end its
        # waits with TrainersDoneError instead), then leave and tell it.
        wait_for_file(Path(args["out"], "rollout_waits_done"))
        t.close()
        Path(args["out"], "trainer_closed").write_text("")
    else:
        r = wsync.Rollout(b, timeout_ms=300000)
        r.register_slots({"w": ((3, 4), torch.float32)})
        record("acquire_before_commit", lambda: r.ctx.acquire())
        r.commit()
        seen["stats_before"] = r.version_stats()  # None: no version ready yet
        Path(args["out"], "stats_before_done").write_text("")
        import threading

        called = threading.Event()
        watched = []
        watcher = r.on_new_version(lambda v: (watched.append(v), called.set()), poll_ms=50)
        record("wait_timeout", lambda: r.wait_for_version(after=5, timeout_ms=200))
        record("acquire_gone_version", lambda: r.ctx.acquire(77))
        v = r.wait_for_version(0, timeout_ms=60000)
        seen["named"] = {n: x.tolist() for n, x in r.named_tensors(v)}
        stats = r.version_stats()
        seen["stats"] = {"version": stats.version, "lag": stats.lag,
                         "newest_started": stats.newest_started, "age_ms": stats.age_ms}
        called.wait(30)
        watcher.stop()
        seen["watched"] = watched
        Path(args["out"], "rollout_waits_done").write_text("")
        # Every trainer left: a wait for a newer version ends at once, naming the last version.
        wait_for_file(Path(args["out"], "trainer_closed"))
        deadline = time.time() + 30
        while time.time() < deadline:
            record("wait_after_trainers_done", lambda: r.wait_for_version(after=5, timeout_ms=200))
            if seen["wait_after_trainers_done"][0] != "WsyncTimeoutError":
                break
        r.close()
    Path(args["out"], f"errors_{args['side']}.json").write_text(json.dumps(seen))


SCENARIOS = {
    ("errors", "any"): errors,
    ("llama", "trainer"): llama_trainer, ("llama", "rollout_tp"): llama_rollout_tp,
    ("llama", "rollout_hf"): llama_rollout_hf, ("dtensor", "trainer"): dtensor_trainer,
    ("dtensor", "rollout"): dtensor_rollout, ("mismatch", "any"): mismatch,
}


def main() -> None:
    scenario, role = sys.argv[1], sys.argv[2]
    args = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
    if args.get("mpi_rank_from_env"):
        args["rank"] = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0")) - args["mpi_rank_base"]
    run(lambda: SCENARIOS[(scenario, role)](args))


if __name__ == "__main__":
    main()
