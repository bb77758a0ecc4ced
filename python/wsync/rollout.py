"""Rollout side: subscribe to a policy and apply each new version to a torch model.

Two ways to apply a version:
  * copy flip (``mode="copy_flip"``): wsync writes each version into its own slots and
    :meth:`Rollout.flip` copies the newest ready one into the model's parameters in place (on the
    current CUDA stream, bounded by HBM bandwidth): parameter addresses never change, so captured
    CUDA graphs stay valid.
  * pointer swap (``mode="pointer_swap"``): :meth:`Rollout.swap` makes every parameter a view of
    the leased slot (``param.data = view``) and holds that lease until the next swap: no copy at
    all, but addresses change (re-capture graphs, or use copy flip).
Engines that load weights themselves use :meth:`Rollout.named_tensors` (a lease's tensors as
``(hf_name, tensor)`` pairs) on buffers registered with :meth:`Rollout.register_slots`.
"""
from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import torch

from . import _torch, layout
from .bootstrap import Bootstrap
from .core import Context, ContextConfig, Lease, PlanInfo, VersionStats
from .errors import NotReadyError, UnpublishableError, WsyncTimeoutError
from .layout import pieces_for
from .types import (VERSION_NEWEST, CudaIpcExport, DeviceTransport, Memory, Role, ScaleFormat,
                    torch_dtype_to_wsync, wsync_dtype_to_torch)

SlotSpec = Union[torch.Tensor, Tuple[Sequence[int], torch.dtype]]


@dataclass
class _View:
    """How to view a registered buffer in a leased slot."""

    name: str
    index: int
    dtype: torch.dtype
    shape: Tuple[int, ...]
    stride: Tuple[int, ...]
    num_elements: int
    param: Optional[torch.nn.Parameter]
    live: bool  # registered with live memory (copy flip)


class Watcher:
    """A thread calling `callback(version)` for every newer ready version (see
    :meth:`Rollout.on_new_version`); :meth:`stop` ends it."""

    def __init__(self, ctx: Context, callback: Callable[[int], None], after: int,
                 poll_ms: int) -> None:
        self._ctx, self._callback, self._after, self._poll_ms = ctx, callback, after, poll_ms
        self._stop = threading.Event()
        self.error: Optional[BaseException] = None
        self.thread = threading.Thread(target=self._run, name="wsync-watcher", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                newest = self._ctx.wait_version(self._after, self._poll_ms)
            except WsyncTimeoutError:
                continue
            except BaseException as e:  # aborted or closed: report and end
                if not self._stop.is_set():
                    self.error = e
                return
            self._after = newest
            self._callback(newest)

    def stop(self) -> None:
        """Stops the thread (returns within one poll interval)."""
        self._stop.set()
        if threading.current_thread() is not self.thread:
            self.thread.join()


class Rollout:
    """A rollout rank's wsync endpoint (one GPU worker of an engine replica).

    Args:
        bootstrap: how to join the job (default: under mpirun). ``Bootstrap.join(address,
            secret, replica_size, replica_rank)``: a replica joining a running job.
        replica: this engine instance's id (>= 0); ranks of one replica get versions together.
            A joining replica's id is one no live replica has (e.g. :func:`wsync.replica_id` of
            the engine's own id).
        num_slots: version slots per rank (>= 2).
        timeout_ms: bound on every internal wait.
        cuda_device: the device of the registered tensors (default: found from them).
        device_transport, cuda_ipc_export: the device data plane (:class:`wsync.DeviceTransport`,
            :class:`wsync.CudaIpcExport`).
        config: any other field of wsync_config_t (:class:`wsync.ContextConfig`); the arguments
            above and the bootstrap's fields override it.
    Arguments left None take the library's defaults (WSYNC_CONFIG_INITIALIZER)."""

    def __init__(self, bootstrap: Optional[Bootstrap] = None, *, replica: int = 0,
                 num_slots: Optional[int] = None, timeout_ms: Optional[int] = None,
                 cuda_device: Optional[int] = None,
                 device_transport: Optional[DeviceTransport] = None,
                 cuda_ipc_export: Optional[CudaIpcExport] = None,
                 config: Optional[ContextConfig] = None) -> None:
        self.bootstrap = bootstrap or Bootstrap.mpi()
        self.replica, self.num_slots, self.timeout_ms = replica, num_slots, timeout_ms
        self.cuda_device = cuda_device
        self.device_transport, self.cuda_ipc_export = device_transport, cuda_ipc_export
        self.base_config = config
        self.ctx: Optional[Context] = None
        self.views: List[_View] = []
        self.memory: Optional[Memory] = None
        self.version: Optional[int] = None  # the version live in the model's parameters
        self._lease: Optional[Lease] = None  # pointer swap: the lease the parameters view
        self._watchers: List[Watcher] = []
        self.flip_python_s: List[float] = []  # Python time per flip/swap minus the C calls
        self.flip_c_s: List[float] = []  # time in wsync_copy_flip per flip

    def set_block_scaling(self, tensor: str, scale_tensor: str,
                          format: ScaleFormat = ScaleFormat.FLOAT32,
                          block: Tuple[int, int] = (128, 128)) -> None:
        """Before commit: HF tensor `tensor` is held here as block-scaled float8 e4m3 (register its
        float8 parameter as usual) with its scales registered as `scale_tensor` (e.g. vLLM's
        ``...weight_scale_inv``). The trainers keep sending bf16 / fp32: each quantizes its own
        elements in flight, bit-equal to the engine's quantizer (docs/block_fp8.md)."""
        self.connect().set_block_scaling(tensor, scale_tensor, format, block)

    # ---- lifecycle ------------------------------------------------------------------------------
    def connect(self, cuda_device: Optional[int] = None) -> Context:
        """Creates the context (joins the job). Idempotent."""
        if self.ctx is None:
            device = cuda_device if cuda_device is not None else self.cuda_device
            cfg = dataclasses.replace(self.base_config or ContextConfig(), role=Role.ROLLOUT)
            cfg.replica = self.replica
            for name in ("num_slots", "timeout_ms", "device_transport", "cuda_ipc_export"):
                if getattr(self, name) is not None:
                    setattr(cfg, name, getattr(self, name))
            if device is not None:
                cfg.cuda_device = int(device)
            self.ctx = Context(self.bootstrap.apply(cfg))
        return self.ctx

    @property
    def rank(self) -> int:
        """This rollout's index among the rollout ranks."""
        return self.connect().rank

    def commit(self) -> PlanInfo:
        """Collective with every trainer and rollout: fixes the plan."""
        ctx = self.connect()
        ctx.commit()
        return ctx.plan_info()

    def close(self) -> None:
        """Stops watchers, releases the held lease, leaves the job."""
        for w in self._watchers:
            w.stop()
        self._watchers.clear()
        if self._lease is not None:
            self._lease.release()
            self._lease = None
        if self.ctx is not None:
            self.ctx.close()
            self.ctx = None

    def __enter__(self) -> "Rollout":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- registration ---------------------------------------------------------------------------
    def register_module(self, model: Union[torch.nn.Module, Mapping[str, torch.Tensor]], *,
                        specs: Optional[Mapping[str, _torch.Spec]] = None,
                        name_map: _torch.NameMap = None, mode: str = "copy_flip",
                        include_buffers: bool = False) -> List[str]:
        """Registers what this rank wants: every parameter of `model`, its boxes from `specs`
        (e.g. fused qkv / gate_up of this TP rank), DTensor placements, or the whole tensor.
        ``mode="copy_flip"`` registers the parameters' memory as live memory; ``"pointer_swap"``
        registers slots only and swaps views in. Returns the registered HF names."""
        if mode not in ("copy_flip", "pointer_swap"):
            raise ValueError(f"mode {mode!r}: use 'copy_flip' or 'pointer_swap'")
        entries = _torch.entries_of(model, specs, name_map, include_buffers)
        for e in entries:
            if not e.tensor.is_contiguous():
                raise UnpublishableError(f"{e.name}: rollout tensors must be contiguous (a copy "
                                         "flip writes the buffer's bytes as one range)")
        return self._register(entries, live=(mode == "copy_flip"))

    def register_slots(self, named: Mapping[str, SlotSpec], *,
                       specs: Optional[Mapping[str, _torch.Spec]] = None,
                       device: Optional[Union[str, torch.device]] = None) -> List[str]:
        """Registers library-owned slot buffers for :meth:`named_tensors`: `named` maps each HF
        name to a tensor (its shape/dtype; a meta tensor is fine) or ``(shape, dtype)``; `specs`
        give this rank's boxes (default the whole tensor); `device` "cpu" or "cuda:N"."""
        dev = torch.device(device) if device is not None else torch.device("cpu")
        entries = []
        for name, spec in named.items():
            shape, dtype = (tuple(spec.shape), spec.dtype) if isinstance(spec, torch.Tensor) \
                else (tuple(spec[0]), spec[1])
            meta = torch.empty(shape, dtype=dtype, device="meta")
            s = (specs or {}).get(name)
            boxes = list(s(name, meta) if callable(s) else s) if s is not None else \
                layout.whole(name, shape)
            memory = Memory.DEVICE if dev.type == "cuda" else Memory.HOST
            entries.append(_torch.Entry(name, meta, boxes, torch_dtype_to_wsync(dtype), memory,
                                        meta.numel()))
        device_index = (dev.index or 0) if dev.type == "cuda" else -1
        return self._register(entries, live=False, device_index=device_index)

    def _register(self, entries: List[_torch.Entry], live: bool,
                  device_index: Optional[int] = None) -> List[str]:
        if device_index is None:
            memory, device_index = _torch.check_one_memory_kind(entries, "error")
        else:
            memory = Memory.DEVICE if device_index >= 0 else Memory.HOST
        if self.memory is not None and memory != self.memory:
            raise UnpublishableError(f"this rank registered {self.memory.name} memory before; "
                                     f"now {memory.name}")
        self.memory = memory
        ctx = self.connect(device_index if device_index >= 0 else None)
        for e in entries:
            pieces = pieces_for(e.boxes, e.tensor.stride())
            data = e.tensor.data_ptr() if live else 0
            e.index = ctx.register_buffer(e.name, e.dtype, memory, data, e.num_elements, pieces)
            self.views.append(_View(e.name, e.index, wsync_dtype_to_torch(e.dtype),
                                    tuple(e.tensor.shape), tuple(e.tensor.stride()),
                                    e.num_elements, e.param, live))
        return [e.name for e in entries]

    # ---- versions -------------------------------------------------------------------------------
    def _device(self) -> Optional[torch.device]:
        if self.memory != Memory.DEVICE:
            return None
        return torch.device("cuda", self.connect().config.cuda_device)

    def newest_version(self) -> Optional[int]:
        """The newest version ready on this replica (None: none yet)."""
        return self.connect().newest_version()

    def version_stats(self) -> Optional[VersionStats]:
        """The newest version ready here, its age in ms and its lag behind the newest version
        the trainers started, and this rank's first version (when, and whether a peer replica
        filled it: ``first_version_from_peer``); None: none ready yet."""
        return self.connect().version_stats()

    def wait_for_version(self, after: Optional[int] = None, timeout_ms: int = -1) -> int:
        """Blocks until a version newer than `after` (default: the live one) is ready."""
        base = after if after is not None else (self.version or 0)
        return self.connect().wait_version(base, timeout_ms)

    def on_new_version(self, callback: Callable[[int], None], poll_ms: int = 200) -> Watcher:
        """Calls `callback(version)` on a background thread for every newer ready version."""
        w = Watcher(self.connect(), callback, self.version or 0, poll_ms)
        self._watchers.append(w)
        return w

    def flip(self, version: int = VERSION_NEWEST) -> Optional[int]:
        """Copy flip: copies `version` (default the newest ready) into the live parameters on the
        current CUDA stream (complete on return). Returns the live version; None when none is ready
        yet. Does nothing when the newest is already live."""
        ctx = self.connect()
        t0 = time.perf_counter()
        if version == VERSION_NEWEST:
            newest = ctx.newest_version()
            if newest is None or newest == self.version:
                return self.version
        stream = _torch.current_stream(self._device()) if self.memory == Memory.DEVICE else None
        t1 = time.perf_counter()
        try:
            flipped = ctx.copy_flip(version, stream)
        except NotReadyError:
            return self.version
        t2 = time.perf_counter()
        self.version = flipped
        self.flip_python_s.append((t1 - t0) + (time.perf_counter() - t2))
        self.flip_c_s.append(t2 - t1)
        return flipped

    def swap(self, version: int = VERSION_NEWEST) -> Optional[int]:
        """Pointer swap: every registered parameter becomes a view of `version`'s slot (default the
        newest ready), whose lease is held until the next swap or close. Returns the version now
        in use (None: none ready yet)."""
        ctx = self.connect()
        t0 = time.perf_counter()
        if version == VERSION_NEWEST and self._lease is not None:
            newest = ctx.newest_version()
            if newest is None or newest == self.version:
                return self.version
        try:
            lease = ctx.acquire(version)
        except NotReadyError:
            return self.version
        device = self._device()
        for v in self.views:
            if v.param is not None:
                v.param.data = self._view(lease, v, device)
        previous, self._lease, self.version = self._lease, lease, lease.version
        if previous is not None:
            previous.release()
        self.flip_python_s.append(time.perf_counter() - t0)
        return self.version

    def update(self) -> Optional[int]:
        """Brings the model to the newest ready version by its mode (flip or swap); returns the
        version in use."""
        if any(v.live for v in self.views):
            return self.flip()
        return self.swap()

    @contextlib.contextmanager
    def batch(self) -> Iterator[Optional[int]]:
        """``with rollout.batch() as version:`` updates the model at a safe point (the start of a
        batch or decode step) and yields the version this batch is generated with."""
        yield self.update()

    @contextlib.contextmanager
    def lease(self, version: int = VERSION_NEWEST) -> Iterator[Lease]:
        """A lease on `version` for one forward pass (released on exit)."""
        lease = self.connect().acquire(version)
        try:
            yield lease
        finally:
            lease.release()

    def named_tensors(self, version: int = VERSION_NEWEST, names: Optional[Sequence[str]] = None
                      ) -> Iterator[Tuple[str, torch.Tensor]]:
        """``(hf_name, tensor)`` for every registered buffer (or those in `names`), as views of
        `version`'s slot (this rank's part of each tensor). A lease is held until the iteration
        ends: copy what you keep (an engine's load_weights does)."""
        ctx = self.connect()
        wanted = None if names is None else set(names)
        lease = ctx.acquire(version)
        try:
            device = self._device()
            for v in self.views:
                if wanted is not None and v.name not in wanted:
                    continue
                yield v.name, self._view(lease, v, device)
            self.last_named_version = lease.version
        finally:
            lease.release()

    def lease_tensors(self, lease: Lease, names: Optional[Sequence[str]] = None
                      ) -> Dict[str, torch.Tensor]:
        """The registered buffers (or those in `names`) as views of `lease`'s slot (valid until
        it is released)."""
        device = self._device()
        return {v.name: self._view(lease, v, device) for v in self.views
                if names is None or v.name in names}

    def _view(self, lease: Lease, v: _View, device: Optional[torch.device]) -> torch.Tensor:
        """Registered buffer `v` in `lease`'s slot, as a tensor of its registered shape."""
        assert self.memory is not None, "nothing registered"
        return _torch.tensor_at(lease.buffer_address(v.index), v.dtype, v.shape, v.stride,
                                v.num_elements, self.memory, device)
