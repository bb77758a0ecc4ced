"""Trainer side: register a torch model's shards once, publish a version every step.

    trainer = wsync.Trainer(bootstrap=wsync.Bootstrap.mpi())
    trainer.register_module(model)            # DTensor/FSDP2 shards, or specs=..., name_map=...
    trainer.commit()                           # collective with every rollout
    for step in range(1, n + 1):
        train_step(model)
        trainer.publish(step)                  # on the current CUDA stream, snapshot mode

Each local tensor (a DTensor's local shard, a plain parameter, a Megatron TP shard) is registered
as one wsync buffer at its own address, with pieces from :mod:`wsync.layout`; the library plans
and moves the bytes. No gather, no full_tensor().
"""
from __future__ import annotations

import dataclasses
import time
from typing import Any, Dict, List, Mapping, Optional, Union

import torch

from . import _torch
from .bootstrap import Bootstrap
from .core import Context, ContextConfig, PlanInfo, Request, VersionStats
from .errors import UnpublishableError
from .layout import pieces_for
from .types import CudaIpcExport, DeviceTransport, Memory, Role


class Trainer:
    """A trainer rank's wsync endpoint.

    Args:
        bootstrap: how to join the job (default: under mpirun).
        snapshot: publish copies the tensors into wsync's staging before returning, so the next
            optimizer step may change them at once (default True).
        timeout_ms: bound on every internal wait.
        max_staleness: versions a replica may lag before publish waits for it (-1: unbounded).
        cuda_device: the device of the registered tensors (default: found from them).
        device_transport, cuda_ipc_export: the device data plane (:class:`wsync.DeviceTransport`,
            :class:`wsync.CudaIpcExport`).
        checksums, checksum_retries: checksummed versions (read from trainer rank 0 under
            mpirun; a standalone coordinator takes ``--checksums``).
        delta: delta versions (docs/delta.md; read like checksums; a standalone coordinator
            takes ``--delta``).
        config: any other field of wsync_config_t (:class:`wsync.ContextConfig`); the arguments
            above and the bootstrap's fields override it.
    Arguments left None take the library's defaults (WSYNC_CONFIG_INITIALIZER).
    The context is created (the job joined) at the first registration, or by :meth:`connect`."""

    def __init__(self, bootstrap: Optional[Bootstrap] = None, *, snapshot: bool = True,
                 timeout_ms: Optional[int] = None, max_staleness: Optional[int] = None,
                 cuda_device: Optional[int] = None,
                 device_transport: Optional[DeviceTransport] = None,
                 cuda_ipc_export: Optional[CudaIpcExport] = None,
                 checksums: Optional[bool] = None, checksum_retries: Optional[int] = None,
                 delta: Optional[bool] = None,
                 config: Optional[ContextConfig] = None) -> None:
        self.bootstrap = bootstrap or Bootstrap.mpi()
        self.snapshot = snapshot
        self.timeout_ms = timeout_ms
        self.max_staleness = max_staleness
        self.cuda_device = cuda_device
        self.device_transport, self.cuda_ipc_export = device_transport, cuda_ipc_export
        self.checksums, self.checksum_retries = checksums, checksum_retries
        self.delta = delta
        self.base_config = config
        self.ctx: Optional[Context] = None
        self.entries: List[_torch.Entry] = []
        self.memory: Optional[Memory] = None
        self.last_request: Optional[Request] = None
        self.check_pointers = True
        self.publish_python_s: List[float] = []  # Python time per publish minus the C call
        self.publish_c_s: List[float] = []  # time in wsync_publish(_on_stream) per publish

    # ---- lifecycle ------------------------------------------------------------------------------
    def connect(self, cuda_device: Optional[int] = None) -> Context:
        """Creates the context (joins the job; collective under mpirun). Idempotent."""
        if self.ctx is None:
            device = cuda_device if cuda_device is not None else self.cuda_device
            cfg = dataclasses.replace(self.base_config or ContextConfig(), role=Role.TRAINER)
            cfg.snapshot = self.snapshot
            for name in ("timeout_ms", "max_staleness", "device_transport", "cuda_ipc_export",
                         "checksums", "checksum_retries", "delta"):
                if getattr(self, name) is not None:
                    setattr(cfg, name, getattr(self, name))
            if device is not None:
                cfg.cuda_device = int(device)
            self.ctx = Context(self.bootstrap.apply(cfg))
        return self.ctx

    @property
    def rank(self) -> int:
        """This trainer's index among the trainers."""
        return self.connect().rank

    def commit(self) -> PlanInfo:
        """Collective with every trainer and rollout: fixes the plan. Returns this rank's part."""
        ctx = self.connect()
        ctx.commit()
        return ctx.plan_info()

    def close(self) -> None:
        """Waits for the last publish and leaves the job."""
        if self.ctx is not None:
            self.ctx.close()
            self.ctx = None

    def __enter__(self) -> "Trainer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- registration ---------------------------------------------------------------------------
    def register_module(self, source: Union[torch.nn.Module, Mapping[str, torch.Tensor]], *,
                        specs: Optional[Mapping[str, _torch.Spec]] = None,
                        name_map: _torch.NameMap = None, include_buffers: bool = False,
                        offloaded: str = "error") -> List[str]:
        """Registers every parameter of `source` (a module, or a dict of named tensors).

        Shards come from `specs` (keyed by module or HF name: boxes, or a callable(hf_name,
        local) -> boxes, e.g. :func:`wsync.layout.fused_qkv`), else from DTensor placements, else
        the tensor is a whole replica. `name_map` maps module names to Hugging Face names (wrapper
        prefixes such as ``_orig_mod.`` and ``module.`` are stripped first). CPU-offloaded shards
        next to device shards raise UnpublishableError unless ``offloaded="copy"``.
        Returns the registered HF names."""
        entries = _torch.entries_of(source, specs, name_map, include_buffers)
        return self._register(entries, offloaded)

    register_tensors = register_module

    def _register(self, entries: List[_torch.Entry], offloaded: str) -> List[str]:
        memory, device = _torch.check_one_memory_kind(self.entries + entries, offloaded)
        if self.memory is not None and memory != self.memory:
            raise UnpublishableError(f"this rank registered {self.memory.name} memory before; "
                                     f"now {memory.name}")
        ctx = self.connect(device if device >= 0 else None)
        if device >= 0 and ctx.config.cuda_device not in (-1, device):
            raise UnpublishableError(f"tensors on cuda:{device}, context on "
                                     f"cuda:{ctx.config.cuda_device}")
        self.memory = memory
        for e in entries:
            registered = e.staging if e.staging is not None else e.tensor
            pieces = pieces_for(e.boxes, registered.stride())
            e.index = ctx.register_buffer(e.name, e.dtype, e.memory, registered.data_ptr(),
                                          _torch.span_elements(registered), pieces)
            self.entries.append(e)
        return [e.name for e in entries]

    # ---- publish --------------------------------------------------------------------------------
    def set_scale(self, tensor: str, scale: float) -> None:
        """The float8 conversion scale of global tensor `tensor` (see wsync_set_tensor_scale)."""
        self.connect().set_tensor_scale(tensor, scale)

    def _refresh(self) -> None:
        for e in self.entries:
            if e.staging is not None:
                e.staging.copy_(e.tensor, non_blocking=True)
            if self.check_pointers and e.tensor.data_ptr() != e.data_ptr and e.staging is None:
                raise UnpublishableError(
                    f"{e.name}: its memory moved since registration (the parameter's storage "
                    "was replaced, e.g. by param.data = ...); update tensors in place")

    def publish(self, version: int, *, wait: bool = False,
                stream: Optional[Any] = None) -> Request:
        """Publishes `version` (strictly increasing) and returns its Request at once.

        Device tensors: the version is what torch's current CUDA stream (or `stream`, a
        torch.cuda.Stream) has produced when this is called; in snapshot mode later work on that
        stream waits for the snapshot copy, with no device-wide sync. `wait`: also wait for the
        version to be ready on every replica."""
        ctx = self.connect()
        t0 = time.perf_counter()
        self._refresh()
        c_stream = None
        if self.memory == Memory.DEVICE:
            c_stream = int(stream.cuda_stream) if stream is not None else \
                _torch.current_stream(torch.device("cuda", ctx.config.cuda_device))
        if self.last_request is not None:
            self.last_request.free()
        t1 = time.perf_counter()
        request = ctx.publish(version, c_stream)
        t2 = time.perf_counter()
        self.last_request = request
        self.publish_python_s.append((t1 - t0) + (time.perf_counter() - t2))
        self.publish_c_s.append(t2 - t1)
        if wait:
            request.wait()
        return request

    def version_stats(self) -> Optional[VersionStats]:
        """The last delivered version with the coordinator's measurements (bytes, seconds,
        replicas ready / skipped / lost); None before the first delivery."""
        return self.connect().version_stats()

    def names(self) -> Dict[str, int]:
        """Registered buffer names and their indices."""
        return {e.name: e.index for e in self.entries}
