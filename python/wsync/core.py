"""The C API as Python objects: Context, Request, Lease (no torch needed).

These classes are thin: each method is one C call whose failure raises the matching
:class:`~wsync.errors.WsyncError`. Planning, data movement and version bookkeeping all happen in
the library. :mod:`wsync.trainer` and :mod:`wsync.rollout` build the torch-facing API on top.
"""
from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Tuple

from . import _lib
from .errors import WsyncError, error_for
from .types import VERSION_NEWEST, Bootstrap, DType, Memory, Replicas, Role, Status


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


@dataclass
class ContextConfig:
    """The fields of wsync_config_t (defaults as WSYNC_CONFIG_INITIALIZER).

    Under ``bootstrap=Bootstrap.MPI`` (mpirun) rank and counts come from MPI_COMM_WORLD; under
    ``Bootstrap.EXPLICIT`` set `rank`, `num_trainers`, `num_rollouts`, `coordinator_address`
    (``"host:port"`` of a wsync-coordinator) and `secret`."""

    role: Role = Role.TRAINER
    bootstrap: Bootstrap = Bootstrap.MPI
    replica: int = -1
    num_slots: int = 2
    timeout_ms: int = 60000
    max_staleness: int = -1
    snapshot: bool = False
    rank: int = -1
    num_trainers: int = 0
    num_rollouts: int = 0
    coordinator_address: Optional[str] = None
    secret: Optional[str] = None
    cuda_device: int = -1

    def to_c(self) -> _lib.Config:
        """The ctypes struct (its char* fields point into this object's strings)."""
        c = _lib.default_config()
        c.role, c.bootstrap, c.replica = int(self.role), int(self.bootstrap), self.replica
        c.num_slots, c.timeout_ms, c.max_staleness = self.num_slots, self.timeout_ms, \
            self.max_staleness
        c.snapshot, c.rank = int(bool(self.snapshot)), self.rank
        c.num_trainers, c.num_rollouts = self.num_trainers, self.num_rollouts
        c.coordinator_address = self.coordinator_address.encode() \
            if self.coordinator_address else None
        c.secret = self.secret.encode() if self.secret else None
        c.cuda_device = self.cuda_device
        return c


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
    """wsync_version_stats_t. Trainer: the last delivered `version`, its `bytes`, `seconds` and
    replica counts (coordinator's measurements). Rollout: the newest `version` ready here, its
    `age_ms`, the coordinator's `newest_started` and `lag` (versions behind it)."""

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
        self.config = config
        self._c_config = config.to_c()  # keeps the strings alive during the call
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
        c.size = ctypes.sizeof(_lib.VersionStats)
        status = _lib.load().wsync_version_stats(self._h(), ctypes.byref(c))
        if status == Status.ERR_NOT_READY:
            return None
        _check(status, self.handle, "wsync_version_stats")
        return VersionStats(*(getattr(c, f[0]) for f in _lib.VersionStats._fields_[1:]))

    def set_tensor_scale(self, tensor: str, scale: float) -> None:
        """wsync_set_tensor_scale: the float8 conversion scale of global tensor `tensor`."""
        _check(_lib.load().wsync_set_tensor_scale(self._h(), tensor.encode(), float(scale)),
               self.handle, "wsync_set_tensor_scale")

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
