"""Processes of test_join.py: a wsync job whose rollout replicas join, crash and rejoin at run time.

    python join_jobs.py join <role> '<json args>'   (conftest.Job's `scenario role args`)

trainer  trainer rank args["rank"] of 2 (fixed membership, explicit bootstrap) holds its dim-0
         chunk of every tensor; publishes versions 1, 2, ... (each waited for, `pause_s` apart)
         until the version in the file `stop` (written by the test), records which replicas
         took / lost each version (trainer<r>.json). A failed publish fails the process.
fixed    replica 0 (fixed membership: rank 0 of 1): reads EVERY version in order, bit-checked,
         until the one in `stop` (a version it cannot read any more fails it: it missed one);
         progress in fixed.progress.
joiner   replica args["replica"] joining the running job from Python with only the coordinator's
         address and secret, replica size 1 and rank 0 (wsync.Bootstrap.join). Writes its first
         version's wsync.VersionStats (<name>.first.json), then bit-checks every version it reads
         (the newest each time) until `stop`; progress in <name>.progress. The test kill -9s one.
The value of every tensor at version v is a function of (v, tensor): every byte is checked.
args["device"] "cuda" puts the trainers' shards and the rollouts' slots in GPU memory (the joiner is
then cold-filled over CUDA IPC) and uses the larger SHAPES_DEVICE (about 1.2 GB of float32); the
joiner then also times loading its first version's tensors from a safetensors file onto the GPU
(the way a restarted engine would get them without a peer).
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from pathlib import Path

import torch

import wsync
from wsync import layout
from job_main import run

SHAPES_HOST = {"embed": (96, 40), "layers.0.w": (130, 33), "norm": (40,), "head.bias": (7,)}
SHAPES_DEVICE = {"embed": (32000, 4096), "layers.0.w": (11008, 4096), "layers.1.w": (4096, 11008),
                 "norm": (4096,), "head.bias": (7,)}
SHAPES = SHAPES_HOST


def use_device(a: dict) -> torch.device:
    """The job's device (args["device"], default cpu); on cuda the shapes are SHAPES_DEVICE."""
    global SHAPES
    dev = torch.device(a.get("device", "cpu"))
    SHAPES = SHAPES_DEVICE if dev.type == "cuda" else SHAPES_HOST
    return dev


def value(name: str, v: int, dev: torch.device = torch.device("cpu")) -> torch.Tensor:
    g = torch.Generator(device=dev).manual_seed(v * 1009 + sorted(SHAPES).index(name))
    return torch.randn(SHAPES[name], generator=g, device=dev)


def stop_version(out: Path) -> int:
    try:
        return int((out / "stop").read_text())
    except (FileNotFoundError, ValueError):
        return 1 << 62


def write(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def trainer(a: dict) -> None:
    out, rank = Path(a["out"]), a["rank"]
    dev = use_device(a)
    buffers, specs = {}, {}
    for name, shape in SHAPES.items():
        lo, hi = layout.chunk_range(shape[0], rank, 2)
        if hi > lo:
            buffers[name] = torch.zeros((hi - lo,) + shape[1:], device=dev)
            specs[name] = layout.chunk_shard(name, shape, 0, rank, 2)
    t = wsync.Trainer(wsync.Bootstrap.explicit(rank, 2, 1, a["address"], a["secret"]),
                      timeout_ms=120000)
    t.register_tensors(buffers, specs=specs)
    t.commit()
    record = []
    v = 0
    while v < stop_version(out):
        v += 1
        for name, buf in buffers.items():
            lo, hi = layout.chunk_range(SHAPES[name][0], rank, 2)
            buf.copy_(value(name, v, dev)[lo:hi])
        if dev.type == "cuda":
            torch.cuda.synchronize()
        req = t.publish(v, wait=True)
        record.append({"version": v, "ready": req.replicas(wsync.Replicas.READY),
                       "lost": req.replicas(wsync.Replicas.LOST),
                       "skipped": req.replicas(wsync.Replicas.SKIPPED), "t": time.time()})
        write(out / f"trainer{rank}.json", json.dumps(record))
        time.sleep(a["pause_s"])
    t.close()


def check(rollout: "wsync.Rollout", version: int = wsync.VERSION_NEWEST) -> int:
    """Bit-checks every tensor of `version` (default the newest ready) under one lease; returns
    the version checked."""
    with rollout.lease(version) as lease:
        tensors = rollout.lease_tensors(lease)
        assert sorted(tensors) == sorted(SHAPES), sorted(tensors)
        for name, tensor in tensors.items():
            want = value(name, lease.version, tensor.device)
            if not torch.equal(tensor.view(torch.int32), want.view(torch.int32)):
                raise AssertionError(f"version {lease.version}: {name} differs")
        return lease.version


def fixed(a: dict) -> None:
    out = Path(a["out"])
    dev = use_device(a)
    r = wsync.Rollout(wsync.Bootstrap.explicit(0, 2, 1, a["address"], a["secret"]), replica=0,
                      num_slots=4, timeout_ms=120000)
    r.register_slots({n: (s, torch.float32) for n, s in SHAPES.items()}, device=dev)
    r.commit()
    v = 0
    while v < stop_version(out):
        v += 1
        while (r.newest_version() or 0) < v:
            r.wait_for_version(after=v - 1, timeout_ms=60000)
        check(r, v)  # NotReadyError here: version v was overwritten before it was read
        write(out / "fixed.progress", str(v))
    r.close()


def safetensors_load_seconds(r: "wsync.Rollout", version: int, path: Path) -> float:
    """Seconds to load `version`'s tensors from a safetensors file onto the GPU (file written
    first, so the load reads a warm page cache), every byte compared with the slot's. The slot's
    bytes are copied out under a short lease; the file work runs without one."""
    from safetensors.torch import load_file, save_file
    with r.lease(version) as lease:
        host = {n: t.contiguous().cpu() for n, t in r.lease_tensors(lease).items()}
    save_file(host, str(path))
    torch.cuda.synchronize()
    t0 = time.time()
    loaded = load_file(str(path), device="cuda")
    torch.cuda.synchronize()
    seconds = time.time() - t0
    for n, t in host.items():
        assert torch.equal(loaded[n].cpu().view(torch.int32), t.view(torch.int32)), n
    path.unlink()
    return seconds


def joiner(a: dict) -> None:
    out, name = Path(a["out"]), a["name"]
    dev = use_device(a)
    t0 = time.time()
    r = wsync.Rollout(wsync.Bootstrap.join(a["address"], a["secret"], replica_size=1,
                                           replica_rank=0),
                      replica=a["replica"], timeout_ms=120000)
    r.register_slots({n: (s, torch.float32) for n, s in SHAPES.items()}, device=dev)
    r.commit()
    first = r.wait_for_version(after=0, timeout_ms=60000)
    wall_s = time.time() - t0
    stats = r.version_stats()
    assert stats is not None
    seen = [check(r, first)]
    extra = {"bytes": sum(4 * torch.Size(s).numel() for s in SHAPES.values())}
    if dev.type == "cuda":  # after the first check: versions move on meanwhile
        extra["safetensors_load_s"] = safetensors_load_seconds(r, wsync.VERSION_NEWEST,
                                                               out / f"{name}.st")
    write(out / f"{name}.first.json", json.dumps(dict(dataclasses.asdict(stats), wall_s=wall_s,
                                                      newest_at_first=first, **extra)))
    write(out / f"{name}.progress", json.dumps(seen))
    while seen[-1] < stop_version(out):
        r.wait_for_version(after=seen[-1], timeout_ms=60000)
        seen.append(check(r))
        write(out / f"{name}.progress", json.dumps(seen))
    r.close()


if __name__ == "__main__":
    role, args = sys.argv[2], json.loads(sys.argv[3])
    run(lambda: {"trainer": trainer, "fixed": fixed, "joiner": joiner}[role](args))
