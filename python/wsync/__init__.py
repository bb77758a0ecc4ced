"""wsync: weight synchronization from RL trainers to rollout engines, for Python.

Core (no torch needed): :class:`Context`, :class:`Piece`, :class:`Request`, :class:`Lease`,
:class:`Bootstrap`, :class:`Coordinator`, the :mod:`wsync.errors` hierarchy. Torch side (imported
on first use): :class:`Trainer`, :class:`Rollout`, :mod:`wsync.layout`. Engine adapters:
:mod:`wsync.engines.vllm`, :mod:`wsync.engines.sglang`, :mod:`wsync.engines.verl`.
"""
from __future__ import annotations

from typing import Any

from ._lib import find_coordinator, library_path, library_version
from ._version import __version__
from .bootstrap import Bootstrap, Coordinator, replica_id
from .core import (Context, ContextConfig, Lease, Piece, PlanInfo, Request, VersionStats,
                   status_name)
from .errors import (AbortedError, InternalError, InvalidArgumentError, InvalidUsageError,
                     LibraryNotFoundError, MismatchError, NotReadyError, ProtocolError,
                     RemoteError, TrainersDoneError, UnpublishableError, UnsupportedError,
                     WsyncError, WsyncSystemError, WsyncTimeoutError)
from .types import (VERSION_NEWEST, CudaIpcExport, DeviceTransport, DType, Memory, Replicas,
                    Role, ScaleFormat, Status)

__all__ = [
    "__version__", "library_path", "library_version", "find_coordinator", "Bootstrap",
    "Coordinator", "replica_id", "DeviceTransport", "CudaIpcExport", "Context", "ContextConfig",
    "Lease", "Piece", "PlanInfo", "Request",
    "VersionStats", "status_name", "Trainer", "Rollout", "VERSION_NEWEST", "DType", "Memory",
    "Replicas", "Role", "ScaleFormat", "Status", "WsyncError", "InvalidArgumentError",
    "InvalidUsageError", "MismatchError", "WsyncTimeoutError", "NotReadyError",
    "WsyncSystemError", "RemoteError", "ProtocolError", "UnsupportedError", "AbortedError",
    "InternalError", "TrainersDoneError", "UnpublishableError", "LibraryNotFoundError",
]


def __getattr__(name: str) -> Any:
    """Trainer and Rollout import torch: load them only when asked for."""
    if name == "Trainer":
        from .trainer import Trainer

        return Trainer
    if name == "Rollout":
        from .rollout import Rollout

        return Rollout
    raise AttributeError(f"module 'wsync' has no attribute {name!r}")
