"""Exceptions carrying wsync's status codes and messages.

Every failing C call becomes a :class:`WsyncError` (or one of its subclasses, one per status code),
whose ``status`` is the numeric ``wsync_status_t``, ``status_name`` its name as
``wsync_status_string`` spells it (``"WSYNC_ERR_TIMEOUT"``) and ``message`` the explanation from
``wsync_last_error`` (or ``wsync_request_error`` for a failed publish). Errors that the Python layer
detects before calling the library (a Partial placement, a CPU-offloaded shard) are
:class:`UnpublishableError`, a subclass of :class:`InvalidArgumentError`.
"""
from __future__ import annotations

from typing import Dict, Type

from .types import Status


class WsyncError(RuntimeError):
    """A wsync call failed.

    Attributes:
        status: the ``wsync_status_t`` value.
        status_name: its name (``"WSYNC_ERR_MISMATCH"``).
        message: wsync's explanation (``wsync_last_error``), possibly empty.
        call: the C function (or Python operation) that failed.
    """

    def __init__(self, status: int, status_name: str, message: str, call: str = "") -> None:
        self.status = int(status)
        self.status_name = status_name
        self.message = message
        self.call = call
        where = f"{call}: " if call else ""
        text = f"{where}{status_name}"
        if message:
            text += f": {message}"
        super().__init__(text)


class InvalidArgumentError(WsyncError, ValueError):
    """WSYNC_ERR_INVALID_ARGUMENT: a parameter is malformed."""


class InvalidUsageError(WsyncError):
    """WSYNC_ERR_INVALID_USAGE: a call out of order (publish before commit, ...)."""


class MismatchError(WsyncError):
    """WSYNC_ERR_MISMATCH: registrations disagree (shape, dtype, name, coverage)."""


class WsyncTimeoutError(WsyncError, TimeoutError):
    """WSYNC_ERR_TIMEOUT: a wait ran past its timeout; nothing was lost."""


class NotReadyError(WsyncError):
    """WSYNC_ERR_NOT_READY: no version is ready (yet), or the asked one is gone."""


class WsyncSystemError(WsyncError, OSError):
    """WSYNC_ERR_SYSTEM: an OS, MPI, UCX or CUDA call failed."""


class RemoteError(WsyncError):
    """WSYNC_ERR_REMOTE: a peer or the coordinator failed or reported an error."""


class ProtocolError(WsyncError):
    """WSYNC_ERR_PROTOCOL: a malformed, truncated or unauthenticated message."""


class UnsupportedError(WsyncError):
    """WSYNC_ERR_UNSUPPORTED: valid, but not supported by this build or machine."""


class AbortedError(WsyncError):
    """WSYNC_ERR_ABORTED: the context was aborted."""


class InternalError(WsyncError):
    """WSYNC_ERR_INTERNAL: a bug in wsync; the message says where."""


class TrainersDoneError(WsyncError):
    """WSYNC_ERR_TRAINERS_DONE: the trainers finished (every one said goodbye); no version newer
    than the last one started will come. The newest ready version stays readable."""


class UnpublishableError(InvalidArgumentError):
    """A tensor that wsync cannot register as it is (Partial placement, CPU-offloaded shard mixed
    with device shards, non-unit inner stride); raised by the Python layer before any C call."""

    def __init__(self, message: str, call: str = "register") -> None:
        super().__init__(int(Status.ERR_INVALID_ARGUMENT), "WSYNC_ERR_INVALID_ARGUMENT", message,
                         call)


class LibraryNotFoundError(ImportError):
    """libwsync.so could not be found or loaded (see :func:`wsync.library_path`)."""


_BY_STATUS: Dict[int, Type[WsyncError]] = {
    Status.ERR_INVALID_ARGUMENT: InvalidArgumentError,
    Status.ERR_INVALID_USAGE: InvalidUsageError,
    Status.ERR_MISMATCH: MismatchError,
    Status.ERR_TIMEOUT: WsyncTimeoutError,
    Status.ERR_NOT_READY: NotReadyError,
    Status.ERR_SYSTEM: WsyncSystemError,
    Status.ERR_REMOTE: RemoteError,
    Status.ERR_PROTOCOL: ProtocolError,
    Status.ERR_UNSUPPORTED: UnsupportedError,
    Status.ERR_ABORTED: AbortedError,
    Status.ERR_INTERNAL: InternalError,
    Status.ERR_TRAINERS_DONE: TrainersDoneError,
}


def error_for(status: int, status_name: str, message: str, call: str = "") -> WsyncError:
    """The exception object for a failed call with `status` (the matching subclass)."""
    cls = _BY_STATUS.get(int(status), WsyncError)
    return cls(status, status_name, message, call)
