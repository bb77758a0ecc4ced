"""The "wsync" CheckpointEngine in the REAL verl 0.9.1 (its registry and base class), driven
through the calls verl's CheckpointEngineManager makes. verl pins other transformers and needs
ray: its own venv, $WSYNC_VERL_PYTHON (default /opt/wsync-verl-venv/bin/python); skipped when
that Python cannot import verl's checkpoint engine and wsync."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

import wsync
from conftest import HERE, engine_pythonpath
from test_vllm import wait_all

VERL_PYTHON = os.environ.get("WSYNC_VERL_PYTHON", "/opt/wsync-verl-venv/bin/python")


def _verl_ready() -> str:
    if not Path(VERL_PYTHON).exists():
        return f"{VERL_PYTHON} does not exist (a venv with verl==0.9.1 and wsync installed)"
    r = subprocess.run([VERL_PYTHON, "-c", "import wsync.engines.verl as v; assert v.HAVE_VERL"],
                       capture_output=True, text=True, timeout=300)
    return "" if r.returncode == 0 else f"verl does not import there: {r.stderr[-300:]}"


def test_verl_checkpoint_engine_moves_each_version(tmp_path):
    why = _verl_ready()
    if why:
        pytest.skip(why)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=engine_pythonpath())
    with wsync.Coordinator(trainers=2, rollouts=1, timeout_ms=300000, quiet=False) as c:
        base = {"address": c.address, "secret": c.secret, "actors": 2, "versions": 3,
                "out": str(tmp_path)}
        procs = []
        for role, rank in (("actor", 0), ("actor", 1), ("rollout", 0)):
            procs.append(subprocess.Popen(
                [VERL_PYTHON, str(HERE / "verl_jobs.py"), role, json.dumps(dict(base, rank=rank))],
                env=env, stdout=open(tmp_path / f"{role}{rank}.log", "w"),
                stderr=subprocess.STDOUT))
        codes = wait_all(procs, timeout_s=400)
        logs = "".join((tmp_path / n).read_text()[-2500:]
                       for n in ("actor0.log", "actor1.log", "rollout0.log"))
        assert codes == [0, 0, 0], logs + c.stderr
    assert json.loads((tmp_path / "verl_ok.json").read_text()) == {"versions": 3}


def test_verl_added_replica_joins_and_removed_replica_leaves(tmp_path):
    """verl's elastic calls mapped to wsync membership: a replica present at the first update is
    a fixed member; one added later (add_replicas: build_topology sees the others in the job)
    joins the running job, gets its first version from the running replica (peer cold start,
    bit-checked), follows later versions, and leaves (close, as remove_replicas does); the
    actors' last version completes without it."""
    why = _verl_ready()
    if why:
        pytest.skip(why)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=engine_pythonpath())
    with wsync.Coordinator(trainers=2, rollouts=1, timeout_ms=300000, quiet=False) as c:
        base = {"address": c.address, "secret": c.secret, "actors": 2, "versions": 6,
                "out": str(tmp_path), "elastic": True}
        procs, names = [], []
        for role, rank in (("actor", 0), ("actor", 1), ("rollout", 0), ("added", 0)):
            names.append(f"{role}{rank}.log")
            procs.append(subprocess.Popen(
                [VERL_PYTHON, str(HERE / "verl_jobs.py"), role, json.dumps(dict(base, rank=rank))],
                env=env, stdout=open(tmp_path / names[-1], "w"), stderr=subprocess.STDOUT))
        codes = wait_all(procs, timeout_s=400)
        logs = "".join((tmp_path / n).read_text()[-2500:] for n in names)
        assert codes == [0, 0, 0, 0], logs + c.stderr
        coordinator_log = c.stderr
    added = json.loads((tmp_path / "added.json").read_text())
    assert added["first_version_from_peer"] is True, added
    seen = added["seen"]
    assert seen[0] >= 2 and seen[-1] == 5 and seen == sorted(set(seen)), added
    assert "cold-started from replica 0" in coordinator_log
    for r in range(2):  # the last version reached replica 0 only: the added one had left
        assert json.loads((tmp_path / f"actor{r}_last_ready.json").read_text()) == [0]


def test_verl_manager_adds_and_removes_replicas_through_ray(tmp_path):
    """verl's own CheckpointEngineManager, RolloutReplica, CheckpointEngineWorker and
    RayWorkerGroup on a local Ray cluster (verl_ray_jobs.py says which parts are not verl's: the
    actors' policy and the inference server behind each rollout worker). Replica 1, added by
    add_replicas after step 2, joins at verl's init_process_group and is filled by replica 0
    (peer cold start), receives steps 3-4, and is removed with wsync.engines.verl.remove_replicas
    (its worker leaves through verl's execute_checkpoint_engine): step 5 completes without it.
    Replica 2, added after step 5, is killed (ray.kill) and removed with verl's own
    remove_replicas: step 7 completes without it. Every tensor every replica gets is
    bit-checked; the rollouts derive the tensors from model_path (no hf_shapes)."""
    why = _verl_ready()
    if why:
        pytest.skip(why)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=engine_pythonpath(),
               RAY_DEDUP_LOGS="0")
    with wsync.Coordinator(trainers=2, rollouts=1, timeout_ms=300000, quiet=False) as c:
        args = {"address": c.address, "secret": c.secret, "actors": 2, "out": str(tmp_path)}
        log = tmp_path / "driver.log"
        proc = subprocess.Popen([VERL_PYTHON, str(HERE / "verl_ray_jobs.py"), "driver",
                                 json.dumps(args)], env=env, stdout=open(log, "w"),
                                stderr=subprocess.STDOUT)
        codes = wait_all([proc], timeout_s=550)
        assert codes == [0], log.read_text()[-6000:] + c.stderr
        coordinator_log = c.stderr
    record = json.loads((tmp_path / "ray.json").read_text())
    received = sorted(p.name for p in tmp_path.glob("replica*_v*"))
    assert received == sorted([f"replica0_v{v}" for v in range(1, 8)] +
                              ["replica1_v3", "replica1_v4", "replica2_v6"]), received
    r1 = record["r1"]["topology"]["replica"]
    r2 = record["r2"]["topology"]["replica"]
    assert r1 >= 4096 and r2 >= 4096 and r1 != r2, record
    ready = {t["step"]: sorted(t["ready_wsync_replicas"]) for t in record["timeline"]}
    # An added replica is in the trainers' versions from the first one started after the
    # coordinator put it in the sequencer. Under load the actors' next step can start before that
    # (add_replicas returns at the cold start); replica 0 then fills the joiner with that version
    # too (docs/membership.md, "Its later versions"), which `received` above shows and the worker
    # bit-checked. So steps 3-4 and 6 list the added replica, or only replica 0.
    assert {s: ready[s] for s in (1, 2, 5, 7)} == {1: [0], 2: [0], 5: [0], 7: [0]}, \
        record["timeline"]
    for s, added in ((3, r1), (4, r1), (6, r2)):
        assert ready[s] in ([0], sorted([0, added])), record["timeline"]
    for name, first in (("r1", 2), ("r2", 5)):  # filled by replica 0 with the step before
        stats = record[name]["version_stats"]
        assert stats["first_version_from_peer"] is True and stats["first_version"] == first, \
            record[name]
    assert f"replica {r1} cold-started from replica 0" in coordinator_log
    print("verl via Ray:", json.dumps(record["timeline"]))
