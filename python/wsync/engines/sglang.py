"""SGLang adapter: wsync versions into an SGLang engine through its own
``update_weights_from_tensor`` (SGLang 0.5.23: ``Engine.update_weights_from_tensor(named_tensors,
load_format, flush_cache)`` between ``begin_weight_update()`` and ``end_weight_update()``).

Two paths:

* **Per TP rank** (the engine's TP ranks are other processes, one per GPU). Each SGLang TP rank
  has a wsync rollout rank beside it (same GPU) that holds this rank's tensors in shareable memory
  (:func:`rank_tensors`: SGLang's TP-local parameters with ``load_format="direct"``, e.g.
  :func:`wsync.models.llama_tp_layout`, or whole HF tensors with ``load_format=None``). After each
  :meth:`Rollout.flip` the rank sends :func:`serialize_rank` (SGLang's own
  ``MultiprocessingSerializer``: a CUDA IPC handle or a shared-memory handle, not the bytes) to
  the process driving the engine, which calls :func:`update_engine` with every rank's part;
  SGLang's rank r then loads only the tensors of rank r (``LocalSerializedTensor``). The ranks
  must not flip again before update_engine returned::

      tensors = rank_tensors(rollout, models.llama_tp_layout(cfg, r, tp), device=f"cuda:{r}")
      rollout.commit()
      ...
      rollout.flip()
      parts = gather_to_driver(serialize_rank(tensors))      # any channel, e.g. gather_object
      if driver: update_engine(engine, parts, load_format="direct")

* **Joining a running job** (:func:`join_rollout`): an SGLang engine started at any time makes
  each TP rank's rollout with only the coordinator's address and secret: the replica's size is
  SGLang's TP size, its rank the TP rank, its id explicit or derived from the engine's own id
  (:func:`wsync.replica_id`); its first version is copied from a running replica (peer cold
  start) and ``rollout.close()`` leaves. Everything else is as above. The tensors need no list
  from the caller: the TP layout from SGLang's ``ModelConfig`` (``models.llama_tp_layout(
  model_config.hf_config, tp_rank, tp_size)``), whole HF tensors from :func:`hf_tensors`.

* **In one process** (:func:`apply_version`): the newest version's ``(hf_name, tensor)`` views
  of ``Rollout.register_slots`` buffers straight into ``engine.update_weights_from_tensor`` (or
  an SGLang ``ModelRunner``'s weight updater, :func:`load_into_model_runner`) under one lease.
"""
from __future__ import annotations

import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import torch

from ..bootstrap import Bootstrap, replica_id
from ..errors import UnpublishableError
from ..rollout import Rollout
from ..types import VERSION_NEWEST
from . import hf_shapes as shapes_of

try:
    from sglang.srt.model_executor.model_runner_components.weight_updater import (
        LocalSerializedTensor)
    from sglang.srt.utils import MultiprocessingSerializer

    HAVE_SGLANG = True
except ImportError:  # SGLang absent: apply_version still works with any engine-like object
    LocalSerializedTensor = MultiprocessingSerializer = None  # type: ignore[assignment,misc]
    HAVE_SGLANG = False

Shapes = Mapping[str, Any]  # name -> wsync.models.LocalTensor, a tensor, or (shape, dtype)


def _require_sglang() -> None:
    if not HAVE_SGLANG:
        raise ImportError("wsync.engines.sglang needs sglang (its MultiprocessingSerializer and "
                          "LocalSerializedTensor); pip install sglang")


def join_rollout(coordinator_address: str, secret: str, tp_size: int, tp_rank: int, *,
                 replica: Optional[int] = None, engine_id: str = "", **rollout_args: Any
                 ) -> Rollout:
    """The wsync Rollout of SGLang TP rank `tp_rank` of an engine joining the running job: one
    replica of `tp_size` ranks (wsync config.replica_size / replica_rank), its id `replica` or
    :func:`wsync.replica_id` of `engine_id` (the same on every TP rank of the engine, e.g. its
    server address). Register (:func:`rank_tensors`) and commit as usual; every TP rank of the
    engine must join. `rollout_args` go to :class:`wsync.Rollout` (num_slots, timeout_ms, ...)."""
    if replica is None:
        if not engine_id:
            raise ValueError("join_rollout needs a replica id or the engine's own id")
        replica = replica_id(engine_id)
    return Rollout(Bootstrap.join(coordinator_address, secret, tp_size, tp_rank),
                   replica=replica, **rollout_args)


def hf_tensors(model: Any, dtype: torch.dtype = torch.bfloat16,
               hf_shapes: Optional[Mapping[str, Sequence[int]]] = None
               ) -> Dict[str, Tuple[Tuple[int, ...], torch.dtype]]:
    """The whole Hugging Face tensors the trainers publish, as :func:`rank_tensors`' `local`
    (``load_format=None``: SGLang's loaders split them): `hf_shapes` when given (an override),
    else derived from `model` (:mod:`wsync.engines.hf_shapes`): SGLang's ``ModelConfig`` (its
    ``hf_config`` and ``model_path``), a transformers config, or a model path / hub id."""
    if hf_shapes:
        shapes = shapes_of.resolve(hf_shapes)
    elif isinstance(model, (str, bytes)) or hasattr(model, "__fspath__"):
        shapes = shapes_of.from_model_path(model)  # type: ignore[arg-type]
    else:
        hf_config = getattr(model, "hf_config", model)  # SGLang's ModelConfig, or the config
        path = getattr(model, "model_path", None)
        shapes = shapes_of.resolve(None, hf_config,
                                   path if path and os.path.isdir(str(path)) else None)
    return {n: (s, dtype) for n, s in shapes.items()}


def rank_tensors(rollout: Rollout, local: Shapes, *, device: Union[str, torch.device] = "cpu",
                 dtype: torch.dtype = torch.bfloat16) -> Dict[str, torch.Tensor]:
    """Allocates this TP rank's tensors and registers them with `rollout` for copy flip.

    `local` maps each name to a :class:`wsync.models.LocalTensor` (shape and boxes), a tensor
    (whole, its shape and dtype) or ``(shape, dtype)`` (whole). CPU tensors are put in shared
    memory first: torch's serializer would otherwise move them there on first use, leaving wsync
    writing the old memory. CUDA tensors come from torch's allocator (CUDA IPC needs that)."""
    dev = torch.device(device)
    tensors: Dict[str, torch.Tensor] = {}
    specs: Dict[str, Any] = {}
    for name, spec in local.items():
        if hasattr(spec, "boxes"):
            shape, dt, specs[name] = tuple(spec.shape), dtype, spec.boxes
        elif isinstance(spec, torch.Tensor):
            shape, dt = tuple(spec.shape), spec.dtype
        else:
            shape, dt = tuple(spec[0]), spec[1]
        t = torch.zeros(shape, dtype=dt, device=dev)
        tensors[name] = t.share_memory_() if dev.type == "cpu" else t
    rollout.register_module(tensors, specs=specs, mode="copy_flip")
    return tensors


def serialize_rank(tensors: Mapping[str, torch.Tensor]) -> Dict[str, bytes]:
    """This rank's tensors as SGLang's MultiprocessingSerializer payloads (handles, not bytes).
    Refuses a CPU tensor outside shared memory (serializing would move it)."""
    _require_sglang()
    out = {}
    for name, t in tensors.items():
        if t.device.type == "cpu" and not t.is_shared():
            raise UnpublishableError(f"{name}: a CPU tensor outside shared memory; allocate it "
                                     "with rank_tensors (serializing would move its storage)")
        out[name] = MultiprocessingSerializer.serialize(t.detach())
    return out


def engine_named_tensors(parts: Sequence[Mapping[str, bytes]]) -> List[Tuple[str, Any]]:
    """``named_tensors`` for ``update_weights_from_tensor`` from every TP rank's
    :func:`serialize_rank` (index = SGLang TP rank): one LocalSerializedTensor per name."""
    _require_sglang()
    names = list(parts[0])
    for r, part in enumerate(parts):
        if list(part) != names:
            raise UnpublishableError(f"TP rank {r} sent tensors {sorted(part)[:4]}..., rank 0 "
                                     f"{sorted(names)[:4]}...: every rank sends the same names")
    return [(n, LocalSerializedTensor(values=[part[n] for part in parts])) for n in names]


def _check_result(result: Any, what: str) -> Any:
    """SGLang answers (success, message) or an object with .success / .message."""
    ok, message = (result[0], result[1]) if isinstance(result, tuple) else \
        (getattr(result, "success", True), getattr(result, "message", ""))
    if not ok:
        raise RuntimeError(f"SGLang {what} failed: {message}")
    return result


def _session(engine: Any, begin: bool) -> None:
    method = getattr(engine, "begin_weight_update" if begin else "end_weight_update", None)
    if method is not None:  # SGLang >= 0.5.2x needs the session; older versions have none
        _check_result(method(), method.__name__)


def update_engine(engine: Any, parts: Sequence[Mapping[str, bytes]], *,
                  load_format: Optional[str] = "direct", flush_cache: bool = True) -> Any:
    """Loads every TP rank's part into `engine` (an SGLang Engine) in one weight-update session:
    rank r loads ``parts[r]``. ``load_format="direct"``: the names are SGLang parameter names
    and each tensor is that parameter's TP-local value; None: HF names, SGLang's loaders split."""
    named = engine_named_tensors(parts)
    _session(engine, True)
    try:
        result = engine.update_weights_from_tensor(named, load_format=load_format,
                                                   flush_cache=flush_cache)
    finally:
        _session(engine, False)
    return _check_result(result, "update_weights_from_tensor")


def load_into_model_runner(model_runner: Any, named: Sequence[Tuple[str, Any]],
                           load_format: Optional[str] = None) -> None:
    """An SGLang ModelRunner's (or its WeightUpdater's) update_weights_from_tensor, in the
    process that owns the model: `named` are tensors or LocalSerializedTensor."""
    updater = getattr(model_runner, "weight_updater", model_runner)
    _check_result(updater.update_weights_from_tensor(named_tensors=list(named),
                                                     load_format=load_format),
                  "update_weights_from_tensor")


def apply_version(engine: Any, rollout: Rollout, version: int = VERSION_NEWEST,
                  flush_cache: bool = True, load_format: Optional[str] = None) -> int:
    """Loads `version` (default the newest ready) of `rollout`'s slot buffers into `engine`
    (an Engine in this process) under one wsync lease; returns the version loaded."""
    with rollout.lease(version) as lease:
        named = list(rollout.lease_tensors(lease).items())
        _session(engine, True)
        try:
            result = engine.update_weights_from_tensor(named, load_format=load_format,
                                                       flush_cache=flush_cache)
        finally:
            _session(engine, False)
        _check_result(result, "update_weights_from_tensor")
        rollout.version = lease.version
        return lease.version


def apply_newest(engine: Any, rollout: Rollout) -> Optional[int]:
    """apply_version when a version newer than the loaded one is ready; the version in use."""
    newest = rollout.newest_version()
    if newest is None or newest == rollout.version:
        return rollout.version
    return apply_version(engine, rollout, newest)
