"""Learning where each Hugging Face tensor lands in an engine's parameters by running the
engine's own weight loaders once on probe tensors.

Every parameter is temporarily given float64 storage filled with -1, and each HF tensor is fed to
the engine's loader as ``1 + arange(numel)`` in float64 (exact up to 2**53): afterwards every
element a loader copied holds 1 + the linear index of its source element (0 marks padding that a
loader zeroed, such as vLLM's padded vocabulary rows: wsync leaves it alone). :func:`boxes_from_indices`
turns such an index map into wsync boxes. A loader that transforms values (quantization, scaling,
transposes) leaves a map that is not made of boxes: those tensors are reported, and an engine
falls back to its load_weights with full tensors for them.
"""
from __future__ import annotations

from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import torch

from ..layout import Box


def boxes_from_indices(tensor: str, global_shape: Sequence[int],
                       indices: torch.Tensor) -> Optional[List[Box]]:
    """The boxes of `tensor` (of `global_shape`) in a local tensor whose elements hold source
    linear indices (-1: not from this tensor). Local rank 1 or 2, global rank 1 or 2. None when
    the map is not a union of row-wise boxes (a value-transforming loader)."""
    shape = tuple(int(s) for s in global_shape)
    if indices.dim() == 1:
        indices = indices.unsqueeze(0)
        squeeze = True
    elif indices.dim() == 2:
        squeeze = False
    else:
        return None
    if len(shape) not in (1, 2) or (len(shape) == 2 and squeeze):
        return None
    cols_g = shape[-1] if len(shape) == 2 else shape[0]
    written = indices >= 0
    if (indices[written] != indices[written].round()).any():
        return None
    boxes: List[Box] = []
    current: Optional[list] = None  # [g_row, g_col, n_cols, l_row, l_col, n_rows]
    for r in range(indices.shape[0]):
        cols = torch.nonzero(written[r]).flatten()
        if cols.numel() == 0:
            continue
        c0, c1 = int(cols[0]), int(cols[-1]) + 1
        if cols.numel() != c1 - c0:
            return None
        vals = indices[r, c0:c1].to(torch.int64)
        g0 = int(vals[0])
        if not torch.equal(vals, torch.arange(g0, g0 + (c1 - c0), dtype=torch.int64)):
            return None
        g_row, g_col = (g0 // cols_g, g0 % cols_g) if len(shape) == 2 else (0, g0)
        if g_col + (c1 - c0) > cols_g:
            return None
        if current and current[2] == c1 - c0 and current[1] == g_col and current[4] == c0 \
                and current[0] + current[5] == g_row and current[3] + current[5] == r:
            current[5] += 1
            continue
        if current:
            boxes.append(_box(tensor, shape, current, squeeze))
        current = [g_row, g_col, c1 - c0, r, c0, 1]
    if current:
        boxes.append(_box(tensor, shape, current, squeeze))
    return boxes


def _box(tensor: str, shape: Tuple[int, ...], c: list, squeeze: bool) -> Box:
    g_row, g_col, n_cols, l_row, l_col, n_rows = c
    if len(shape) == 1:
        local = (l_col,) if squeeze else (l_row, l_col)
        dims = None if squeeze else (1,)
        return Box(tensor, shape, (g_col,), (n_cols,), local, dims)
    return Box(tensor, shape, (g_row, g_col), (n_rows, n_cols), (l_row, l_col))


def probe_loaders(params: Dict[str, torch.nn.Parameter],
                  hf_tensors: Iterable[Tuple[str, Tuple[int, ...]]],
                  load: Callable[[List[Tuple[str, torch.Tensor]]], object]
                  ) -> Tuple[Dict[str, List[Box]], List[str]]:
    """Runs `load([(hf_name, probe)])` (the engine's load_weights) once per HF tensor with
    float64 probes on float64 stand-in storage of `params`, restores the parameters, and returns
    (boxes per parameter name, HF names whose loaders did not copy plain boxes)."""
    saved = {n: p.data for n, p in params.items()}
    boxes: Dict[str, List[Box]] = {n: [] for n in params}
    fallback: List[str] = []
    try:
        for name, p in params.items():
            p.data = torch.full(saved[name].shape, -1.0, dtype=torch.float64, device="cpu")
        for hf, shape in hf_tensors:
            for p in params.values():
                p.data.fill_(-1.0)
            numel = 1
            for s in shape:
                numel *= int(s)
            # Values 1..numel: 0 is what loaders write into padding (vLLM zeroes padded
            # vocabulary rows), -1 is untouched; both end up below 0 after the shift.
            load([(hf, torch.arange(1, numel + 1, dtype=torch.float64).view(*shape))])
            found = False
            for pname, p in params.items():
                if not (p.data > 0).any():
                    continue
                found = True
                got = boxes_from_indices(hf, shape, p.data - 1)
                if got is None:
                    fallback.append(hf)
                    break
                boxes[pname] += got
            if not found:
                fallback.append(hf)
    finally:
        for name, p in params.items():
            p.data = saved[name]
    return {n: b for n, b in boxes.items() if b}, fallback
