"""Worker processes of test_verl.py, run by a Python that has the real verl installed.

    python verl_jobs.py actor|rollout|added '<json args>'

Elastic (args["elastic"]): the actors publish 6 versions 0.3 s apart; "rollout" is the replica
present at the first update (fixed member); "added" is a replica verl's manager added later
(add_replicas): its build_topology metadata says the others are in the job already, so it joins
the running job (replica_size 1) with a replica id from its worker id, is filled by the running
replica (peer cold start), reads later versions, and leaves (close, as wsync.engines.verl.
remove_replicas does) before the last version, which the actors still complete.

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


def wait_for(path: Path, timeout_s: float = 300) -> None:
    import time

    deadline = time.time() + timeout_s
    while not path.exists():
        if time.time() > deadline:
            raise TimeoutError(f"{path} did not appear")
        time.sleep(0.02)


def engine_for(a: dict, role: str, rank: int):
    import wsync.engines.verl  # noqa: F401  (registers "wsync")
    from verl.checkpoint_engine.base import CheckpointEngineRegistry

    shapes = {n: list(t.shape) for n, t in weights(1).items()}
    engine = CheckpointEngineRegistry.new("wsync", bucket_size=0,
                                          coordinator_address=a["address"], secret=a["secret"],
                                          hf_shapes=shapes, dtype=torch.float32,
                                          timeout_ms=300000)
    if role == "added":  # verl's second update after add_replicas: the others are in the job
        placed = {"wsync_topology": {"role": "trainer", "num_rollouts": 1}}
        fixed = {"wsync_topology": {"role": "rollout", "rank": 0, "num_trainers": a["actors"],
                                    "num_rollouts": 1, "replica": 0, "replica_size": 0,
                                    "replica_rank": 0}}
        metadata = [placed] * a["actors"] + [fixed, engine.prepare()]
        _, rollout_kw = type(engine).build_topology(a["actors"], 2, metadata)
        kw = {k: v[1] for k, v in rollout_kw.items()}
        assert kw["replica_size"] == 1 and kw["replica"] >= 4096, kw
        engine.init_process_group(**kw)
        return engine
    actor_kw, rollout_kw = type(engine).build_topology(a["actors"], 1, [engine.prepare()])
    kw = actor_kw if role == "actor" else rollout_kw
    engine.init_process_group(**{k: v[rank] for k, v in kw.items()})
    return engine


async def actor(a: dict) -> None:
    engine = engine_for(a, "actor", a["rank"])
    for v in range(1, a["versions"] + 1):
        if a.get("elastic") and v == 4:
            wait_for(Path(a["out"], "added_joined"))
        if a.get("elastic") and v == a["versions"]:
            wait_for(Path(a["out"], "added_left"))
        await engine.send_weights(iter(weights(v).items()), global_steps=v)
        engine.finalize()
        if a.get("elastic"):
            await asyncio.sleep(0.3)
    if a.get("elastic"):
        lost = engine.trainer.last_request.replicas(__import__("wsync").Replicas.READY)
        Path(a["out"], f"actor{a['rank']}_last_ready.json").write_text(json.dumps(lost))
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
        Path(a["out"], f"rollout_v{v}").write_text("")
    Path(a["out"], "verl_ok.json").write_text(json.dumps({"versions": a["versions"]}))
    engine.close()


async def added(a: dict) -> None:
    """A replica added by verl's add_replicas after the first update: joins, is peer-filled."""
    wait_for(Path(a["out"], "rollout_v2"))
    engine = engine_for(a, "added", 0)
    got = {n: t.clone() async for n, t in engine.receive_weights()}
    first = engine.rollout.version
    stats = engine.rollout.version_stats()
    for n, t in weights(first).items():
        assert torch.equal(got[n], t), (first, n)
    Path(a["out"], "added_joined").write_text("")
    seen = [first]
    # Later versions: the newest each time (a version the actors started before the coordinator
    # could write to the joined replica is not sent to it), each bit-checked, up to the last but
    # one (the actors publish the last one after this replica left).
    while seen[-1] < a["versions"] - 1:
        got = {n: t.clone() async for n, t in engine.receive_weights()}
        v = engine.rollout.version
        for n, t in weights(v).items():
            assert torch.equal(got[n], t), (v, n)
        seen.append(v)
    engine.close()  # wsync.engines.verl.remove_replicas: the removed replica's workers leave
    Path(a["out"], "added.json").write_text(json.dumps({
        "seen": seen, "first_version_from_peer": stats.first_version_from_peer,
        "replica": engine.topology.get("replica")}))
    Path(a["out"], "added_left").write_text("")


if __name__ == "__main__":
    run(lambda: asyncio.run({"actor": actor, "rollout": rollout, "added": added}[sys.argv[1]](
        json.loads(sys.argv[2]))))
