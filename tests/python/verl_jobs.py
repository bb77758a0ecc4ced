"""Worker processes of test_verl.py, run by a Python that has the real verl installed.

    python verl_jobs.py actor|rollout '<json args>'

The engine comes from verl's CheckpointEngineRegistry ("wsync"), its topology from the class's
build_topology, and each rank calls init_process_group / send_weights / receive_weights /
finalize as verl's CheckpointEngineManager does.
"""
from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import torch
from job_main import run


def weights(version: int):
    """The policy at `version`: the same on every actor rank (as verl's per-tensor gather)."""
    g = torch.Generator().manual_seed(11)
    base = {"model.embed_tokens.weight": torch.randn(13, 8, generator=g),
            "model.layers.0.mlp.up_proj.weight": torch.randn(12, 8, generator=g),
            "model.norm.weight": torch.randn(8, generator=g)}
    return {n: t * version for n, t in base.items()}


def engine_for(a: dict, role: str, rank: int):
    import wsync.engines.verl  # noqa: F401  (registers "wsync")
    from verl.checkpoint_engine.base import CheckpointEngineRegistry

    shapes = {n: list(t.shape) for n, t in weights(1).items()}
    engine = CheckpointEngineRegistry.new("wsync", bucket_size=0,
                                          coordinator_address=a["address"], secret=a["secret"],
                                          hf_shapes=shapes, dtype=torch.float32,
                                          timeout_ms=300000)
    actor_kw, rollout_kw = type(engine).build_topology(a["actors"], 1, [engine.prepare()])
    kw = actor_kw if role == "actor" else rollout_kw
    engine.init_process_group(**{k: v[rank] for k, v in kw.items()})
    return engine


async def actor(a: dict) -> None:
    engine = engine_for(a, "actor", a["rank"])
    for v in range(1, a["versions"] + 1):
        await engine.send_weights(iter(weights(v).items()), global_steps=v)
        engine.finalize()
    engine.close()


async def rollout(a: dict) -> None:
    engine = engine_for(a, "rollout", 0)
    for v in range(1, a["versions"] + 1):
        got = {n: t.clone() async for n, t in engine.receive_weights(global_steps=v)}
        want = weights(v)
        assert got.keys() == want.keys(), (got.keys(), want.keys())
        for n in want:
            assert torch.equal(got[n], want[n]), (v, n)
        engine.finalize()
    Path(a["out"], "verl_ok.json").write_text(json.dumps({"versions": a["versions"]}))
    engine.close()


if __name__ == "__main__":
    run(lambda: asyncio.run({"actor": actor, "rollout": rollout}[sys.argv[1]](
        json.loads(sys.argv[2]))))
