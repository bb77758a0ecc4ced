"""The SGLang adapter (wsync.engines.sglang) against the REAL SGLang 0.5.23's classes and
functions on CPU: its MultiprocessingSerializer (and SafeUnpickler), LocalSerializedTensor, the
scheduler side's deserialize-own-rank, _unwrap_tensor and the load_format="direct" loader. Two
wsync rollout ranks in SGLang's TP-2 layout copy-flip every version and hand it on as SGLang
payloads; each SGLang TP rank's parameters must equal the trainer's tensors in that layout bit
for bit. SGLang pins torch 2.14.1, so this runs in its own venv: $WSYNC_SGLANG_PYTHON (default
/opt/wsync-sglang-venv/bin/python); skipped when that Python cannot import sglang's classes.
SGLang's Engine and ModelRunner are not started (they need a published server config and GPU
schedulers)."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

import wsync
from conftest import HERE, engine_pythonpath, free_port
from test_jobs import check_llama_outputs
from test_vllm import wait_all

SGLANG_PYTHON = os.environ.get("WSYNC_SGLANG_PYTHON", "/opt/wsync-sglang-venv/bin/python")
VERSIONS = 4  # check_llama_outputs expects test_jobs.VERSIONS


def _sglang_ready() -> str:
    if not Path(SGLANG_PYTHON).exists():
        return f"{SGLANG_PYTHON} does not exist (a venv with sglang==0.5.23 and wsync installed)"
    r = subprocess.run([SGLANG_PYTHON, "-W", "ignore", "-c",
                        "import wsync.engines.sglang as e; assert e.HAVE_SGLANG"],
                       capture_output=True, text=True, timeout=300)
    return "" if r.returncode == 0 else f"sglang does not import there: {r.stderr[-300:]}"


def test_sglang_tp_ranks_load_each_version_exactly(tmp_path):
    why = _sglang_ready()
    if why:
        pytest.skip(why)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=engine_pythonpath(),
               PYTHONWARNINGS="ignore")
    with wsync.Coordinator(trainers=1, rollouts=2, timeout_ms=300000, quiet=False) as c:
        base = {"address": c.address, "secret": c.secret, "versions": VERSIONS,
                "out": str(tmp_path), "dist_port": free_port()}
        roles = [("trainer", {})] + [(role, {"rank": r}) for role in ("worker", "scheduler")
                                     for r in range(2)]
        procs, logs = [], []
        for role, extra in roles:
            log = tmp_path / f"{role}{extra.get('rank', '')}.log"
            logs.append(log)
            procs.append(subprocess.Popen(
                [SGLANG_PYTHON, str(HERE / "sglang_jobs.py"), role, json.dumps(dict(base, **extra))],
                env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT))
        codes = wait_all(procs, timeout_s=500)
        text = "".join(f"--- {p.name}:\n{p.read_text()[-2500:]}" for p in logs)
        assert codes == [0] * len(procs), text + c.stderr
    check_llama_outputs(tmp_path, tp=2, with_hf=False)


def test_sglang_engine_joins_mid_run_with_join_rollout(tmp_path):
    """An SGLang engine (TP 2) joins a running job through wsync.engines.sglang.join_rollout with
    only the coordinator's address and secret, SGLang's TP size / rank and its server address
    (the replica id derives from it), its TP layout from SGLang's own ModelConfig; its first
    version is copied from the job's fixed replica (whose tensors' names and shapes come from
    SGLang's ModelConfig through hf_tensors), later ones come from the trainer, and every
    version reaches SGLang's scheduler-side loading (sglang_jobs.py) bit for bit. SGLang's model
    classes are not built: on this CPU venv their rotary embedding needs sgl_kernel's CPU build
    (SGLANG_USE_CPU_ENGINE=1) or vllm._custom_ops, and neither is installed."""
    why = _sglang_ready()
    if why:
        pytest.skip(why)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=engine_pythonpath(),
               PYTHONWARNINGS="ignore")
    with wsync.Coordinator(trainers=1, rollouts=1, timeout_ms=300000, quiet=False) as c:
        base = {"address": c.address, "secret": c.secret, "versions": VERSIONS,
                "out": str(tmp_path), "dist_port": free_port(), "join": True}
        roles = [("trainer", {}), ("fixed", {})] + [
            (role, {"rank": r}) for role in ("worker", "scheduler") for r in range(2)]
        procs, logs = [], []
        for role, extra in roles:
            log = tmp_path / f"{role}{extra.get('rank', '')}.log"
            logs.append(log)
            procs.append(subprocess.Popen(
                [SGLANG_PYTHON, str(HERE / "sglang_jobs.py"), role, json.dumps(dict(base, **extra))],
                env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT))
        codes = wait_all(procs, timeout_s=500)
        text = "".join(f"--- {p.name}:\n{p.read_text()[-2500:]}" for p in logs)
        assert codes == [0] * len(procs), text + c.stderr
        coordinator_log = c.stderr
    check_llama_outputs(tmp_path, tp=2, with_hf=False)
    assert all((tmp_path / f"fixed_v{v}").exists() for v in range(1, VERSIONS + 1))
    joined = [json.loads((tmp_path / f"worker{r}.json").read_text()) for r in range(2)]
    replica = wsync.replica_id("http://127.0.0.1:30000")
    for j in joined:
        assert j["replica"] == replica and j["first_version_from_peer"] is True, joined
        assert j["first_version"] == 2, joined
    assert f"replica {replica} cold-started from replica 0" in coordinator_log
