#!/usr/bin/env bash
# Creates the venv of test_sglang.py: SGLang 0.5.23 without its GPU stack (no kernels, flashinfer,
# CUDA Python), only what imports the classes the test uses (its serializer, LocalSerializedTensor,
# the weight updater's loaders), and torch / transformers at SGLang's pins.
# Usage: tests/python/setup_sglang_venv.sh [VENV]   (default /opt/wsync-sglang-venv)
set -euo pipefail
venv=${1:-/opt/wsync-sglang-venv}
py="$venv/bin/python"
[ -x "$py" ] || python3 -m venv "$venv"
"$py" -m pip install -q --upgrade pip
"$py" -m pip install -q "torch==2.14.1" "torchvision==0.29.*" "transformers==5.19.0" \
  "tokenizers==0.23.2" "scikit-build-core>=0.10" numpy orjson psutil pybase64 requests packaging \
  pillow starlette msgspec pydantic pyzmq tqdm ipython aiohttp dill loguru pyyaml
"$py" -m pip install -q --no-deps "sglang==0.5.23" "apache-tvm-ffi==0.1.11" \
  "compressed-tensors==0.18.0" "sentencepiece==0.2.1" gguf
"$py" -W ignore -c "import sglang.srt.model_executor.model_runner_components.weight_updater"
