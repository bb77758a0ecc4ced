"""The C API's enums (include/wsync/wsync_types.h, wsync.h) as Python IntEnums, and dtype maps."""
from __future__ import annotations

import enum
from typing import Any, Dict

VERSION_NEWEST: int = 2**64 - 1
"""For acquire()/copy_flip(): the newest version ready on this rank's replica."""


class Status(enum.IntEnum):
    """wsync_status_t."""

    SUCCESS = 0
    IN_PROGRESS = 1
    ERR_INVALID_ARGUMENT = 2
    ERR_INVALID_USAGE = 3
    ERR_MISMATCH = 4
    ERR_TIMEOUT = 5
    ERR_NOT_READY = 6
    ERR_SYSTEM = 7
    ERR_REMOTE = 8
    ERR_PROTOCOL = 9
    ERR_UNSUPPORTED = 10
    ERR_ABORTED = 11
    ERR_INTERNAL = 12
    ERR_TRAINERS_DONE = 13


class Role(enum.IntEnum):
    """wsync_role_t."""

    TRAINER = 0
    ROLLOUT = 1


class Bootstrap(enum.IntEnum):
    """wsync_bootstrap_t."""

    MPI = 0
    EXPLICIT = 1


class DeviceTransport(enum.IntEnum):
    """wsync_device_transport_t: how device-memory versions reach the rollouts (the environment
    variable WSYNC_DEVICE_TRANSPORT overrides it)."""

    DEFAULT = 0  # wsync's choice (today: CUDA IPC)
    CUDA_IPC = 1  # CUDA IPC peer copies (one node)
    STAGED = 2  # any node: through pinned host memory and UCX
    UCX_CUDA = 3  # any node: UCX device puts when the UCX loaded handles CUDA memory, else staged


class CudaIpcExport(enum.IntEnum):
    """wsync_cuda_ipc_export_t: how the CUDA IPC transport shares rollout slots (the environment
    variable WSYNC_CUDA_IPC_EXPORT overrides it)."""

    DEFAULT = 0  # wsync's choice (today VMM where the driver supports it)
    VMM = 1  # VMM allocations shared by file descriptor
    LEGACY = 2  # cudaIpcGetMemHandle handles


class Replicas(enum.IntEnum):
    """wsync_replicas_kind_t: which replicas a delivered version reached."""

    READY = 0
    SKIPPED = 1
    LOST = 2


class Memory(enum.IntEnum):
    """wsync_memory_kind_t."""

    HOST = 0
    DEVICE = 1


class ScaleFormat(enum.IntEnum):
    """wsync_scale_format_t: how a block-scaled float8 rollout weight stores its scales."""

    FLOAT32 = 1  # float32 max(amax, 1e-4) / 448 per block (vLLM per_block_cast_to_fp8)
    POW2_FLOAT32 = 2  # the same rounded up to a power of two (use_ue8m0)
    E8M0 = 3  # uint8 biased exponent per 1x32 block (OCP MXFP8)
    FLOAT32_GPU = 4  # FLOAT32 as torch computes it on CUDA: max(amax, 1e-4) * fl(1 / 448)


class DType(enum.IntEnum):
    """wsync_dtype_t."""

    FLOAT32 = 0
    BFLOAT16 = 1
    FLOAT16 = 2
    FLOAT8_E4M3 = 3
    FLOAT8_E5M2 = 4
    INT8 = 5
    INT16 = 6
    INT32 = 7
    INT64 = 8
    UINT8 = 9
    BOOL = 10


DTYPE_SIZE: Dict[DType, int] = {
    DType.FLOAT32: 4, DType.BFLOAT16: 2, DType.FLOAT16: 2, DType.FLOAT8_E4M3: 1,
    DType.FLOAT8_E5M2: 1, DType.INT8: 1, DType.INT16: 2, DType.INT32: 4, DType.INT64: 8,
    DType.UINT8: 1, DType.BOOL: 1,
}


def torch_dtype_to_wsync(dtype: Any) -> DType:
    """The wsync dtype of a torch dtype; raises UnpublishableError for one wsync lacks."""
    import torch

    table = {
        torch.float32: DType.FLOAT32, torch.bfloat16: DType.BFLOAT16, torch.float16: DType.FLOAT16,
        torch.int8: DType.INT8, torch.int16: DType.INT16, torch.int32: DType.INT32,
        torch.int64: DType.INT64, torch.uint8: DType.UINT8, torch.bool: DType.BOOL,
    }
    for name, code in (("float8_e4m3fn", DType.FLOAT8_E4M3), ("float8_e5m2", DType.FLOAT8_E5M2)):
        if hasattr(torch, name):
            table[getattr(torch, name)] = code
    if dtype not in table:
        from .errors import UnpublishableError

        raise UnpublishableError(f"dtype {dtype} has no wsync equivalent")
    return table[dtype]


def wsync_dtype_to_torch(dtype: DType) -> Any:
    """The torch dtype of a wsync dtype."""
    import torch

    table = {
        DType.FLOAT32: torch.float32, DType.BFLOAT16: torch.bfloat16, DType.FLOAT16: torch.float16,
        DType.FLOAT8_E4M3: getattr(torch, "float8_e4m3fn", None),
        DType.FLOAT8_E5M2: getattr(torch, "float8_e5m2", None), DType.INT8: torch.int8,
        DType.INT16: torch.int16, DType.INT32: torch.int32, DType.INT64: torch.int64,
        DType.UINT8: torch.uint8, DType.BOOL: torch.bool,
    }
    return table[DType(dtype)]
