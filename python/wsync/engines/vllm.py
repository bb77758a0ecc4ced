"""A vLLM weight-transfer backend: ``WeightTransferConfig(backend="wsync")``.

Registered through vLLM's plugin entry point (``vllm.general_plugins``: wsync =
wsync.engines.vllm:register, declared in pyproject.toml), so that vLLM's own
``init_weight_transfer_engine`` / ``start_weight_update`` / ``update_weights`` /
``finish_weight_update`` calls drive it:

  * init_transfer_engine(init_info): learns where every Hugging Face tensor's slice lands in this
    TP rank's parameters by running vLLM's own weight loaders once on probe tensors
    (:mod:`wsync.engines.probe`: fused qkv_proj / gate_up_proj, vocab padding, experts), registers
    those boxes with wsync against the live parameters (copy flip), and commits.
  * update_weights({"version": v}): waits until version v (default: anything newer than the live
    one) is ready on this replica and copy-flips it into the parameters in place (CUDA graphs stay
    valid). Tensors whose loaders transform values or layout (GPT-2's transposed Conv1D weights)
    and every tensor of a layer vLLM processed after loading (quantized, or repacked by its CPU
    backend) are received as full HF tensors in wsync slots and passed to ``model.load_weights``
    under the same lease. Block-fp8 layers (:mod:`wsync.engines.vllm_fp8`) get their float8
    weights and scales, quantized in flight: in place where vLLM keeps the checkpoint's layout,
    else whole through ``load_weights`` (fused MoE experts, re-laid linear weights).
  * start/finish_weight_update: vLLM's layerwise reload around the processed layers (nothing for
    the copy-flipped ones).
Each TP rank receives only its own bytes of the copy-flipped tensors, directly from the trainers;
the fallback tensors arrive whole.

Membership. Init info with only ``coordinator_address`` and ``secret`` makes the engine a replica
that joins the running job (docs/engines.md): its size is the engine's own
TP x PP world (from vLLM), its id ``replica`` or, when absent, :func:`wsync.replica_id` of the
engine's ``instance_id``; its first version is copied from a running replica that holds one
(peer cold start), and on shutdown it leaves (wsync_context_destroy). Init info with
``num_rollouts`` (and ``rollout_rank_base``) keeps fixed membership: the job's rollout ranks are
counted up front.

Speculative decoding: WsyncWorkerExtension registers the draft (EAGLE / MTP / draft-model)
model's parameters too, from the worker's ``model_runner.get_draft_model()`` (``draft_hf_shapes``
in the init info, or derived from vLLM's draft model config: the draft's tensors, published by the
trainers under ``draft_prefix`` + their names), in the same wsync context: target and draft flip to
the same version together.

Tensor names and shapes: ``hf_shapes`` / ``draft_hf_shapes`` in the init info override; without
them they come from vLLM's own model config (:mod:`wsync.engines.hf_shapes`: the transformers model
of ``model_config.hf_config`` on the meta device, else the checkpoint's safetensors headers).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import torch

from ..bootstrap import Bootstrap, replica_id
from ..errors import UnsupportedError, WsyncError
from ..layout import Box
from ..rollout import Rollout
from ..types import VERSION_NEWEST, Status
from . import hf_shapes as shapes_of
from .probe import probe_loaders
from .vllm_fp8 import fp8_weight_params
from .vllm_fp8 import plan as block_fp8_plan

try:  # vLLM is optional: the classes below exist only where it imports
    from vllm.distributed.weight_transfer.base import (WeightTransferEngine,
                                                       WeightTransferInitInfo,
                                                       WeightTransferUpdateInfo)
    HAVE_VLLM = True
except Exception:  # ImportError, or a CUDA build failing to load its ops
    HAVE_VLLM = False
    WeightTransferEngine = object  # type: ignore[assignment,misc]

    @dataclass
    class WeightTransferInitInfo:  # type: ignore[no-redef]
        """(vLLM not importable here.)"""

    @dataclass
    class WeightTransferUpdateInfo:  # type: ignore[no-redef]
        """(vLLM not importable here.)"""


def register() -> None:
    """vLLM plugin entry point: registers the "wsync" backend with vLLM's factory (idempotent)."""
    from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory

    if "wsync" not in WeightTransferEngineFactory._registry:
        WeightTransferEngineFactory.register_engine("wsync", "wsync.engines.vllm",
                                                    "WsyncWeightTransferEngine")


@dataclass
class WsyncInitInfo(WeightTransferInitInfo):
    """How this worker joins the wsync job (explicit bootstrap; see wsync.Coordinator).

    coordinator_address, secret: the job's wsync-coordinator and its shared secret (all a
    joining engine needs).
    hf_shapes: {hf_name: shape} of the tensors the trainers publish. Empty (default): derived
    from vLLM's model config (wsync.engines.hf_shapes: the transformers model of its hf_config,
    else the checkpoint's headers); given: overrides (e.g. trainers whose transformers version
    names tensors otherwise).
    replica: this engine's replica id (None: 0 with fixed membership; when joining,
    wsync.replica_id of vLLM's instance_id).
    num_rollouts: None (default): the engine joins the running job as one replica of TP x PP
    ranks (config.replica_size / replica_rank from vLLM's own parallel state). Set: fixed
    membership, the job's rollout rank count; this replica's ranks are rollout_rank_base + its
    TP rank, and num_trainers the job's trainer count.
    num_slots, timeout_ms: None: the library's defaults.
    draft_hf_shapes, draft_prefix: the speculative-decoding draft model's tensors (names as its
    load_weights takes them), published by the trainers as draft_prefix + name
    (WsyncWorkerExtension). Empty: derived from vLLM's draft model config like hf_shapes.
    sync_draft: None (default): the draft's weights are received when the engine has a draft
    model whose tensors are given or derivable (else it keeps its own, with a warning); True:
    the same, and underivable tensors raise; False: never (trainers that do not publish the
    draft, e.g. a frozen draft model: it keeps its own weights)."""

    coordinator_address: str = ""
    secret: str = ""
    hf_shapes: Dict[str, List[int]] = field(default_factory=dict)
    replica: Optional[int] = None
    num_trainers: Optional[int] = None
    num_rollouts: Optional[int] = None
    rollout_rank_base: int = 0
    num_slots: Optional[int] = None
    timeout_ms: Optional[int] = None
    draft_hf_shapes: Dict[str, List[int]] = field(default_factory=dict)
    draft_prefix: str = "draft."
    sync_draft: Optional[bool] = None

    @property
    def joins(self) -> bool:
        """Whether the engine joins the running job (no job-wide rollout count given)."""
        return self.num_rollouts is None


@dataclass
class WsyncUpdateInfo(WeightTransferUpdateInfo):
    """version: the version to apply (None: the next one newer than the live one)."""

    version: Optional[int] = None
    timeout_ms: int = -1


def tp_rank() -> int:
    """This worker's tensor-parallel rank (0 without an initialized vLLM TP group)."""
    try:
        from vllm.distributed import get_tensor_model_parallel_rank

        return int(get_tensor_model_parallel_rank())
    except Exception:
        return 0


def replica_place() -> Tuple[int, int]:
    """(ranks of this engine's replica, this worker's index in it): vLLM's TP x PP world, rank
    pp_rank * tp_size + tp_rank ((1, 0) where vLLM's parallel groups are not initialized)."""
    try:
        from vllm.distributed import (get_pp_group, get_tensor_model_parallel_rank,
                                      get_tensor_model_parallel_world_size)
    except ImportError:
        return 1, 0
    try:
        tp, rank = int(get_tensor_model_parallel_world_size()), \
            int(get_tensor_model_parallel_rank())
    except Exception:  # vLLM's groups not initialized (no engine around this model)
        return 1, 0
    try:
        pp_group = get_pp_group()
        pp, pp_rank = int(pp_group.world_size), int(pp_group.rank_in_group)
    except Exception:
        pp, pp_rank = 1, 0
    return tp * pp, pp_rank * tp + rank


def bootstrap_for(info: WsyncInitInfo, engine_id: str = "") -> Tuple[Bootstrap, int]:
    """The wsync bootstrap and replica id of this worker: joining (info.num_rollouts None) or
    fixed membership."""
    if info.joins:
        size, rank = replica_place()
        replica = info.replica if info.replica is not None else \
            replica_id(engine_id or info.coordinator_address)
        return Bootstrap.join(info.coordinator_address, info.secret, size, rank), replica
    assert info.num_rollouts is not None
    return Bootstrap.explicit(info.rollout_rank_base + tp_rank(),
                              info.num_trainers if info.num_trainers is not None else 1,
                              info.num_rollouts, info.coordinator_address, info.secret), \
        info.replica if info.replica is not None else 0


def draft_shapes_for(info: WsyncInitInfo, draft: Optional[torch.nn.Module], model_config: Any,
                     draft_model_config: Any) -> Dict[str, Tuple[int, ...]]:
    """The draft's tensors to receive ({} : none). sync_draft False: none; True: given or derived,
    else ShapesUnknownError; None (default): given or derived, else none, with a warning (the
    draft keeps its own weights: speculative decoding stays correct, only acceptance drops)."""
    if draft is None or info.sync_draft is False:
        return {}
    # The draft's own checkpoint only where it is not the target's (MTP layers live in the
    # target's checkpoint: its headers would name every target tensor).
    own_dir = local_dir(draft_model_config) != local_dir(model_config)
    try:
        return resolve_shapes(info.draft_hf_shapes, draft_model_config, "draft_hf_shapes",
                              checkpoint=own_dir)
    except shapes_of.ShapesUnknownError as e:
        if info.sync_draft:
            raise
        import warnings

        warnings.warn(f"{e}; the draft model is not updated (sync_draft=False silences this)")
        return {}


def local_dir(model_config: Any) -> Optional[str]:
    """vLLM's model path of `model_config` when it is a local directory (not a hub id)."""
    import os

    path = getattr(model_config, "model", None)
    return str(path) if path and os.path.isdir(str(path)) else None


def resolve_shapes(given: Dict[str, List[int]], model_config: Any, what: str,
                   checkpoint: bool = True) -> Dict[str, Tuple[int, ...]]:
    """`given` (the init info's override) or the shapes vLLM's `model_config` tells
    (wsync.engines.hf_shapes.resolve; the checkpoint's headers only when `checkpoint`)."""
    return shapes_of.resolve(given, getattr(model_config, "hf_config", None),
                             local_dir(model_config) if checkpoint else None, what=what)


def quantized_modules(model: torch.nn.Module) -> Dict[str, torch.nn.Module]:
    """Modules whose quant_method is not vLLM's Unquantized* (their loaders feed a processing
    step, e.g. online fp8 quantization, that vLLM's layerwise reload runs)."""
    return {name: m for name, m in model.named_modules()
            if getattr(m, "quant_method", None) is not None
            and not type(m.quant_method).__name__.startswith("Unquantized")}


def processed_modules(model: torch.nn.Module) -> Dict[str, torch.nn.Module]:
    """Modules whose live tensors are not what their loaders write, so that copy flips into them
    would not reach the computation: quantized ones, those vLLM's CPU backend repacked for its
    GEMM kernels (``cpu_linear``), and those whose parameters differ in shape or dtype from the
    checkpoint-format metadata vLLM recorded when it built the model."""
    out = quantized_modules(model)
    try:
        from vllm.model_executor.model_loader.reload.layerwise import LAYERWISE_INFO
    except ImportError:
        LAYERWISE_INFO = {}
    for name, m in model.named_modules():
        if getattr(m, "cpu_linear", None) is not None:
            out[name] = m
            continue
        info = LAYERWISE_INFO.get(m)
        recorded = info.restore_metadata[0] if info is not None else {}
        live = {n: p for n, p in m._parameters.items() if p is not None}
        if any(n not in live or tuple(live[n].shape) != tuple(meta.shape)
               or live[n].dtype != meta.dtype for n, meta in recorded.items()):
            out[name] = m
    return out


def whole_modules_to_fallback(boxes: Dict[str, List[Box]], fallback: List[str],
                              modules: Dict[str, torch.nn.Module]
                              ) -> Tuple[Dict[str, List[Box]], List[str]]:
    """Moves every HF tensor feeding a parameter of `modules` to the fallback (vLLM processes a
    quantized layer once all of its weights went through its loaders: none may be copy-flipped
    beside them), and drops those parameters from the copy-flip boxes."""
    owned = {f"{prefix}.{p}" if prefix else p
             for prefix, m in modules.items() for p, _ in m.named_parameters(recurse=False)}
    moved = {b.tensor for name in owned for b in boxes.get(name, [])}
    kept = {n: bs for n, bs in boxes.items() if n not in owned}
    return kept, fallback + [n for n in sorted(moved) if n not in fallback]


class WsyncReceiver:
    """The engine-independent part: probe the loaders, register, flip. `load_weights` is the
    engine's loader (vLLM: model.load_weights); `dtype` that of the trainers' tensors.
    `model_config` / `draft_model_config`: vLLM's ModelConfig of the target / the draft, which
    tell the tensors' names and shapes when the init info does not (hf_shapes /
    draft_hf_shapes)."""

    def __init__(self, model: torch.nn.Module, load_weights: Any, info: WsyncInitInfo,
                 rank: Optional[int] = None, dtype: Optional[torch.dtype] = None,
                 engine_id: str = "", draft: Optional[torch.nn.Module] = None,
                 model_config: Any = None, draft_model_config: Any = None) -> None:
        self.model = model
        self.hf_shapes = resolve_shapes(info.hf_shapes, model_config, "hf_shapes")
        shapes: List[Tuple[str, Tuple[int, ...]]] = list(self.hf_shapes.items())
        params = dict(model.named_parameters())
        self.boxes, self.fallback = probe_loaders(params, shapes, load_weights)
        # Modules whose weights only vLLM's processing can apply: all of their tensors go
        # through load_weights inside vLLM's layerwise reload (start / finish_weight_update).
        # Block-fp8 layers in the checkpoint's layout: fp8 weights + scales in place (vllm_fp8).
        self.block_fp8 = block_fp8_plan(model, shapes, boxes=self.boxes)
        self.block_fp8.check()  # no block-fp8 layer left to a bf16 fallback
        self.reloaded = self.block_fp8.keep_out(processed_modules(model))
        if self.reloaded:
            self.boxes, self.fallback = whole_modules_to_fallback(self.boxes, self.fallback,
                                                                  self.reloaded)
        self.boxes, self.fallback = self.block_fp8.adopt(self.boxes, self.fallback)
        self.load_weights = load_weights
        draft_shapes = draft_shapes_for(info, draft, model_config, draft_model_config)
        if draft is not None and draft_shapes:
            refuse_block_fp8_draft(draft)  # before joining the job
        bootstrap, self.replica = bootstrap_for(info, engine_id)
        device = next(iter(params.values())).device
        self.rollout = Rollout(bootstrap, replica=self.replica, num_slots=info.num_slots,
                               timeout_ms=info.timeout_ms,
                               cuda_device=device.index if device.type == "cuda" else None)
        live = {n: params[n] for n in self.boxes}
        self.rollout.register_module(live, specs=self.boxes, mode="copy_flip")
        self.block_fp8.declare(self.rollout)
        if self.fallback:  # full HF tensors in slots, applied through the engine's loader
            self.rollout.register_slots(
                self.block_fp8.slot_specs(self.fallback, self.hf_shapes,
                                          dtype or params_dtype(params)), device=device)
        self.draft: Optional[DraftPart] = None
        if draft is not None and draft_shapes:
            self.draft = DraftPart(draft, info, draft_shapes, self.rollout, dtype, params,
                                   draft_model_config or model_config)
        try:
            self.rollout.commit()
        except WsyncError as e:
            if self.draft is not None and "no trainer declares" in str(e):
                raise type(e)(e.status, e.status_name, e.message + " (the draft model's tensors: "
                              "trainers that do not publish them: init info sync_draft=False)",
                              e.call) from e
            raise

    def receive(self, version: Optional[int], timeout_ms: int = -1) -> int:
        """Waits for `version` (None: one newer than the live one), copy-flips it, applies the
        fallback tensors; returns the version now live."""
        if version is None:
            target = self.rollout.wait_for_version(timeout_ms=timeout_ms)
        else:
            target = int(version)
            while (self.rollout.newest_version() or 0) < target:
                self.rollout.wait_for_version(after=target - 1, timeout_ms=timeout_ms)
        wanted = target if version is not None else VERSION_NEWEST
        draft_fallback = self.draft.fallback if self.draft is not None else []
        if not self.fallback and not draft_fallback:
            flipped = self.rollout.flip(wanted)
            return int(flipped if flipped is not None else target)
        # One lease over both steps: the fallback tensors come from the version just flipped.
        with self.rollout.lease(wanted) as lease:
            self.rollout.flip(lease.version)
            if self.fallback:
                self.load_weights(list(self.rollout.lease_tensors(lease, names=self.fallback)
                                       .items()))
            if self.draft is not None and draft_fallback:
                self.draft.load(self.rollout.lease_tensors(lease, names=draft_fallback))
            return lease.version

    def first_version(self) -> Optional[Any]:
        """This rank's wsync.VersionStats once a version is ready (first_version,
        first_version_seconds, first_version_from_peer: whether a running replica filled it)."""
        return self.rollout.version_stats()

    def start_reload(self) -> None:
        """Puts the processed layers (quantized, or repacked by vLLM's CPU backend; loaded whole
        through load_weights) into vLLM's layerwise reload, as vLLM's NCCL backend does for the
        whole model: their loaders buffer the checkpoint tensors and vLLM re-runs the layer's
        processing once all of them arrived (finish_reload). Nothing for copy-flipped weights.
        Call under the worker's vLLM config (set_current_vllm_config)."""
        reloaded = list(self.reloaded.values())
        reloaded += list(self.draft.reloaded.values()) if self.draft is not None else []
        if reloaded:
            from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

            for module in reloaded:
                initialize_layerwise_reload(module)

    def finish_reload(self, model_config: Any) -> None:
        """Finalizes the layerwise reload that start_reload began (vLLM's processing of the
        processed layers); `model_config` is vLLM's ModelConfig of this model."""
        from_draft = self.draft is not None and bool(self.draft.reloaded)
        if self.reloaded or from_draft:
            from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

            if self.reloaded:
                finalize_layerwise_reload(self.model, model_config)
            if from_draft:
                assert self.draft is not None
                finalize_layerwise_reload(self.draft.model, self.draft.model_config)

    def close(self) -> None:
        """Leaves the wsync job."""
        self.rollout.close()


class DraftPart:
    """The speculative-decoding draft model's parameters, registered in the target's wsync
    context (one version for both): its loaders probed like the target's, its tensors named
    draft_prefix + the draft's own HF names. Parameters the draft shares with the target (tied
    embeddings / lm_head of EAGLE heads) are the target's memory already and are skipped.
    Layers vLLM processed after loading (quantized, or repacked by its CPU backend) are loaded
    whole through the draft's load_weights inside vLLM's layerwise reload, as the target's. A
    draft with block-fp8 layers is refused (UnsupportedError): the trainers' bf16 would be cast
    into its float8 parameters."""

    def __init__(self, draft: torch.nn.Module, info: WsyncInitInfo,
                 hf_shapes: Dict[str, Tuple[int, ...]], rollout: Rollout,
                 dtype: Optional[torch.dtype], target_params: Dict[str, torch.nn.Parameter],
                 model_config: Any = None) -> None:
        self.prefix = info.draft_prefix
        self.model, self.model_config = draft, model_config
        self.load_weights = draft.load_weights
        # Shared: the same memory as a target parameter (empty repacked tensors share nothing).
        shared = {p.data_ptr() for p in target_params.values() if p.numel() > 0}
        params = {n: p for n, p in draft.named_parameters()
                  if p.numel() == 0 or p.data_ptr() not in shared}
        self.hf_shapes = hf_shapes
        shapes = list(hf_shapes.items())
        boxes, fallback = probe_loaders(params, shapes, draft.load_weights)
        self.reloaded = processed_modules(draft)
        if self.reloaded:
            boxes, fallback = whole_modules_to_fallback(boxes, fallback, self.reloaded)
        renamed = {self.prefix + n: [dataclasses.replace(b, tensor=self.prefix + b.tensor)
                                     for b in bs] for n, bs in boxes.items()}
        live = {self.prefix + n: params[n] for n in boxes}
        rollout.register_module(live, specs=renamed, mode="copy_flip")
        self.fallback = [self.prefix + n for n in fallback]
        if self.fallback:
            device = next(iter(params.values())).device
            rollout.register_slots({self.prefix + n: (dict(shapes)[n],
                                                      dtype or params_dtype(params))
                                    for n in fallback}, device=device)

    def load(self, tensors: Dict[str, torch.Tensor]) -> None:
        """The draft's fallback tensors (leased views) through the draft's load_weights."""
        self.load_weights([(n[len(self.prefix):], t) for n, t in tensors.items()])


def refuse_block_fp8_draft(draft: torch.nn.Module) -> None:
    """UnsupportedError naming the draft's block-fp8 layers, if it has any: its loaders would cast
    the trainers' bf16 into their float8 parameters and leave the scales stale."""
    fp8 = sorted(n for n, m in draft.named_modules() if fp8_weight_params(m))
    if fp8:
        raise UnsupportedError(int(Status.ERR_UNSUPPORTED), "WSYNC_ERR_UNSUPPORTED",
                               f"the draft model's block-fp8 layers ({', '.join(fp8[:4])}"
                               f"{', ...' if len(fp8) > 4 else ''}) are not received by wsync "
                               "yet; init info sync_draft=False keeps its own weights",
                               "wsync_init")


def params_dtype(params: Dict[str, torch.nn.Parameter]) -> torch.dtype:
    """The dtype of the model's first floating-point parameter."""
    for p in params.values():
        if p.is_floating_point():
            return p.dtype
    return torch.float32


def engine_id(vllm_config: Any) -> str:
    """vLLM's id of this engine instance (VllmConfig.instance_id, the same on all its workers)."""
    return str(getattr(vllm_config, "instance_id", "") or "")


class WsyncWeightTransferEngine(WeightTransferEngine):  # type: ignore[misc,valid-type]
    """vLLM's WeightTransferEngine over wsync (see the module docstring)."""

    init_info_cls = WsyncInitInfo
    update_info_cls = WsyncUpdateInfo
    # The backend is built with the target model only (vLLM passes no draft to it): draft
    # weights are updated through WsyncWorkerExtension, which registers both in one context.
    supports_draft_weight_update = False

    receiver: Optional[WsyncReceiver] = None
    version: Optional[int] = None  # the version live in the parameters

    def init_transfer_engine(self, init_info: WsyncInitInfo) -> None:
        """Probes vLLM's loaders (under this engine's vLLM config: the Worker calls this without
        one), registers, commits with the trainers."""
        from vllm.config import set_current_vllm_config

        with set_current_vllm_config(self.vllm_config):
            self.receiver = WsyncReceiver(self.model, self.model.load_weights, init_info,
                                          dtype=getattr(self.model_config, "dtype", None),
                                          engine_id=engine_id(self.vllm_config),
                                          model_config=self.model_config)

    def start_weight_update(self) -> None:
        """Copy-flipped weights need nothing; processed layers enter vLLM's layerwise reload
        (WsyncReceiver.start_reload)."""
        if self.receiver is not None:
            self.receiver.start_reload()

    def update_weights(self, update_info: Dict[str, Any]) -> None:
        """vLLM's per-chunk call: the copy flip has completed on the device when receive returns,
        so no device-wide synchronize is needed (the base class's would fail without a GPU)."""
        self.receive_weights(self.parse_update_info(update_info))

    def receive_weights(self, update_info: WsyncUpdateInfo) -> None:
        if self.receiver is None:
            raise RuntimeError("wsync: update_weights before init_weight_transfer_engine")
        self.version = self.receiver.receive(update_info.version, update_info.timeout_ms)

    def finish_weight_update(self) -> None:
        """Finalizes the layerwise reload of processed layers (nothing else to do)."""
        if self.receiver is not None:
            self.receiver.finish_reload(self.model_config)

    def shutdown(self) -> None:
        """Leaves the wsync job (vLLM's worker calls it on shutdown): wsync_context_destroy, so
        later versions do not wait for this replica."""
        if self.receiver is not None:
            self.receiver.close()
            self.receiver = None


class WsyncWorkerExtension:
    """For vLLM versions without weight-transfer backends, or drivers that call workers directly
    (verl / OpenRLHF style): pass ``worker_extension_cls="wsync.engines.vllm.WsyncWorkerExtension"``
    to ``LLM`` (no weight_transfer_config) and call ``llm.collective_rpc("wsync_init",
    args=(init_info_dict,))`` once (the fields of WsyncInitInfo), then
    ``llm.collective_rpc("wsync_update", args=(version,))`` per version (returns the version now
    live, one entry per worker), and ``llm.collective_rpc("wsync_close")`` at the end. vLLM mixes
    this class into its Worker, so ``self`` is the worker: its ``model_runner.get_model()`` is
    the live model and ``vllm_config`` its configuration. Each call does what the backend's
    matching calls do (wsync_update: start / update / finish in one)."""

    _wsync: Optional[WsyncReceiver]  # set by wsync_init (annotation only: no Worker attribute)

    def wsync_init(self, init_info: Dict[str, Any]) -> Dict[str, Any]:
        """Joins the wsync job (as a replica joining the running job, or with fixed membership as
        rollout rank rollout_rank_base + this worker's TP rank: WsyncInitInfo), probes vLLM's
        loaders under the worker's vLLM config, registers (the draft model's parameters too when
        the engine has one and draft_hf_shapes names its tensors), commits (every worker of the
        replica must call it: collective_rpc does). Returns {"replica": id, "rank": wsync rank,
        "draft_tensors": the draft's tensors registered (0: no draft)}."""
        from vllm.config import set_current_vllm_config

        worker: Any = self
        model = worker.model_runner.get_model()
        get_draft = getattr(worker.model_runner, "get_draft_model", None)
        draft = get_draft() if callable(get_draft) else None
        spec = getattr(worker.vllm_config, "speculative_config", None)
        with set_current_vllm_config(worker.vllm_config):
            self._wsync = WsyncReceiver(model, model.load_weights, WsyncInitInfo(**init_info),
                                        dtype=worker.vllm_config.model_config.dtype,
                                        engine_id=engine_id(worker.vllm_config), draft=draft,
                                        model_config=worker.vllm_config.model_config,
                                        draft_model_config=getattr(spec, "draft_model_config",
                                                                   None))
        draft_part = self._wsync.draft
        return {"replica": self._wsync.replica, "rank": self._wsync.rollout.rank,
                "draft_tensors": len(draft_part.hf_shapes) if draft_part is not None else 0}

    def wsync_stats(self) -> Optional[Dict[str, Any]]:
        """This worker's wsync.VersionStats as a dict (None before its first version): the newest
        version, and its first one (first_version_from_peer: filled by a running replica)."""
        receiver: Optional[WsyncReceiver] = getattr(self, "_wsync", None)
        stats = receiver.first_version() if receiver is not None else None
        return dataclasses.asdict(stats) if stats is not None else None

    def wsync_update(self, version: Optional[int] = None, timeout_ms: int = -1) -> int:
        """Waits for `version` (None: one newer than the live one), copy-flips it and loads the
        processed layers' tensors through vLLM's layerwise reload; returns the version now
        live. Raises RuntimeError before wsync_init, wsync's errors on timeout / failure."""
        from vllm.config import set_current_vllm_config

        receiver: Optional[WsyncReceiver] = getattr(self, "_wsync", None)
        if receiver is None:
            raise RuntimeError("wsync: wsync_update before wsync_init")
        worker: Any = self
        with set_current_vllm_config(worker.vllm_config):
            receiver.start_reload()
            live = receiver.receive(version, timeout_ms)
            receiver.finish_reload(worker.vllm_config.model_config)
        return live

    def wsync_close(self) -> None:
        """Leaves the wsync job (idempotent)."""
        receiver: Optional[WsyncReceiver] = getattr(self, "_wsync", None)
        if receiver is not None:
            receiver.close()
            self._wsync = None
