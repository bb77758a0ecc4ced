"""The C API as Python objects: Context, Request, Lease (no torch needed).

These classes are thin: each method is one C call whose failure raises the matching
:class:`~wsync.errors.WsyncError`. Planning, data movement and version bookkeeping all happen in
the library. :mod:`wsync.trainer` and :mod:`wsync.rollout` build the torch-facing API on top.
"""
from __future__ import annotations

import ctypes
import enum
import threading
from dataclasses import dataclass, field
from typing import Any, List, Optional, Sequence, Tuple

from . import _lib
from .errors import UnsupportedError, WsyncError, error_for
from .types import (VERSION_NEWEST, Bootstrap, CudaIpcExport, DeviceTransport, DType, Memory,
                    Replicas, Role, ScaleFormat, Status)


def status_name(status: int) -> str:
    """wsync_status_string(status), e.g. ``"WSYNC_ERR_TIMEOUT"``."""
    raw = _lib.load().wsync_status_string(int(status))
    return raw.decode() if raw else f"WSYNC_STATUS_{int(status)}"


def _raise(status: int, message: str, call: str) -> None:
    raise error_for(status, status_name(status), message, call)


def _check(status: int, ctx: Optional[int], call: str) -> None:
    """Raises the WsyncError of a failed call, with wsync_last_error(ctx) as its message."""
    if status == Status.SUCCESS:
        return
    raw = _lib.load().wsync_last_error(ctx)
    _raise(status, raw.decode(errors="replace") if raw else "", call)


@dataclass
class Piece:
    """One piece of a local buffer (wsync_piece_t): elements
    ``[box_offset, box_offset + box_extent)`` of global tensor `tensor` (of `global_shape`) live in
    the buffer from element `local_offset` on, with `local_strides` in elements (None: row-major
    over box_extent; the innermost stride must be 1)."""

    tensor: str
    global_shape: Tuple[int, ...]
    box_offset: Tuple[int, ...]
    box_extent: Tuple[int, ...]
    local_offset: int = 0
    local_strides: Optional[Tuple[int, ...]] = None

    def numel(self) -> int:
        """Elements of the box."""
        n = 1
        for e in self.box_extent:
            n *= e
        return n


# The fields of wsync_config_t that ContextConfig sets (the same names): every one but size /
# magic / version, which the library's wsync_config_init fills (test_parity.py checks the list).
_C_FIELDS = ("role", "bootstrap", "replica", "num_slots", "timeout_ms", "max_staleness",
             "snapshot", "rank", "num_trainers", "num_rollouts", "coordinator_address", "secret",
             "cuda_device", "device_transport", "cuda_ipc_export", "replica_size",
             "replica_rank", "checksums", "checksum_retries", "delta", "delta_max_share")


@dataclass
class ContextConfig:
    """Every settable field of wsync_config_t (include/wsync/wsync.h documents each one).

    A field left None takes the library's default (WSYNC_CONFIG_INITIALIZER, read from the
    library by wsync_config_init: see :meth:`defaults`), so Python never repeats a default.

    Args:
        role: TRAINER or ROLLOUT.
        bootstrap: MPI (mpirun: rank and counts from MPI_COMM_WORLD) or EXPLICIT (a standalone
            wsync-coordinator: `coordinator_address` ``"host:port"`` and `secret`, plus either
            `rank` / `num_trainers` / `num_rollouts` (fixed membership) or, for a rollout
            replica joining a running job, `replica_size` / `replica_rank`).
        replica: rollouts: the replica (engine instance) id, >= 0; a joining replica's id must
            be one no live replica of the job has.
        num_slots: rollouts: version slots per rank (>= 2).
        timeout_ms: bound on every internal wait.
        max_staleness: versions a replica may lag before publish waits for it (-1: unbounded).
        snapshot: trainers: publish copies the buffers into staging before returning.
        rank, num_trainers, num_rollouts: explicit bootstrap, fixed membership: this rank's index
            among the ranks of its role and the job's counts (unused when joining);
            `num_rollouts` 0: an elastic job, whose replicas all join at run time (trainers).
        coordinator_address, secret: explicit bootstrap: the coordinator and its shared secret.
        cuda_device: the CUDA device of device-memory buffers (-1: none).
        device_transport: :class:`~wsync.types.DeviceTransport` of device-memory versions.
        cuda_ipc_export: :class:`~wsync.types.CudaIpcExport` of the CUDA IPC transport.
        replica_size: a rollout replica joining a running job: its number of ranks (> 0);
            0: fixed membership.
        replica_rank: this rank's index in the joining replica, in ``[0, replica_size)``.
        checksums: versions are checksummed and verified on every rollout rank (read by the
            coordinator: trainer rank 0's config under mpirun).
        checksum_retries: with checksums, re-sends of a version whose checksum failed (0: the
            library's default count; -1: never).
        delta: delta versions: writes that cross a NIC carry only the elements that changed
            since the version a replica holds (implies checksums; docs/delta.md; job-wide, like
            checksums).
        delta_max_share: with delta, a write whose patch exceeds this share of its dense bytes
            goes dense, in (0, 1] (0: the library's default)."""

    role: Role = Role.TRAINER
    bootstrap: Bootstrap = Bootstrap.MPI
    replica: Optional[int] = None
    num_slots: Optional[int] = None
    timeout_ms: Optional[int] = None
    max_staleness: Optional[int] = None
    snapshot: Optional[bool] = None
    rank: Optional[int] = None
    num_trainers: Optional[int] = None
    num_rollouts: Optional[int] = None
    coordinator_address: Optional[str] = None
    secret: Optional[str] = None
    cuda_device: Optional[int] = None
    device_transport: Optional[DeviceTransport] = None
    cuda_ipc_export: Optional[CudaIpcExport] = None
    replica_size: Optional[int] = None
    replica_rank: Optional[int] = None
    checksums: Optional[bool] = None
    checksum_retries: Optional[int] = None
    delta: Optional[bool] = None
    delta_max_share: Optional[float] = None

    @staticmethod
    def defaults() -> "ContextConfig":
        """The library's defaults (WSYNC_CONFIG_INITIALIZER via wsync_config_init), every
        field set."""
        return ContextConfig.from_c(_lib.default_config())

    @staticmethod
    def from_c(c: _lib.Config) -> "ContextConfig":
        """The ContextConfig of a ctypes wsync_config_t (every field set)."""
        def text(raw: Optional[bytes]) -> Optional[str]:
            return raw.decode() if raw else None

        return ContextConfig(
            role=Role(c.role), bootstrap=Bootstrap(c.bootstrap), replica=c.replica,
            num_slots=c.num_slots, timeout_ms=c.timeout_ms, max_staleness=c.max_staleness,
            snapshot=bool(c.snapshot), rank=c.rank, num_trainers=c.num_trainers,
            num_rollouts=c.num_rollouts, coordinator_address=text(c.coordinator_address),
            secret=text(c.secret), cuda_device=c.cuda_device,
            device_transport=_enum_or_int(DeviceTransport, c.device_transport),
            cuda_ipc_export=_enum_or_int(CudaIpcExport, c.cuda_ipc_export),
            replica_size=c.replica_size, replica_rank=c.replica_rank,
            checksums=bool(c.checksums), checksum_retries=c.checksum_retries,
            delta=bool(c.delta == 1), delta_max_share=c.delta_max_share)

    def resolved(self) -> "ContextConfig":
        """This config with every None replaced by the library's default."""
        return ContextConfig.from_c(self.to_c())

    def to_c(self) -> _lib.Config:
        """The ctypes struct: the library's defaults, then every field set here (its char*
        fields point into this object's strings)."""
        c = _lib.default_config()
        for name in _C_FIELDS:
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, str):
                value = value.encode()
            elif isinstance(value, bool) or isinstance(value, enum.IntEnum):
                value = int(value)
            setattr(c, name, value)
        return c


def _enum_or_int(kind: Any, value: int) -> Any:
    try:
        return kind(value)
    except ValueError:  # a value a newer library knows
        return value


@dataclass
class PlanInfo:
    """wsync_plan_info_t: bytes per version (whole job), broadcast groups and write ops of this
    rank, replicas in the job."""

    bytes_per_version: int
    broadcast_groups: int
    write_ops: int
    num_replicas: int


@dataclass
class VersionStats:
    """wsync_version_stats_t. Trainer: the last delivered `version`, its `bytes`, `seconds`,
    replica counts and checksum re-sends / failures (coordinator's measurements). Rollout: the
    newest `version` ready here, its `age_ms`, the coordinator's `newest_started` and `lag`
    (versions behind it), and this rank's first readable version: `first_version`,
    `first_version_seconds` (from context creation until it was readable here) and
    `first_version_from_peer` (True: a running replica filled it, peer cold start; False: the
    trainers sent it). Trainer, delta versions: `wire_bytes`, what the trainers' writes (to joined
    replicas too) and broadcasts of the version put on the wire (patches), against `full_bytes`,
    the same dense. Fields a
    library older than the package does not fill are 0."""

    version: int
    bytes: int
    seconds: float
    replicas_ready: int
    replicas_skipped: int
    replicas_lost: int
    retries: int
    checksum_failures: int
    age_ms: int
    newest_started: int
    lag: int
    first_version: int = 0
    first_version_seconds: float = 0.0
    first_version_from_peer: bool = False
    wire_bytes: int = 0
    full_bytes: int = 0


def _require_symbol(name: str) -> None:
    if not _lib.has_symbol(name):
        raise WsyncError(int(Status.ERR_UNSUPPORTED), "WSYNC_ERR_UNSUPPORTED",
                         f"the loaded library ({_lib.library_path()}) has no {name}", name)


class Request:
    """An asynchronous publish (wsync_request_t). Freed on :meth:`free` or garbage collection."""

    def __init__(self, handle: int, ctx: "Context", version: int) -> None:
        self._handle: Optional[int] = handle
        self._ctx = ctx
        self.version = version

    def _error_message(self) -> str:
        lib = _lib.load()
        fn = getattr(lib, "wsync_request_error", None)
        if fn is not None and self._handle:
            raw = fn(self._handle)
            if raw:
                return raw.decode(errors="replace")
        raw = lib.wsync_last_error(self._ctx.handle)
        return raw.decode(errors="replace") if raw else ""

    def test(self) -> bool:
        """True when the version is ready on every replica that takes it; raises its error."""
        status = _lib.load().wsync_request_test(self._require())
        if status == Status.IN_PROGRESS:
            return False
        if status != Status.SUCCESS:
            _raise(status, self._error_message(), "wsync_request_test")
        return True

    def wait(self, timeout_ms: int = -1) -> None:
        """Waits for completion (-1: the context's timeout); raises WsyncTimeoutError when still
        running (wait again), or the publish's error."""
        status = _lib.load().wsync_request_wait(self._require(), int(timeout_ms))
        if status != Status.SUCCESS:
            _raise(status, self._error_message(), "wsync_request_wait")

    def replicas(self, kind: Replicas = Replicas.READY) -> Optional[List[int]]:
        """The replica ids (config.replica of the rollouts) that took this version (READY),
        skipped it (SKIPPED) or were lost while it was in flight (LOST), in increasing order;
        None while it is still in flight. Raises the publish's error when it failed."""
        _require_symbol("wsync_request_replicas")
        fn = _lib.load().wsync_request_replicas
        count = ctypes.c_int(0)
        while True:
            capacity = count.value
            ids = (ctypes.c_int * max(1, capacity))()
            status = fn(self._require(), int(kind), capacity, ids if capacity else None,
                        ctypes.byref(count))
            if status == Status.IN_PROGRESS:
                return None
            if status != Status.SUCCESS:
                _raise(status, self._error_message(), "wsync_request_replicas")
            if count.value <= capacity:
                return [int(ids[i]) for i in range(count.value)]

    def free(self) -> None:
        """Frees the request (a running publish goes on)."""
        if self._handle:
            _lib.load().wsync_request_free(self._handle)
            self._handle = None

    def _require(self) -> int:
        if not self._handle:
            raise WsyncError(int(Status.ERR_INVALID_USAGE), "WSYNC_ERR_INVALID_USAGE",
                             "request already freed", "Request")
        return self._handle

    def __del__(self) -> None:
        try:
            self.free()
        except Exception:  # interpreter shutdown
            pass


class Lease:
    """A reader's hold on one ready version (wsync_lease_t); a context manager that releases."""

    def __init__(self, handle: int) -> None:
        self._handle: Optional[int] = handle
        v = ctypes.c_uint64()
        _check(_lib.load().wsync_lease_version(handle, ctypes.byref(v)), None,
               "wsync_lease_version")
        self.version: int = v.value

    def buffer_address(self, buffer_index: int) -> int:
        """The address of registered buffer `buffer_index` in this version (valid until release)."""
        ptr = ctypes.c_void_p()
        _check(_lib.load().wsync_lease_buffer(self._require(), int(buffer_index),
                                              ctypes.byref(ptr)), None, "wsync_lease_buffer")
        return int(ptr.value or 0)

    @property
    def released(self) -> bool:
        """Whether release() was called."""
        return self._handle is None

    def release(self) -> None:
        """Releases the lease; the slot may be written again afterwards."""
        if self._handle:
            _lib.load().wsync_lease_release(self._handle)
            self._handle = None

    def _require(self) -> int:
        if not self._handle:
            raise WsyncError(int(Status.ERR_INVALID_USAGE), "WSYNC_ERR_INVALID_USAGE",
                             "lease already released", "Lease")
        return self._handle

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


@dataclass
class _Registered:
    name: str
    index: int
    dtype: DType
    num_elements: int
    pieces: List[Piece] = field(default_factory=list)


class Context:
    """A trainer's or a rollout rank's wsync context (wsync_context_t).

    Create it (joins the job: collective under MPI bootstrap), register buffers, :meth:`commit`
    (collective), then publish (trainer) or acquire / copy_flip (rollout). :meth:`close` destroys
    it; a Context is also a context manager."""

    def __init__(self, config: ContextConfig) -> None:
        self._c_config = config.to_c()  # keeps the strings alive during the call
        self.config = ContextConfig.from_c(self._c_config)  # every field set
        handle = ctypes.c_void_p()
        status = _lib.load().wsync_context_create(ctypes.byref(self._c_config),
                                                  ctypes.byref(handle))
        _check(status, None, "wsync_context_create")
        self.handle: Optional[int] = handle.value
        self._lock = threading.Lock()
        self.buffers: List[_Registered] = []
        self.committed = False
        r, t, n = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
        _check(_lib.load().wsync_context_info(self.handle, ctypes.byref(r), ctypes.byref(t),
                                              ctypes.byref(n)), self.handle, "wsync_context_info")
        self.rank, self.num_trainers, self.num_rollouts = r.value, t.value, n.value

    @property
    def role(self) -> Role:
        """TRAINER or ROLLOUT."""
        return Role(self.config.role)

    def _h(self) -> int:
        if not self.handle:
            raise WsyncError(int(Status.ERR_INVALID_USAGE), "WSYNC_ERR_INVALID_USAGE",
                             "context closed", "Context")
        return self.handle

    def last_error(self) -> str:
        """wsync_last_error(ctx)."""
        raw = _lib.load().wsync_last_error(self.handle)
        return raw.decode(errors="replace") if raw else ""

    def register_buffer(self, name: str, dtype: DType, memory: Memory, data: int,
                        num_elements: int, pieces: Sequence[Piece]) -> int:
        """wsync_register_buffer: one local buffer of `num_elements` elements at address `data`
        (0 for a rollout's library-allocated slots) made of `pieces`. Returns the buffer index."""
        arrays: list = []  # keeps every int64 array alive during the call

        def arr(values: Sequence[int]) -> "ctypes.Array[ctypes.c_int64]":
            a = (ctypes.c_int64 * max(1, len(values)))(*values)
            arrays.append(a)
            return a

        c_pieces = (_lib.Piece * max(1, len(pieces)))()
        names = [p.tensor.encode() for p in pieces]
        for i, p in enumerate(pieces):
            c = c_pieces[i]
            c.tensor, c.ndim = names[i], len(p.global_shape)
            c.global_shape = ctypes.cast(arr(p.global_shape), _lib.c_int64_p)
            c.box_offset = ctypes.cast(arr(p.box_offset), _lib.c_int64_p)
            c.box_extent = ctypes.cast(arr(p.box_extent), _lib.c_int64_p)
            c.local_offset = int(p.local_offset)
            if p.local_strides is not None:
                c.local_strides = ctypes.cast(arr(p.local_strides), _lib.c_int64_p)
        index = ctypes.c_int(-1)
        status = _lib.load().wsync_register_buffer(
            self._h(), name.encode(), int(dtype), int(memory), data or None, int(num_elements),
            len(pieces), c_pieces, ctypes.byref(index))
        _check(status, self.handle, "wsync_register_buffer")
        self.buffers.append(_Registered(name, index.value, DType(dtype), int(num_elements),
                                        list(pieces)))
        return index.value

    def commit(self) -> None:
        """wsync_commit: collective over every trainer and rollout; the plan is fixed after it."""
        _check(_lib.load().wsync_commit(self._h()), self.handle, "wsync_commit")
        self.committed = True

    def plan_info(self) -> PlanInfo:
        """wsync_plan_info (after commit)."""
        info = _lib.PlanInfo()
        _check(_lib.load().wsync_plan_info(self._h(), ctypes.byref(info)), self.handle,
               "wsync_plan_info")
        return PlanInfo(info.bytes_per_version, info.broadcast_groups, info.write_ops,
                        info.num_replicas)

    def version_stats(self) -> Optional[VersionStats]:
        """wsync_version_stats: the trainer's last delivered version or the rollout's newest
        ready one, with what wsync measured (see :class:`VersionStats`); None when there is none
        yet (NOT_READY)."""
        _require_symbol("wsync_version_stats")
        c = _lib.VersionStats()
        init = getattr(_lib.load(), "wsync_version_stats_init", None)
        if init is not None:
            init(ctypes.byref(c))
        c.size = ctypes.sizeof(_lib.VersionStats)
        status = _lib.load().wsync_version_stats(self._h(), ctypes.byref(c))
        if status == Status.ERR_NOT_READY:
            return None
        _check(status, self.handle, "wsync_version_stats")
        values = {f[0]: getattr(c, f[0]) for f in _lib.VersionStats._fields_[1:]}
        values["first_version_from_peer"] = bool(values["first_version_from_peer"])
        return VersionStats(**values)

    def set_tensor_scale(self, tensor: str, scale: float) -> None:
        """wsync_set_tensor_scale: the float8 conversion scale of global tensor `tensor`."""
        _check(_lib.load().wsync_set_tensor_scale(self._h(), tensor.encode(), float(scale)),
               self.handle, "wsync_set_tensor_scale")

    def set_block_scaling(self, tensor: str, scale_tensor: str,
                          format: ScaleFormat = ScaleFormat.FLOAT32,
                          block: Tuple[int, int] = (128, 128)) -> None:
        """wsync_set_block_scaling (rollouts, before commit): global tensor `tensor` is held as
        block-scaled float8 e4m3, its scales as global tensor `scale_tensor` of shape
        [..., ceil(rows / block[0]), ceil(cols / block[1])] (float32, uint8 for E8M0)."""
        fn = getattr(_lib.load(), "wsync_set_block_scaling", None)
        if fn is None:
            raise UnsupportedError(int(Status.ERR_UNSUPPORTED), "WSYNC_ERR_UNSUPPORTED",
                                   "this libwsync has no wsync_set_block_scaling",
                                   "wsync_set_block_scaling")
        s = _lib.BlockScaling()
        s.size = ctypes.sizeof(_lib.BlockScaling)
        s.format = int(format)
        s.block_rows, s.block_cols = int(block[0]), int(block[1])
        s.scale_tensor = scale_tensor.encode()
        _check(fn(self._h(), tensor.encode(), ctypes.byref(s)), self.handle,
               "wsync_set_block_scaling")

    def publish(self, version: int, stream: Optional[int] = None) -> Request:
        """wsync_publish, or wsync_publish_on_stream when `stream` (a cudaStream_t as an int;
        0 is the legacy default stream) is given. Returns at once with a Request."""
        req = ctypes.c_void_p()
        lib = _lib.load()
        if stream is None:
            status = lib.wsync_publish(self._h(), int(version), ctypes.byref(req))
            _check(status, self.handle, "wsync_publish")
        else:
            status = lib.wsync_publish_on_stream(self._h(), int(version), stream or None,
                                                 ctypes.byref(req))
            _check(status, self.handle, "wsync_publish_on_stream")
        return Request(int(req.value or 0), self, int(version))

    def newest_version(self) -> Optional[int]:
        """The newest version ready on this replica, or None when none is."""
        v = ctypes.c_uint64()
        status = _lib.load().wsync_newest_version(self._h(), ctypes.byref(v))
        if status == Status.ERR_NOT_READY:
            return None
        _check(status, self.handle, "wsync_newest_version")
        return v.value

    def wait_version(self, after: int = 0, timeout_ms: int = -1) -> int:
        """Blocks until a version newer than `after` is ready; returns the newest ready one."""
        v = ctypes.c_uint64()
        _check(_lib.load().wsync_wait_version(self._h(), int(after), int(timeout_ms),
                                              ctypes.byref(v)), self.handle, "wsync_wait_version")
        return v.value

    def acquire(self, version: int = VERSION_NEWEST) -> Lease:
        """wsync_acquire: a lease on `version` (default the newest ready); raises NotReadyError."""
        lease = ctypes.c_void_p()
        _check(_lib.load().wsync_acquire(self._h(), int(version), ctypes.byref(lease)),
               self.handle, "wsync_acquire")
        return Lease(int(lease.value or 0))

    def copy_flip(self, version: int = VERSION_NEWEST, stream: Optional[int] = None) -> int:
        """wsync_copy_flip: copies `version` into the live memory given at registration (on
        `stream` for device memory; complete on return). Returns the version now live."""
        flipped = ctypes.c_uint64()
        _check(_lib.load().wsync_copy_flip(self._h(), int(version), stream or None,
                                           ctypes.byref(flipped)), self.handle, "wsync_copy_flip")
        return flipped.value

    def abort(self) -> None:
        """wsync_context_abort: every blocked call returns ABORTED. Safe from any thread."""
        if self.handle:
            _lib.load().wsync_context_abort(self.handle)

    def close(self) -> None:
        """wsync_context_destroy (finalizes; waits for in-flight publishes up to the timeout).
        Leases must be released first."""
        with self._lock:
            if self.handle:
                handle, self.handle = self.handle, None
                _check(_lib.load().wsync_context_destroy(handle), None, "wsync_context_destroy")

    def __enter__(self) -> "Context":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
