"""Learning where each Hugging Face tensor lands in an engine's parameters by running the
engine's own weight loaders once on probe tensors.

Parameters are temporarily given float64 stand-in storage filled with -1, and each HF tensor is fed
to the engine's loader as a probe whose element i holds ``(i + 1) * 4096 + tag(i)`` in float64
(exact below 2**53; tag is a 12-bit hash of i). Afterwards every element a loader copied decodes
to the linear index of its source element; 0 marks padding that a loader zeroed (vLLM's padded
vocabulary rows: wsync leaves it alone); any other value means the loader changed the values (a
scale, an offset, a cast, quantization; the tag makes even a shift by a multiple of 4096 visible).
:func:`boxes_from_indices` turns an index map into wsync boxes (any local rank, e.g. the
``[experts, rows, cols]`` stacks of a fused MoE layer). A loader that transforms values or layout
(quantization, scaling, GPT-2's transposed Conv1D weights) leaves a map that is not made of boxes:
those tensors are reported, and an engine falls back to its load_weights with full tensors for
them.

Decoder layers with the same tensors (names with the layer index taken out, shapes, dtypes) are
probed once: the first of them gets float64 stand-ins, the others zero-stride guards that raise on
any write, and their boxes are the first one's with the layer index renamed. A loader that writes
outside its own layer (a guard raises, or it wrote into another layer's stand-in) turns this off and
every layer is probed. So the probe's memory is about one layer per kind plus the embeddings, not
the model, and its time grows with the number of distinct layers, not with the depth.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Set, Tuple

import torch

from ..layout import Box

Loader = Callable[[List[Tuple[str, torch.Tensor]]], object]

_LAYER_RX = re.compile(r"(?:^|\.)(\d+)(?=\.)")


_TAG = 4096


def _tag(index: torch.Tensor) -> torch.Tensor:
    """A 12-bit hash of int64 indices below 2**41 (no overflow)."""
    folded = index ^ (index >> 12) ^ (index >> 24) ^ (index >> 36)
    return (folded * 2731) & (_TAG - 1)


def probe_values(shape: Sequence[int]) -> torch.Tensor:
    """The probe fed to a loader for an HF tensor of `shape`: element i is (i+1)*4096 + tag(i)."""
    numel = 1
    for s in shape:
        numel *= int(s)
    i = torch.arange(numel, dtype=torch.int64)
    return ((i + 1) * _TAG + _tag(i)).to(torch.float64).view(*[int(s) for s in shape])


def decode(stand_in: torch.Tensor) -> Optional[torch.Tensor]:
    """The source index of every element of a probed stand-in (-1: untouched or zeroed padding),
    or None when some element holds a value no plain copy of the probe gives."""
    written = (stand_in != -1) & (stand_in != 0)
    values = stand_in[written]
    if values.numel() == 0:
        return torch.full(stand_in.shape, -1, dtype=torch.int64)
    if (values != values.round()).any() or (values < _TAG).any() or (values >= 2**53).any():
        return None
    v = values.to(torch.int64)
    index = v // _TAG - 1
    if not torch.equal(v, (index + 1) * _TAG + _tag(index)):
        return None
    out = torch.full(stand_in.shape, -1, dtype=torch.int64)
    out[written] = index
    return out


def _unravel(index: int, shape: Sequence[int]) -> Tuple[int, ...]:
    out = []
    for n in reversed(shape):
        out.append(index % n if n else 0)
        index = index // n if n else 0
    return tuple(reversed(out))


MIN_RUN = 8
"""Maps whose runs of consecutive elements average fewer than this many elements (a transposed or
permuted copy) count as layout transforms: element-wise pieces would cost more than the tensor."""


def _runs(indices: torch.Tensor, cols_g: int) -> Optional[List[Tuple[int, int, int, int]]]:
    """(local row, first local column, element count, first source index) of every run of
    elements that continues both along the local row (the last local dimension) and along a row
    of the source (the last global dimension), in local order. None when the runs are too short
    to be worth pieces (see MIN_RUN)."""
    cols = int(indices.shape[-1])
    flat = indices.reshape(-1)
    written = flat >= 0
    count = int(written.sum())
    if count == 0:
        return []
    column = torch.arange(flat.numel()) % cols
    previous = torch.cat([flat.new_full((1,), -2), flat[:-1]])
    continues = written & (column != 0) & (flat == previous + 1) & (flat % cols_g != 0)
    starts = torch.nonzero(written & ~continues).flatten()
    if starts.numel() > 16 and starts.numel() * MIN_RUN > count:
        return None
    # a run ends where the next start is, or where writing stops
    ends = torch.nonzero(written & ~torch.cat([continues[1:], continues.new_zeros(1)])).flatten()
    return [(s // cols, s % cols, e - s + 1, int(flat[s]))
            for s, e in zip(starts.tolist(), ends.tolist())]


def boxes_from_indices(tensor: str, global_shape: Sequence[int],
                       indices: torch.Tensor) -> Optional[List[Box]]:
    """The boxes of `tensor` (of `global_shape`) in a local tensor whose elements hold source
    linear indices (< 0: not from this tensor). The local rank may exceed the global rank (a
    stack of experts): the box's dimensions then run along the last local dimensions. A local row
    may hold several pieces (a fused bias: [q part | k part | v part]). None when the map is not
    a union of such boxes worth their pieces (a layout-transforming loader)."""
    shape = tuple(int(s) for s in global_shape)
    rank, local_rank = len(shape), indices.dim()
    if rank == 0 or local_rank < rank:
        return None
    cols_g = shape[-1]
    runs = _runs(indices, cols_g)
    if runs is None:
        return None
    rows_g = shape[-2] if rank >= 2 else 1
    local_rows = int(indices.shape[-2]) if local_rank >= 2 else 1
    outer_local = tuple(int(s) for s in indices.shape[:-1])
    dims = None if local_rank == rank else tuple(range(local_rank - rank, local_rank))
    boxes: List[Box] = []

    def emit(c: List[int]) -> None:
        l_row, g_row, l_col, g_col, n, count = c
        offset = _unravel(g_row * cols_g + g_col, shape)
        extent = (1,) * (rank - 2) + (count, n) if rank >= 2 else (n,)
        boxes.append(Box(tensor, shape, offset, extent, _unravel(l_row, outer_local) + (l_col,),
                         dims))

    # Open boxes by (local column, global column, width): a run extends the box of its key when
    # it is the next row on both sides (within one local and one global block of rows).
    open_boxes: Dict[Tuple[int, int, int], List[int]] = {}
    for l_row, l_col, n, start in runs:
        g_row, g_col = divmod(start, cols_g)
        key = (l_col, g_col, n)
        c = open_boxes.get(key)
        if c is not None and rank >= 2 and l_row == c[0] + c[5] and g_row == c[1] + c[5] \
                and l_row // local_rows == c[0] // local_rows and g_row // rows_g == c[1] // rows_g:
            c[5] += 1
            continue
        if c is not None:
            emit(c)
        open_boxes[key] = [l_row, g_row, l_col, g_col, n, 1]
    for c in open_boxes.values():
        emit(c)
    return boxes


def layer_of(name: str) -> Tuple[Optional[int], str]:
    """(index, name with that index as ``{}``) of the first all-digit segment of `name`, the
    decoder layer of ``model.layers.3.mlp.up_proj.weight``; (None, name) when it has none."""
    m = _LAYER_RX.search(name)
    if m is None:
        return None, name
    return int(m.group(1)), name[:m.start(1)] + "{}" + name[m.end(1):]


def _with_layer(template: str, layer: int) -> str:
    return template.replace("{}", str(layer), 1)


@dataclass
class _Layers:
    """The probe's plan: which HF tensors and parameters to probe, and which layers copy which."""

    probe_hf: List[Tuple[str, Tuple[int, ...]]]
    probe_params: Set[str]
    copies: Dict[int, int] = field(default_factory=dict)  # layer -> the probed layer like it


def _plan(params: Dict[str, torch.nn.Parameter], hf: List[Tuple[str, Tuple[int, ...]]],
          dedup: bool) -> _Layers:
    if not dedup:
        return _Layers(list(hf), set(params))
    signature: Dict[int, list] = {}
    for name, shape in hf:
        layer, template = layer_of(name)
        if layer is not None:
            signature.setdefault(layer, []).append(("hf", template, tuple(shape)))
    for name, p in params.items():
        layer, template = layer_of(name)
        if layer is not None:
            signature.setdefault(layer, []).append(("param", template, tuple(p.shape),
                                                    str(p.dtype)))
    first_like: Dict[tuple, int] = {}
    copies: Dict[int, int] = {}
    for layer in sorted(signature):
        key = tuple(sorted(signature[layer]))
        copies[layer] = first_like.setdefault(key, layer)
    skipped = {layer for layer, like in copies.items() if layer != like}

    def keep(name: str) -> bool:
        return layer_of(name)[0] not in skipped

    return _Layers([(n, s) for n, s in hf if keep(n)], {n for n in params if keep(n)},
                   {layer: like for layer, like in copies.items() if layer != like})


class _CrossLayerWrite(Exception):
    pass


_GUARD_WRITE = "more than one element of the written-to tensor"  # torch's error for a guard


def _probe(params: Dict[str, torch.nn.Parameter], plan: _Layers, load: Loader,
           dedup: bool) -> Tuple[Dict[str, List[Box]], List[str]]:
    stand_ins: Dict[str, torch.Tensor] = {}
    for name, p in params.items():
        if name in plan.probe_params:
            stand_ins[name] = torch.full(p.shape, -1.0, dtype=torch.float64)
            p.data = stand_ins[name]
        else:  # a zero-stride guard: any write raises
            p.data = torch.zeros(1, dtype=torch.float64).expand(p.shape)
    boxes: Dict[str, List[Box]] = {n: [] for n in params}
    fallback: List[str] = []
    dirty: List[str] = []
    for hf, shape in plan.probe_hf:
        for name in dirty:
            stand_ins[name].fill_(-1.0)
        failed = False
        try:
            load([(hf, probe_values(shape))])
        except Exception as e:  # noqa: BLE001 (any loader error: that tensor cannot be probed)
            if dedup and _GUARD_WRITE in str(e):
                raise _CrossLayerWrite(hf) from e
            failed = True  # e.g. a layer whose processing removed its loaders
        dirty = [n for n, t in stand_ins.items() if bool((t != -1).any())]
        if failed:
            fallback.append(hf)
            continue
        if dedup and any(layer_of(n)[0] != layer_of(hf)[0] for n in dirty):
            raise _CrossLayerWrite(hf)  # copying this layer's results would be wrong
        found = {}
        for n in dirty:
            index = decode(stand_ins[n])
            found[n] = None if index is None else boxes_from_indices(hf, shape, index)
        if any(b is None for b in found.values()) or not any(found.values()):
            fallback.append(hf)  # no plain boxes: the engine's loader gets the full tensor
            continue
        for n, b in found.items():
            boxes[n] += b or []
    return boxes, fallback


def _rename(boxes: Dict[str, List[Box]], fallback: List[str],
            copies: Dict[int, int]) -> Tuple[Dict[str, List[Box]], List[str]]:
    """Gives every copied layer the boxes (and fallbacks) of the layer it is like."""
    out = dict(boxes)
    more: List[str] = []
    for layer, like in copies.items():
        for name, bs in boxes.items():
            l, template = layer_of(name)
            if l != like:
                continue
            out[_with_layer(template, layer)] = [
                Box(_with_layer(layer_of(b.tensor)[1], layer), b.global_shape, b.offset,
                    b.extent, b.local_start, b.local_dims) for b in bs]
        more += [_with_layer(layer_of(n)[1], layer) for n in fallback if layer_of(n)[0] == like]
    return out, fallback + more


def probe_loaders(params: Dict[str, torch.nn.Parameter],
                  hf_tensors: Iterable[Tuple[str, Tuple[int, ...]]],
                  load: Loader, *, dedup_layers: bool = True
                  ) -> Tuple[Dict[str, List[Box]], List[str]]:
    """Runs `load([(hf_name, probe)])` (the engine's load_weights) once per probed HF tensor with
    float64 probes on stand-in storage of `params`, restores the parameters, and returns (boxes
    per parameter name, HF names whose loaders did not copy plain boxes)."""
    hf = [(n, tuple(int(s) for s in shape)) for n, shape in hf_tensors]
    saved = {n: p.data for n, p in params.items()}
    try:
        plan = _plan(params, hf, dedup_layers)
        try:
            boxes, fallback = _probe(params, plan, load, dedup_layers)
            boxes, fallback = _rename(boxes, fallback, plan.copies)
        except _CrossLayerWrite:
            boxes, fallback = _probe(params, _plan(params, hf, False), load, False)
    finally:
        for name, p in params.items():
            p.data = saved[name]
    order = {n: i for i, (n, _) in enumerate(hf)}
    return {n: b for n, b in boxes.items() if b}, sorted(set(fallback),
                                                        key=lambda n: order.get(n, len(order)))
