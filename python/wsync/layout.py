"""Where each local tensor's elements sit in the global (Hugging Face) tensors.

A :class:`Box` says: elements ``[offset, offset + extent)`` of global tensor `tensor` live in the
local tensor from index `local_start` on, along the local dimensions `local_dims`. A local tensor is
registered as one wsync buffer whose pieces are its boxes; :func:`pieces_for` turns boxes into the
C API's pieces using the local tensor's real strides. Nothing here plans or moves data: the
library does that from the pieces.

Builders:
  * :func:`whole` (replicated), :func:`chunk_shard` (torch.chunk's uneven rule along one dim),
  * :func:`dtensor_boxes` (DTensor placements and mesh: Shard, Replicate, FSDP2's Shard(0), the
    strided shard of FSDP2 + TP),
  * Megatron / vLLM style: :func:`column_parallel`, :func:`row_parallel`, :func:`vocab_parallel`,
    :func:`fused_qkv` (grouped-query heads, concatenated or Megatron's grouped order),
    :func:`gate_up`, :func:`experts` (experts by EP rank).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .core import Piece
from .errors import UnpublishableError


@dataclass(frozen=True)
class Box:
    """A box of global tensor `tensor` inside a local tensor.

    `local_start` has one index per local dimension; the box's dimension i runs along local
    dimension ``local_dims[i]`` (default: the same dimension, when local and global ranks agree)."""

    tensor: str
    global_shape: Tuple[int, ...]
    offset: Tuple[int, ...]
    extent: Tuple[int, ...]
    local_start: Tuple[int, ...]
    local_dims: Optional[Tuple[int, ...]] = None

    def numel(self) -> int:
        """Elements of the box."""
        n = 1
        for e in self.extent:
            n *= e
        return n


def pieces_for(boxes: Sequence[Box], local_strides: Sequence[int]) -> List[Piece]:
    """The C API's pieces of `boxes` in a local tensor with `local_strides` (elements)."""
    pieces = []
    for b in boxes:
        dims = b.local_dims if b.local_dims is not None else tuple(range(len(b.extent)))
        if len(b.local_start) != len(local_strides):
            raise UnpublishableError(f"box of {b.tensor}: local_start {b.local_start} does not "
                                     f"match the local tensor's {len(local_strides)} dimensions")
        offset = sum(i * s for i, s in zip(b.local_start, local_strides))
        strides = tuple(int(local_strides[d]) for d in dims)
        if strides and strides[-1] != 1:
            raise UnpublishableError(f"box of {b.tensor}: the innermost local stride is "
                                     f"{strides[-1]}, wsync needs 1 (make the tensor contiguous)")
        pieces.append(Piece(b.tensor, tuple(b.global_shape), tuple(b.offset), tuple(b.extent),
                            int(offset), strides))
    return pieces


def whole(tensor: str, shape: Sequence[int]) -> List[Box]:
    """The whole tensor (a replica of it)."""
    shape = tuple(int(s) for s in shape)
    return [Box(tensor, shape, (0,) * len(shape), shape, (0,) * len(shape))]


def chunk_range(length: int, rank: int, size: int) -> Tuple[int, int]:
    """[start, stop) of chunk `rank` of `size` along a dimension of `length`, by torch.chunk's rule
    (chunks of ceil(length/size); the last ones may be smaller or empty), as DTensor's Shard."""
    step = -(-length // size) if size > 0 else length
    start = min(rank * step, length)
    return start, min(start + step, length)


def chunk_shard(tensor: str, global_shape: Sequence[int], dim: int, rank: int,
                size: int) -> List[Box]:
    """Chunk `rank` of `size` along `dim` (torch.chunk's uneven rule)."""
    shape = tuple(int(s) for s in global_shape)
    lo, hi = chunk_range(shape[dim], rank, size)
    offset = tuple(lo if d == dim else 0 for d in range(len(shape)))
    extent = tuple(hi - lo if d == dim else shape[d] for d in range(len(shape)))
    if hi <= lo:
        return []
    return [Box(tensor, shape, offset, extent, (0,) * len(shape))]


def _even(length: int, size: int, what: str) -> int:
    if size <= 0 or length % size:
        raise UnpublishableError(f"{what}: {length} is not divisible by {size}")
    return length // size


def column_parallel(tensor: str, global_shape: Sequence[int], tp_rank: int,
                    tp_size: int) -> List[Box]:
    """Megatron ColumnParallelLinear (vLLM ColumnParallelLinear): rows split evenly (weight
    [out, in] or bias [out])."""
    shape = tuple(int(s) for s in global_shape)
    _even(shape[0], tp_size, f"column-parallel {tensor}")
    return chunk_shard(tensor, shape, 0, tp_rank, tp_size)


def row_parallel(tensor: str, global_shape: Sequence[int], tp_rank: int,
                 tp_size: int) -> List[Box]:
    """Megatron RowParallelLinear: the input dimension (dim 1) split evenly; its bias (1-D) is
    replicated."""
    shape = tuple(int(s) for s in global_shape)
    if len(shape) == 1:
        return whole(tensor, shape)
    _even(shape[1], tp_size, f"row-parallel {tensor}")
    return chunk_shard(tensor, shape, 1, tp_rank, tp_size)


def vocab_parallel(tensor: str, global_shape: Sequence[int], tp_rank: int, tp_size: int,
                   padded_rows: Optional[int] = None) -> List[Box]:
    """An embedding / LM head whose vocabulary (dim 0) is padded to `padded_rows` and split evenly:
    this rank's local rows ``[r * padded/tp, (r+1) * padded/tp)`` hold the real rows of that range;
    padding rows are in no box (never written)."""
    shape = tuple(int(s) for s in global_shape)
    padded = int(padded_rows or shape[0])
    per = _even(padded, tp_size, f"vocab-parallel {tensor}")
    lo, hi = tp_rank * per, min((tp_rank + 1) * per, shape[0])
    if hi <= lo:
        return []
    rest = (0,) * (len(shape) - 1)
    return [Box(tensor, shape, (lo,) + rest, (hi - lo,) + shape[1:], (0,) * len(shape))]


def _rows(tensor: str, global_shape: Tuple[int, ...], row0: int, rows: int,
          local_row: int) -> Box:
    rest = (0,) * (len(global_shape) - 1)
    return Box(tensor, global_shape, (row0,) + rest, (rows,) + global_shape[1:],
               (local_row,) + rest)


def fused_qkv(q: str, k: str, v: str, *, num_heads: int, num_kv_heads: int, head_dim: int,
              hidden: Optional[int], tp_rank: int, tp_size: int,
              order: str = "concat") -> List[Box]:
    """A fused QKV projection of this TP rank, from separate q/k/v tensors (weights
    ``[heads * head_dim, hidden]`` or biases when `hidden` is None).

    order="concat" (vLLM QKVParallelLinear): local rows are [q heads | k heads | v heads]; with
    fewer kv heads than TP ranks each kv head is replicated on tp_size/num_kv_heads ranks.
    order="grouped" (Megatron-core linear_qkv): per local query group, [its q heads | k | v]."""
    tail = (int(hidden),) if hidden is not None else ()
    q_shape = (num_heads * head_dim,) + tail
    kv_shape = (num_kv_heads * head_dim,) + tail
    q_local = _even(num_heads, tp_size, f"fused qkv {q}: heads") * head_dim
    if num_kv_heads >= tp_size:
        kv_heads = _even(num_kv_heads, tp_size, f"fused qkv {k}: kv heads")
        kv_first = tp_rank * kv_heads
    else:
        _even(tp_size, num_kv_heads, f"fused qkv {k}: TP size over kv heads")
        kv_heads, kv_first = 1, tp_rank // (tp_size // num_kv_heads)
    if order == "concat":
        kv_rows = kv_heads * head_dim
        return [_rows(q, q_shape, tp_rank * q_local, q_local, 0),
                _rows(k, kv_shape, kv_first * head_dim, kv_rows, q_local),
                _rows(v, kv_shape, kv_first * head_dim, kv_rows, q_local + kv_rows)]
    if order != "grouped":
        raise UnpublishableError(f"fused qkv order {order!r}: use 'concat' or 'grouped'")
    if num_kv_heads < tp_size:
        raise UnpublishableError("Megatron's grouped qkv needs num_kv_heads >= tp_size")
    q_per_group = (num_heads // num_kv_heads) * head_dim
    boxes, row = [], 0
    for g in range(kv_first, kv_first + kv_heads):
        boxes.append(_rows(q, q_shape, g * q_per_group, q_per_group, row))
        boxes.append(_rows(k, kv_shape, g * head_dim, head_dim, row + q_per_group))
        boxes.append(_rows(v, kv_shape, g * head_dim, head_dim, row + q_per_group + head_dim))
        row += q_per_group + 2 * head_dim
    return boxes


def gate_up(gate: str, up: str, *, intermediate: int, hidden: Optional[int], tp_rank: int,
            tp_size: int) -> List[Box]:
    """A fused gate/up projection (vLLM MergedColumnParallelLinear, Megatron's linear_fc1 with
    gated linear units): local rows [gate rows of this rank | up rows of this rank]."""
    tail = (int(hidden),) if hidden is not None else ()
    shape = (int(intermediate),) + tail
    per = _even(intermediate, tp_size, f"gate_up {gate}")
    return [_rows(gate, shape, tp_rank * per, per, 0), _rows(up, shape, tp_rank * per, per, per)]


def experts(names: Sequence[str], expert_shape: Sequence[int], ep_rank: int, ep_size: int,
            inner: Optional[Callable[[str, Tuple[int, ...]], List[Box]]] = None) -> List[Box]:
    """A stacked local tensor ``[num_experts / ep_size, *local_expert_shape]`` holding the experts
    of EP rank `ep_rank`; `names[e]` is global expert e's tensor. `inner(name, expert_shape)` gives
    the boxes of one expert's local part (e.g. a TP split); default the whole expert."""
    shape = tuple(int(s) for s in expert_shape)
    local = _even(len(names), ep_size, "experts")
    boxes = []
    for e in range(local):
        name = names[ep_rank * local + e]
        for b in (inner(name, shape) if inner else whole(name, shape)):
            boxes.append(Box(b.tensor, b.global_shape, b.offset, b.extent,
                             (e,) + b.local_start, tuple(range(1, len(shape) + 1))))
    return boxes


def shift_layers(offset: int, pattern: str = "layers.") -> Callable[[str], str]:
    """A name map for pipeline stages: local ``layers.{i}.`` becomes ``layers.{i + offset}.``."""
    import re

    rx = re.compile(re.escape(pattern) + r"(\d+)\.")

    def mapped(name: str) -> str:
        return rx.sub(lambda m: f"{pattern}{int(m.group(1)) + offset}.", name, count=1)

    return mapped


# ---- DTensor ------------------------------------------------------------------------------------
def _index_runs(indices: Sequence[int]) -> List[Tuple[int, int, int]]:
    """Consecutive runs of global indices: (global start, local start, length)."""
    runs: List[Tuple[int, int, int]] = []
    for local, g in enumerate(indices):
        if runs and runs[-1][0] + runs[-1][2] == g:
            start, lstart, n = runs[-1]
            runs[-1] = (start, lstart, n + 1)
        else:
            runs.append((int(g), local, 1))
    return runs


def dtensor_boxes(tensor: str, dt: Any) -> List[Box]:
    """The boxes of this rank's local shard of DTensor `dt`, from its placements and mesh.

    Each tensor dimension's global indices are followed through the placements in mesh order with
    the placements' own split (torch.chunk's rule for Shard; _StridedShard for FSDP2 + TP), then cut
    into runs of consecutive indices: one box per combination of runs. No gather, no full_tensor().
    Raises UnpublishableError for Partial placements (a pending reduction is not a weight)."""
    import torch
    from torch.distributed.tensor import Partial, Replicate, Shard

    try:
        from torch.distributed.tensor.placement_types import _StridedShard
    except ImportError:  # older torch
        _StridedShard = ()  # type: ignore[assignment]
    placements, mesh = dt.placements, dt.device_mesh
    spec = getattr(dt, "_spec", None)
    if spec is not None and hasattr(spec, "is_default_device_order"):
        try:
            default_order = bool(spec.is_default_device_order())
        except TypeError:
            default_order = True
        if not default_order:
            raise UnpublishableError(f"{tensor}: a non-default shard order {spec.shard_order} is "
                                     "not supported; give explicit boxes in specs=")
    shape = tuple(int(s) for s in dt.shape)
    coord = mesh.get_coordinate()
    if coord is None:  # this rank is not in the mesh
        return []
    indices: List[Any] = [torch.arange(n) for n in shape]
    for mesh_dim, p in enumerate(placements):
        if isinstance(p, Partial):
            raise UnpublishableError(
                f"{tensor}: placement {p!r} on mesh dim {mesh_dim} is Partial (a pending "
                "reduction, not a weight); redistribute it to Shard or Replicate first")
        if isinstance(p, Replicate):
            continue
        if _StridedShard and isinstance(p, _StridedShard):
            split: Any = _StridedShard(0, split_factor=p.split_factor)
        elif isinstance(p, Shard):
            split = Shard(0)
        else:
            raise UnpublishableError(f"{tensor}: placement {p!r} is not supported")
        d = p.dim  # the split runs on the 1-D index vector of dimension d, by torch's own rule
        parts = split._split_tensor(indices[d], mesh.size(mesh_dim), with_padding=False)[0]
        indices[d] = parts[coord[mesh_dim]] if coord[mesh_dim] < len(parts) else indices[d][:0]
    local_shape = tuple(int(ix.numel()) for ix in indices)
    if local_shape != tuple(dt.to_local().shape):
        raise UnpublishableError(f"{tensor}: derived local shape {local_shape} differs from the "
                                 f"local tensor's {tuple(dt.to_local().shape)}")
    if any(n == 0 for n in local_shape):
        return []
    per_dim = [_index_runs(ix.tolist()) for ix in indices]
    boxes: List[Box] = []

    def emit(d: int, off: tuple, ext: tuple, loc: tuple) -> None:
        if d == len(shape):
            boxes.append(Box(tensor, shape, off, ext, loc))
            return
        for g, l, n in per_dim[d]:
            emit(d + 1, off + (g,), ext + (n,), loc + (l,))

    emit(0, (), (), ())
    return boxes


def dtensor_local_shape_check(boxes: Sequence[Box]) -> Dict[str, int]:
    """Elements per global tensor in `boxes` (a helper for tests and sanity checks)."""
    out: Dict[str, int] = {}
    for b in boxes:
        out[b.tensor] = out.get(b.tensor, 0) + b.numel()
    return out
