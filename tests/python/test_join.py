"""Rollout replicas that join a running job from Python, are cold-filled by a peer, crash and
rejoin (issue 20), under a standalone wsync-coordinator (explicit bootstrap), with real
processes (join_jobs.py has the roles):

  2 trainers publish versions every 50 ms; replica 0 (fixed membership) reads every one of them.
  Replica B joins mid-run with only the coordinator's address and secret, replica size 1 and
  rank 0: its first version is copied from replica 0 (first_version_from_peer), every version it
  reads is bit-checked. B is killed with SIGKILL: the trainers' publishes keep completing,
  replica 0 misses no version. B is started again with the same replica id and rejoins (cold
  start from replica 0 again) and reads until the last version.
On a GPU the same scenario runs again in device memory (about 1.2 GB of float32, every process on
GPU 0): B is cold-filled over CUDA IPC, and its time to the first version is printed next to
loading the same tensors from a safetensors file onto the GPU."""
from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
import torch

import wsync
from conftest import HERE

JOBS = HERE / "join_jobs.py"


def _read_json(path: Path, default=None):
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return default


def _progress(out: Path, name: str) -> int:
    p = _read_json(out / f"{name}.progress", 0)
    return p[-1] if isinstance(p, list) and p else int(p or 0)


def _wait(what: str, cond, job, c, timeout_s: float = 120) -> None:
    deadline = time.time() + timeout_s
    while not cond():
        for name, p, _ in job.procs:
            if p.poll() not in (None, 0) and not name.startswith("joiner_killed"):
                raise AssertionError(f"{name} exited {p.returncode} waiting for {what}:\n"
                                     f"{(job.out / (name + '.log')).read_text()[-3000:]}\n"
                                     f"coordinator:\n{c.stderr[-3000:]}")
        if time.time() > deadline:
            logs = "".join(f"\n{name} (exit {p.poll()}):\n"
                           f"{(job.out / (name + '.log')).read_text()[-1500:]}"
                           for name, p, _ in job.procs if (job.out / (name + ".log")).exists())
            raise AssertionError(f"timed out waiting for {what}{logs}\ncoordinator:\n"
                                 f"{c.stderr[-2000:]}")
        time.sleep(0.05)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_replica_joins_is_cold_filled_killed_and_rejoins(job, tmp_path, device):
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("the device-memory variant needs a GPU")
    out = tmp_path
    timeline = []

    def mark(event: str) -> None:
        timeline.append((round(time.time() - t0, 2), _progress(out, "fixed"), event))

    with wsync.Coordinator(trainers=2, rollouts=1, timeout_ms=120000, quiet=False,
                           extra_args=["--heartbeat-timeout-ms", "3000"]) as c:
        base = {"address": c.address, "secret": c.secret, "pause_s": 0.05, "device": device}
        t0 = time.time()
        for r in range(2):
            job.start("join", "trainer", dict(base, rank=r), name=f"trainer{r}", script=JOBS)
        job.start("join", "fixed", base, name="fixed", script=JOBS)
        _wait("replica 0 at version 3", lambda: _progress(out, "fixed") >= 3, job, c)
        mark("replica 1 started (joins)")
        job.start("join", "joiner", dict(base, replica=1), name="joiner_killed", script=JOBS)
        _wait("replica 1's first version", lambda: (out / "joiner_killed.first.json").exists(),
              job, c)
        first = _read_json(out / "joiner_killed.first.json")
        mark(f"replica 1 first version {first['first_version']} "
             f"(from peer: {first['first_version_from_peer']}, "
             f"{first['first_version_seconds']:.3f} s after create)")
        _wait("replica 1 reading 3 versions",
              lambda: len(_read_json(out / "joiner_killed.progress", [])) >= 3, job, c)
        killed_at = _progress(out, "joiner_killed")
        victim = next(p for n, p, _ in job.procs if n == "joiner_killed")
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        mark(f"replica 1 killed (SIGKILL) after reading version {killed_at}")
        after_kill = _progress(out, "fixed")
        _wait("replica 0 and the trainers going on", lambda: _progress(out, "fixed")
              >= after_kill + 10, job, c)
        mark("replica 0 read 10 more versions; replica 1 restarted (rejoins)")
        job.start("join", "joiner", dict(base, replica=1), name="joiner_again", script=JOBS)
        _wait("replica 1's first version after rejoining",
              lambda: (out / "joiner_again.first.json").exists(), job, c)
        again = _read_json(out / "joiner_again.first.json")
        mark(f"replica 1 rejoined: first version {again['first_version']} "
             f"(from peer: {again['first_version_from_peer']}, "
             f"{again['first_version_seconds']:.3f} s after create)")
        _wait("the rejoined replica reading 3 versions",
              lambda: len(_read_json(out / "joiner_again.progress", [])) >= 3, job, c)
        stop = max(_progress(out, "fixed"), _progress(out, "joiner_again")) + 5
        (out / "stop.tmp").write_text(str(stop))
        (out / "stop.tmp").rename(out / "stop")
        mark(f"stop at version {stop}")
        job.procs = [(n, p, log) for n, p, log in job.procs if n != "joiner_killed"]
        job.wait(timeout_s=180, coordinator=c)
        mark("every process exited 0")
        assert c.wait(30) == 0, c.stderr
    print(f"timeline ({device} memory; s, replica 0's version, event):")
    for entry in timeline:
        print("  ", entry)
    for j in (first, again):
        print(f"joiner: {j['bytes']} bytes, first version {j['first_version']} readable "
              f"{j['first_version_seconds']:.4f} s after create (from peer: "
              f"{j['first_version_from_peer']})"
              + (f"; safetensors load of the same tensors onto the GPU: "
                 f"{j['safetensors_load_s']:.4f} s" if "safetensors_load_s" in j else ""))

    # Both joins were filled by the running replica, not by the trainers.
    assert first["first_version_from_peer"] is True, first
    assert again["first_version_from_peer"] is True, again
    assert "replica 1 cold-started from replica 0" in c.stderr, c.stderr[-3000:]
    # Replica 0 read every version 1..stop bit-exact (its process checks each; it ends at stop).
    assert _progress(out, "fixed") == stop
    # Every publish completed, replica 0 took every version; replica 1 took versions only while
    # it was in the job, and was lost at most for the version in flight when it was killed.
    for r in range(2):
        record = _read_json(out / f"trainer{r}.json")
        assert [e["version"] for e in record] == list(range(1, stop + 1))
        for e in record:
            assert 0 in e["ready"], e
        lost = [e["version"] for e in record if 1 in e["lost"]]
        assert len(lost) <= 1, lost
        assert lost == [] or lost[0] > killed_at
        took = [e["version"] for e in record if 1 in e["ready"]]
        assert killed_at in took and stop in took
    # The rejoined replica read only versions at or after its first, in increasing order.
    seen = _read_json(out / "joiner_again.progress")
    assert seen[0] == again["newest_at_first"] and seen == sorted(set(seen)) and seen[-1] == stop


def test_elastic_job_without_fixed_rollouts():
    """A job of no fixed rollout rank (``Coordinator(rollouts=0)``, the trainer's num_rollouts 0):
    the trainer commits and publishes alone (each version ready on no replica, at once); a
    replica that joins then gets its first version from the trainer's next publish (no peer holds
    one). Negative counts raise ValueError before any process starts."""
    with pytest.raises(ValueError, match="rollouts >= 0"):
        wsync.Coordinator(trainers=1, rollouts=-1)
    with wsync.Coordinator(trainers=1, rollouts=0, timeout_ms=60000, quiet=False) as c:
        w = torch.zeros(4, 3)
        trainer = wsync.Trainer(wsync.Bootstrap.explicit(0, 1, 0, c.address, c.secret),
                                timeout_ms=60000)
        trainer.register_tensors({"w": w})
        trainer.commit()
        for v in (1, 2, 3):
            w.fill_(v)
            t0 = time.time()
            assert trainer.publish(v, wait=True).replicas(wsync.Replicas.READY) == []
            assert time.time() - t0 < 5
        rollout = wsync.Rollout(wsync.Bootstrap.join(c.address, c.secret), replica=5,
                                timeout_ms=60000)
        rollout.register_slots({"w": ((4, 3), torch.float32)})
        rollout.commit()
        deadline = time.time() + 30
        while "replica 5 joined" not in c.stderr and time.time() < deadline:
            time.sleep(0.01)
        assert "replica 5 joined" in c.stderr, c.stderr[-3000:]
        w.fill_(4)
        assert trainer.publish(4, wait=True).replicas(wsync.Replicas.READY) == [5]
        assert rollout.wait_for_version(after=0, timeout_ms=30000) == 4
        stats = rollout.version_stats()
        assert stats is not None and stats.first_version == 4
        assert not stats.first_version_from_peer
        with rollout.lease(4) as lease:
            assert torch.equal(rollout.lease_tensors(lease)["w"], torch.full((4, 3), 4.0))
        rollout.close()
        trainer.close()
        assert c.wait(30) == 0, c.stderr[-3000:]
