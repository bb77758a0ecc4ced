"""Finds libwsync.so and declares the C API's prototypes for ctypes.

Why ctypes: the C API (include/wsync/wsync.h) is small, plain C, with opaque handles and
status codes, so ctypes binds it with no compile step beyond the library itself; one wheel works
for every CPython version (no per-interpreter extension module), and a library built elsewhere
(the CMake build, a carried .so on a GPU machine) can be used as it is. A ctypes call costs about a
microsecond, negligible next to a publish or a flip; ctypes releases the GIL during each call, so
a blocking wait on one thread never stalls another.

Search order for the library: ``$WSYNC_LIBRARY`` (a file), the package's own ``lib/`` folder (a
wheel built by pip), the package folder, a CMake build of the repository the package sits in
(``build*/src/capi/libwsync.so``), then the system loader (``libwsync.so`` on LD_LIBRARY_PATH).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
import threading
from pathlib import Path
from typing import List, Optional, Tuple

from .errors import LibraryNotFoundError

_PACKAGE_DIR = Path(__file__).resolve().parent
_REPO_DIR = _PACKAGE_DIR.parent.parent  # <repo>/python/wsync -> <repo>

c_int64_p = ctypes.POINTER(ctypes.c_int64)


class Config(ctypes.Structure):
    """wsync_config_t: every field, in the header's order (tests/python/test_parity.py checks the
    sizes and offsets against include/wsync/wsync.h). `size` tells the library which fields we
    know; :func:`default_config` fills them from the library's WSYNC_CONFIG_INITIALIZER."""

    _fields_ = [
        ("size", ctypes.c_size_t),
        ("magic", ctypes.c_uint32),
        ("version", ctypes.c_uint32),
        ("role", ctypes.c_int),
        ("bootstrap", ctypes.c_int),
        ("replica", ctypes.c_int),
        ("num_slots", ctypes.c_int),
        ("timeout_ms", ctypes.c_int),
        ("max_staleness", ctypes.c_int),
        ("snapshot", ctypes.c_int),
        ("rank", ctypes.c_int),
        ("num_trainers", ctypes.c_int),
        ("num_rollouts", ctypes.c_int),
        ("coordinator_address", ctypes.c_char_p),
        ("secret", ctypes.c_char_p),
        ("cuda_device", ctypes.c_int),
        # the data-plane layout
        ("device_transport", ctypes.c_int),  # wsync_device_transport_t
        ("cuda_ipc_export", ctypes.c_int),  # wsync_cuda_ipc_export_t
        # the joining layout
        ("replica_size", ctypes.c_int),
        ("replica_rank", ctypes.c_int),
        # the checksums layout
        ("checksums", ctypes.c_int),
        ("checksum_retries", ctypes.c_int),
        # the delta layout
        ("delta", ctypes.c_int),
        ("delta_max_share", ctypes.c_double),
    ]


CONFIG_MAGIC = 0x7773796E
API_VERSION = 1

# WSYNC_CONFIG_INITIALIZER of the first library layouts, for a library without wsync_config_init
# (one older than this package: a WSYNC_LIBRARY from another checkout) only.
_FALLBACK_CONFIG = dict(magic=CONFIG_MAGIC, version=API_VERSION, role=0, bootstrap=0, replica=-1,
                        num_slots=2, timeout_ms=60000, max_staleness=-1, snapshot=0, rank=-1,
                        num_trainers=0, num_rollouts=0, cuda_device=-1)


def default_config() -> Config:
    """A Config equal to the loaded library's WSYNC_CONFIG_INITIALIZER (wsync_config_init), its
    `size` that of this mirror (the fields this package knows)."""
    c = Config()
    lib = load()
    init = getattr(lib, "wsync_config_init", None)
    if init is not None:
        if init(ctypes.byref(c)) != 0:
            raise RuntimeError("wsync_config_init failed")
    else:
        for name, value in _FALLBACK_CONFIG.items():
            setattr(c, name, value)
    c.size = ctypes.sizeof(Config)
    return c


class Piece(ctypes.Structure):
    """wsync_piece_t."""

    _fields_ = [
        ("tensor", ctypes.c_char_p),
        ("ndim", ctypes.c_int),
        ("global_shape", c_int64_p),
        ("box_offset", c_int64_p),
        ("box_extent", c_int64_p),
        ("local_offset", ctypes.c_int64),
        ("local_strides", c_int64_p),
    ]


class BlockScaling(ctypes.Structure):
    """wsync_block_scaling_t."""

    _fields_ = [
        ("size", ctypes.c_size_t),
        ("format", ctypes.c_int),
        ("block_rows", ctypes.c_int64),
        ("block_cols", ctypes.c_int64),
        ("scale_tensor", ctypes.c_char_p),
    ]


class VersionStats(ctypes.Structure):
    """wsync_version_stats_t: every field, in the header's order (checked like Config). `size`
    tells the library which fields we know."""

    _fields_ = [
        ("size", ctypes.c_size_t),
        ("version", ctypes.c_uint64),
        ("bytes", ctypes.c_uint64),
        ("seconds", ctypes.c_double),
        ("replicas_ready", ctypes.c_int),
        ("replicas_skipped", ctypes.c_int),
        ("replicas_lost", ctypes.c_int),
        ("retries", ctypes.c_uint32),
        ("checksum_failures", ctypes.c_uint32),
        ("age_ms", ctypes.c_int64),
        ("newest_started", ctypes.c_uint64),
        ("lag", ctypes.c_uint64),
        # the first-version layout
        ("first_version", ctypes.c_uint64),
        ("first_version_seconds", ctypes.c_double),
        ("first_version_from_peer", ctypes.c_int),
        # the delta layout
        ("wire_bytes", ctypes.c_uint64),
        ("full_bytes", ctypes.c_uint64),
    ]


class PlanInfo(ctypes.Structure):
    """wsync_plan_info_t."""

    _fields_ = [
        ("bytes_per_version", ctypes.c_uint64),
        ("broadcast_groups", ctypes.c_int64),
        ("write_ops", ctypes.c_int64),
        ("num_replicas", ctypes.c_int),
    ]


_vp = ctypes.c_void_p
_st = ctypes.c_int
_int_p = ctypes.POINTER(ctypes.c_int)
_PROTOTYPES = {
    "wsync_status_string": (ctypes.c_char_p, [_st]),
    "wsync_last_error": (ctypes.c_char_p, [_vp]),
    "wsync_context_create": (_st, [ctypes.POINTER(Config), ctypes.POINTER(_vp)]),
    "wsync_context_destroy": (_st, [_vp]),
    "wsync_context_abort": (_st, [_vp]),
    "wsync_get_version": (_st, [_int_p, _int_p, _int_p]),
    "wsync_plan_info": (_st, [_vp, ctypes.POINTER(PlanInfo)]),
    "wsync_context_info": (_st, [_vp, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int),
                                 ctypes.POINTER(ctypes.c_int)]),
    "wsync_register_buffer": (_st, [_vp, ctypes.c_char_p, _st, _st, _vp, ctypes.c_int64,
                                    ctypes.c_int, ctypes.POINTER(Piece),
                                    ctypes.POINTER(ctypes.c_int)]),
    "wsync_commit": (_st, [_vp]),
    "wsync_set_tensor_scale": (_st, [_vp, ctypes.c_char_p, ctypes.c_float]),
    "wsync_publish": (_st, [_vp, ctypes.c_uint64, ctypes.POINTER(_vp)]),
    "wsync_publish_on_stream": (_st, [_vp, ctypes.c_uint64, _vp, ctypes.POINTER(_vp)]),
    "wsync_request_test": (_st, [_vp]),
    "wsync_request_wait": (_st, [_vp, ctypes.c_int]),
    "wsync_request_free": (_st, [_vp]),
    "wsync_newest_version": (_st, [_vp, ctypes.POINTER(ctypes.c_uint64)]),
    "wsync_wait_version": (_st, [_vp, ctypes.c_uint64, ctypes.c_int,
                                 ctypes.POINTER(ctypes.c_uint64)]),
    "wsync_acquire": (_st, [_vp, ctypes.c_uint64, ctypes.POINTER(_vp)]),
    "wsync_lease_version": (_st, [_vp, ctypes.POINTER(ctypes.c_uint64)]),
    "wsync_lease_buffer": (_st, [_vp, ctypes.c_int, ctypes.POINTER(_vp)]),
    "wsync_lease_release": (_st, [_vp]),
    "wsync_copy_flip": (_st, [_vp, ctypes.c_uint64, _vp, ctypes.POINTER(ctypes.c_uint64)]),
}
# Symbols that newer libraries have; bound when present (None otherwise).
_OPTIONAL_PROTOTYPES = {
    "wsync_request_error": (ctypes.c_char_p, [_vp]),
    "wsync_version_stats": (_st, [_vp, ctypes.POINTER(VersionStats)]),
    "wsync_request_replicas": (_st, [_vp, ctypes.c_int, ctypes.c_int, _int_p, _int_p]),
    "wsync_config_init": (_st, [ctypes.POINTER(Config)]),
    "wsync_set_block_scaling": (_st, [_vp, ctypes.c_char_p, ctypes.POINTER(BlockScaling)]),
    "wsync_version_stats_init": (_st, [ctypes.POINTER(VersionStats)]),
    "wsync_struct_layout": (_st, [ctypes.c_char_p, ctypes.c_char_p,
                                  ctypes.POINTER(ctypes.c_size_t),
                                  ctypes.POINTER(ctypes.c_size_t)]),
}

# The ctypes mirrors of the header's structs (tests/python/test_parity.py checks each one).
MIRRORS = {"wsync_config_t": Config, "wsync_version_stats_t": VersionStats,
           "wsync_plan_info_t": PlanInfo, "wsync_piece_t": Piece,
           "wsync_block_scaling_t": BlockScaling}


def candidate_paths() -> List[Path]:
    """Where the library is looked for, in order (the env var first)."""
    found: List[Path] = []
    env = os.environ.get("WSYNC_LIBRARY")
    if env:
        found.append(Path(env))
    found += [_PACKAGE_DIR / "lib" / "libwsync.so", _PACKAGE_DIR / "libwsync.so"]
    if (_REPO_DIR / "CMakeLists.txt").exists():
        found += sorted(_REPO_DIR.glob("build*/src/capi/libwsync.so"))
    return found


def find_library() -> str:
    """The path (or loader name) of libwsync.so; raises LibraryNotFoundError."""
    env = os.environ.get("WSYNC_LIBRARY")
    if env and not Path(env).is_file():
        raise LibraryNotFoundError(f"WSYNC_LIBRARY={env} is not a file")
    for path in candidate_paths():
        if path.is_file():
            return str(path)
    name = ctypes.util.find_library("wsync")
    if name:
        return name
    raise LibraryNotFoundError(
        "libwsync.so not found: install the package with pip (it builds the library), set "
        "WSYNC_LIBRARY to a built libwsync.so, or build the repository with CMake; looked in "
        + ", ".join(str(p) for p in candidate_paths()))


def find_coordinator() -> str:
    """The wsync-coordinator program: $WSYNC_COORDINATOR, the package's bin/, the CMake build
    next to the library, then PATH. Raises LibraryNotFoundError."""
    env = os.environ.get("WSYNC_COORDINATOR")
    candidates: List[Path] = [Path(env)] if env else []
    candidates.append(_PACKAGE_DIR / "bin" / "wsync-coordinator")
    try:
        lib = Path(library_path())
        candidates.append(lib.parent.parent / "coordinator" / "wsync-coordinator")  # CMake build
        candidates.append(lib.parent.parent / "bin" / "wsync-coordinator")  # wheel layout
    except LibraryNotFoundError:
        pass
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    on_path = shutil.which("wsync-coordinator")
    if on_path:
        return on_path
    raise LibraryNotFoundError("wsync-coordinator not found (set WSYNC_COORDINATOR); looked in "
                               + ", ".join(str(p) for p in candidates))


_lock = threading.Lock()
_lib: Optional[ctypes.CDLL] = None
_lib_path: Optional[str] = None


def library_path() -> str:
    """The path of the library this process loaded (loading it when needed)."""
    load()
    assert _lib_path is not None
    return _lib_path


def load() -> ctypes.CDLL:
    """Loads libwsync.so once (RTLD_GLOBAL: Open MPI's plugins resolve libmpi's symbols globally)
    and declares every prototype. Thread-safe."""
    global _lib, _lib_path
    with _lock:
        if _lib is not None:
            return _lib
        path = find_library()
        try:
            lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        except OSError as e:
            raise LibraryNotFoundError(f"cannot load {path}: {e}") from e
        for name, (restype, argtypes) in _PROTOTYPES.items():
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = restype, argtypes
        for name, (restype, argtypes) in _OPTIONAL_PROTOTYPES.items():
            fn = getattr(lib, name, None)
            if fn is not None:
                fn.restype, fn.argtypes = restype, argtypes
        _lib, _lib_path = lib, path
    _warn_on_version_skew()
    return lib


def _warn_on_version_skew() -> None:
    """Warns once when the loaded library is not the version this package was built with (a
    WSYNC_LIBRARY from another checkout): both come from CMakeLists.txt's project VERSION."""
    from ._version import __version__

    lib_version = library_version()
    if __version__ != "0+unknown" and __version__ != lib_version:
        import warnings

        warnings.warn(f"wsync package {__version__} loaded libwsync {lib_version} from "
                      f"{_lib_path}", RuntimeWarning, stacklevel=3)


def library_version() -> str:
    """The loaded library's version, ``"major.minor.patch"`` (wsync_get_version): CMakeLists.txt's
    ``project(wsync VERSION ...)``, the same source as the package's ``wsync.__version__``."""
    major, minor, patch = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    load().wsync_get_version(ctypes.byref(major), ctypes.byref(minor), ctypes.byref(patch))
    return f"{major.value}.{minor.value}.{patch.value}"


def struct_layout(type_name: str, field: Optional[str] = None) -> Optional[Tuple[int, int]]:
    """``(offset, size)`` of `field` of C struct `type_name` (the struct's ``(0, sizeof)`` when
    `field` is None) as the loaded library was compiled (wsync_struct_layout); None when the
    library does not know the field (or has no wsync_struct_layout)."""
    fn = getattr(load(), "wsync_struct_layout", None)
    if fn is None:
        return None
    offset, size = ctypes.c_size_t(), ctypes.c_size_t()
    status = fn(type_name.encode(), field.encode() if field else None, ctypes.byref(offset),
                ctypes.byref(size))
    return (offset.value, size.value) if status == 0 else None


def check_mirrors() -> List[str]:
    """Differences between the ctypes mirrors (:data:`MIRRORS`) and the loaded library's layout
    of the same structs (wsync_struct_layout): [] when they agree (or the library cannot tell)."""
    problems: List[str] = []
    for type_name, mirror in MIRRORS.items():
        whole = struct_layout(type_name)
        if whole is None:
            continue
        if whole[1] != ctypes.sizeof(mirror):
            problems.append(f"sizeof({type_name}): library {whole[1]}, Python "
                            f"{ctypes.sizeof(mirror)}")
        for field in mirror._fields_:
            name, ctype = field[0], field[1]
            lib = struct_layout(type_name, name)
            mine = (getattr(mirror, name).offset, ctypes.sizeof(ctype))
            if lib != mine:
                problems.append(f"{type_name}.{name}: library (offset, size) {lib}, Python {mine}")
    return problems


def has_symbol(name: str) -> bool:
    """Whether the loaded library exports `name` (for optional, newer functions)."""
    return getattr(load(), name, None) is not None
