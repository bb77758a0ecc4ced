"""Torch helpers shared by the trainer and rollout sides (imported only when torch is used)."""
from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import torch

from . import layout
from .errors import UnpublishableError
from .layout import Box
from .types import DType, Memory, torch_dtype_to_wsync

NameMap = Union[None, Mapping[str, str], Callable[[str], Optional[str]]]
"""A user mapping from module names to Hugging Face names: a dict (names absent are kept), or a
callable returning the HF name (None: skip the tensor)."""

SpecFn = Callable[[str, torch.Tensor], Sequence[Box]]
Spec = Union[Sequence[Box], SpecFn]
"""How a local tensor maps to global tensors: boxes, or a callable(hf_name, local) -> boxes."""

_WRAPPER_PARTS = ("_orig_mod.", "_fsdp_wrapped_module.", "_checkpoint_wrapped_module.",
                  "module.")
_WRAPPER_RX = re.compile("|".join(re.escape(p) for p in _WRAPPER_PARTS))


def strip_wrappers(name: str) -> str:
    """A module name without the segments that torch.compile, DDP, FSDP and activation
    checkpointing wrappers add (``_orig_mod.``, ``module.``, ...)."""
    return _WRAPPER_RX.sub("", name)


def map_name(name: str, name_map: NameMap) -> Optional[str]:
    """The Hugging Face name of module tensor `name` (None: not published)."""
    base = strip_wrappers(name)
    if name_map is None:
        return base
    if callable(name_map):
        return name_map(base)
    return name_map.get(base, name_map.get(name, base))


def is_dtensor(t: Any) -> bool:
    """Whether `t` (or the Parameter wrapping it) is a DTensor."""
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # torch built without distributed
        return False
    return isinstance(t, DTensor)


def local_of(t: torch.Tensor) -> torch.Tensor:
    """The tensor whose memory is registered: a DTensor's local shard (a view of its storage, no
    copy), else `t` itself (a Parameter's data)."""
    if is_dtensor(t):
        return t._local_tensor if hasattr(t, "_local_tensor") else t.to_local()
    return t.detach()


def memory_of(t: torch.Tensor) -> Memory:
    """HOST for CPU tensors, DEVICE for CUDA tensors."""
    if t.device.type == "cuda":
        return Memory.DEVICE
    if t.device.type == "cpu":
        return Memory.HOST
    raise UnpublishableError(f"tensors on {t.device} cannot be registered (cpu or cuda only)")


def span_elements(t: torch.Tensor) -> int:
    """Elements from t.data_ptr() to one past its last element (its strided span)."""
    if t.numel() == 0:
        return 0
    return 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride()))


def boxes_for(hf_name: str, full: torch.Tensor, local: torch.Tensor,
              spec: Optional[Spec]) -> List[Box]:
    """The boxes of `local`: from `spec` when given, from DTensor placements for a DTensor, else the
    whole tensor."""
    if spec is not None:
        return list(spec(hf_name, local) if callable(spec) else spec)
    if is_dtensor(full):
        return layout.dtensor_boxes(hf_name, full)
    return layout.whole(hf_name, tuple(local.shape))


@dataclass
class Entry:
    """One registered local tensor: the buffer `name`, its tensor and boxes, its C index."""

    name: str
    tensor: torch.Tensor
    boxes: List[Box]
    dtype: DType
    memory: Memory
    num_elements: int
    index: int = -1
    data_ptr: int = 0
    param: Optional[torch.nn.Parameter] = None
    staging: Optional[torch.Tensor] = None  # device copy of a CPU-offloaded shard


def named_parameters(source: Union[torch.nn.Module, Mapping[str, torch.Tensor]],
                     include_buffers: bool) -> Iterable[Tuple[str, torch.Tensor]]:
    """(name, tensor) of a module's parameters (and buffers when asked) or of a dict."""
    if isinstance(source, torch.nn.Module):
        yield from source.named_parameters()
        if include_buffers:
            yield from source.named_buffers()
    else:
        yield from source.items()


def entries_of(source: Union[torch.nn.Module, Mapping[str, torch.Tensor]],
               specs: Optional[Mapping[str, Spec]], name_map: NameMap,
               include_buffers: bool = False) -> List[Entry]:
    """One Entry per tensor of `source` that maps to a Hugging Face name. `specs` is keyed by the
    module name or the HF name."""
    specs = specs or {}
    out: List[Entry] = []
    for name, t in named_parameters(source, include_buffers):
        hf = map_name(name, name_map)
        if hf is None:
            continue
        local = local_of(t)
        spec = specs.get(name, specs.get(hf))
        boxes = boxes_for(hf, t, local, spec)
        if not boxes:
            continue  # this rank holds none of it (an empty uneven shard)
        out.append(Entry(hf, local, boxes, torch_dtype_to_wsync(local.dtype), memory_of(local),
                         span_elements(local), data_ptr=local.data_ptr(),
                         param=t if isinstance(t, torch.nn.Parameter) else None))
    return out


class _CudaArray:
    """A raw device allocation as __cuda_array_interface__ bytes, for torch.as_tensor."""

    def __init__(self, ptr: int, nbytes: int) -> None:
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1",
                                         "data": (ptr, False), "version": 3, "strides": None}


def tensor_at(ptr: int, dtype: torch.dtype, shape: Sequence[int], strides: Sequence[int],
              num_elements: int, memory: Memory, device: Optional[torch.device]) -> torch.Tensor:
    """A tensor viewing `num_elements` elements of `dtype` at address `ptr` (host or device memory
    owned by wsync), shaped by `shape` and `strides`. The caller keeps the memory alive."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    nbytes = num_elements * itemsize
    if nbytes == 0:
        return torch.empty(tuple(shape), dtype=dtype, device=device)
    if memory == Memory.HOST:
        raw = (ctypes.c_uint8 * nbytes).from_address(ptr)
        flat = torch.frombuffer(raw, dtype=torch.uint8)
    else:
        with torch.cuda.device(device):
            flat = torch.as_tensor(_CudaArray(ptr, nbytes), device=device)
    return flat.view(dtype).as_strided(tuple(shape), tuple(strides))


def current_stream(device: Optional[torch.device]) -> int:
    """The cudaStream_t of torch's current stream on `device`, as an int."""
    return int(torch.cuda.current_stream(device).cuda_stream)


def check_one_memory_kind(entries: List[Entry], offloaded: str) -> Tuple[Memory, int]:
    """The memory kind and CUDA device of a rank's entries. Mixed host and device tensors (CPU
    offload) raise UnpublishableError unless `offloaded == "copy"`, which gives each CPU tensor a
    device staging copy (refreshed before every publish)."""
    devices = {e.tensor.device.index for e in entries if e.memory == Memory.DEVICE}
    if len(devices) > 1:
        raise UnpublishableError(f"tensors on several CUDA devices {sorted(devices)}: one rank "
                                 "registers one device")
    on_host = [e for e in entries if e.memory == Memory.HOST]
    if not devices:
        return Memory.HOST, -1
    device = devices.pop()
    if on_host:
        if offloaded != "copy":
            raise UnpublishableError(
                f"{on_host[0].name} is a CPU-offloaded shard while other tensors are on "
                f"cuda:{device}; wsync registers one memory kind per rank: pass "
                "offloaded='copy' to publish through a device copy, or keep all shards on one "
                "kind of memory")
        for e in on_host:
            e.staging = torch.empty_like(e.tensor, device=f"cuda:{device}")
            e.memory, e.data_ptr = Memory.DEVICE, e.staging.data_ptr()
    return Memory.DEVICE, int(device)
