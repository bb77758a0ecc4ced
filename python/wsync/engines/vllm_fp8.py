"""vLLM layers that hold block-fp8 weights: received in place, or whole as fp8 (issue 21).

A vLLM linear layer quantized by ``Fp8LinearMethod`` with a ``weight_block_size`` (an
fp8-serialized checkpoint: DeepSeek-V3, Kimi-K2, Qwen3-FP8) holds a float8_e4m3fn ``weight``
[N, K] and a float32 ``weight_scale_inv`` [ceil(N / bn), ceil(K / bk)] per TP rank. When the
layer's GEMM kernel keeps both in the checkpoint's layout after loading, wsync writes them in
place: each HF weight (``...q_proj.weight``) is declared block-scaled (``set_block_scaling``)
with its scale tensor ``...q_proj.weight_scale_inv``, the live fp8 weight and scale parameters
are copy-flip targets, and the trainers keep publishing bf16 / fp32 (they quantize in flight,
bit-equal to vLLM's ``per_block_cast_to_fp8``). No ``load_weights`` fallback, no layerwise reload.

Which layers (:func:`layout_kept`): Fp8LinearMethod with block_quant, fp8 weights and float32
scales (not e8m0 ones), whose kernel's ``process_weights_after_loading`` leaves them as loaded:
the base ``Fp8BlockScaledMMLinearKernel`` step (CUTLASS, Triton, FlashInfer, torch block kernels
on e4m3fn platforms without ROCm padding), or vLLM's CPU block kernels on a layer marked
``_cpu_skip_gemm_dispatch`` (they then skip their VNNI repack).

The others (:attr:`BlockFp8Plan.reloaded`): DeepGEMM (scales re-laid for TMA, e8m0-packed on
Blackwell), Marlin, AITER, the CPU kernels' VNNI repack, and MoE experts (Fp8MoEMethod; several of
its kernels re-lay them, so experts are never written in place here). Their fp8 weights are
received whole, still quantized in flight by the trainers (:class:`ReloadedFp8Weight`: a float8
slot per HF weight, fused ``[E, rows, cols]`` experts included, and a float32 slot for its
``<name>_scale_inv``), and given with their scales to vLLM's loaders inside its layerwise reload,
which re-runs the layer's processing as when it loads an fp8 checkpoint. Every TP rank receives
the whole tensors. (Giving such layers the trainers' bf16 tensors would cast them into float8
parameters and leave the scales stale: what wsync did before.) A block-fp8 layer that gets neither
(e8m0 scale parameters, no published HF weight its loaders take) is refused when the receiver is
built (:meth:`BlockFp8Plan.check`: UnsupportedError naming the layers).

Where (:func:`plan`): the boxes come from the layer's own geometry, as vLLM's loaders place the
checkpoint's tensors: column-parallel rows ``tp_rank`` (q / k / v of QKVParallelLinear by heads,
k / v by ``tp_rank // num_kv_head_replicas``; the parts of a merged layer one after another, as
``packed_modules_mapping`` names them), row-parallel columns, replicated whole; each scale box
is its weight box divided by the block (vLLM's ``adjust_block_scale_shard``). A layer whose HF
tensors the trainers do not publish under those names, or whose shards cut blocks, keeps the
fallback (:attr:`BlockFp8Plan.skipped` says why).

Scale format: FLOAT32 (``per_block_cast_to_fp8``), POW2_FLOAT32 where vLLM holds power-of-two
scales (the checkpoint's ``quantization_config.scale_fmt == "ue8m0"``, or DeepGEMM's E8M0 in use).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch

from ..layout import Box
from ..types import ScaleFormat


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class BlockFp8Weight:
    """One HF weight received as block fp8 into a layer's live parameters."""

    hf_name: str  # e.g. model.layers.0.self_attn.q_proj.weight
    scale_name: str  # e.g. model.layers.0.self_attn.q_proj.weight_scale_inv
    block: Tuple[int, int]
    format: ScaleFormat
    weight_param: str  # e.g. model.layers.0.self_attn.qkv_proj.weight
    scale_param: str  # e.g. model.layers.0.self_attn.qkv_proj.weight_scale_inv
    weight_box: Box
    scale_box: Box


@dataclass(frozen=True)
class ReloadedFp8Weight:
    """One HF weight of a block-fp8 layer that vLLM re-lays after loading: received whole into a
    float8 slot with its scales in a float32 slot, both passed to the engine's loader."""

    hf_name: str  # e.g. model.layers.0.mlp.down_proj.weight, or a fused [E, N, K] experts tensor
    scale_name: str  # hf_name + "_scale_inv", the name fp8 checkpoints give the scales
    block: Tuple[int, int]
    format: ScaleFormat
    shape: Tuple[int, ...]  # the HF tensor's; blocks tile its last two dims

    @property
    def scale_shape(self) -> Tuple[int, ...]:
        return self.shape[:-2] + (_cdiv(self.shape[-2], self.block[0]),
                                  _cdiv(self.shape[-1], self.block[1]))


@dataclass
class BlockFp8Plan:
    """The block-fp8 layers of a model received in place, and those whose fp8 weights go whole
    through the engine's loaders (`reloaded`)."""

    modules: Dict[str, torch.nn.Module] = field(default_factory=dict)
    weights: List[BlockFp8Weight] = field(default_factory=list)
    skipped: Dict[str, str] = field(default_factory=dict)  # module name -> why not in place
    reloaded: List[ReloadedFp8Weight] = field(default_factory=list)
    # module name -> why wsync cannot give it fp8 weights (check() raises naming them)
    unsupported: Dict[str, str] = field(default_factory=dict)

    def check(self) -> None:
        """Raises UnsupportedError naming every block-fp8 layer that would get no correct
        weights: the trainers' bf16 tensors cast into its float8 parameters, its scales stale."""
        if self.unsupported:
            from ..errors import UnsupportedError
            from ..types import Status

            layers = "; ".join(f"{n}: {why}" for n, why in sorted(self.unsupported.items()))
            raise UnsupportedError(int(Status.ERR_UNSUPPORTED), "WSYNC_ERR_UNSUPPORTED",
                                   f"block-fp8 layers wsync cannot fill: {layers}", "vllm_fp8")

    def keep_out(self, reloaded: Dict[str, torch.nn.Module]) -> Dict[str, torch.nn.Module]:
        """`reloaded` (the fallback's modules) without the layers received in place."""
        return {n: m for n, m in reloaded.items() if n not in self.modules}

    def adopt(self, boxes: Dict[str, List[Box]], fallback: List[str]
              ) -> Tuple[Dict[str, List[Box]], List[str]]:
        """The copy-flip boxes with the fp8 weights and scales (replacing whatever the probe
        found for those parameters), the fallback without their HF weights."""
        out = {n: bs for n, bs in boxes.items()
               if n not in {w.weight_param for w in self.weights}
               | {w.scale_param for w in self.weights}}
        for w in self.weights:
            out.setdefault(w.weight_param, []).append(w.weight_box)
            out.setdefault(w.scale_param, []).append(w.scale_box)
        mine = {w.hf_name for w in self.weights}
        kept = [n for n in fallback if n not in mine]
        whole = {w.hf_name: w.scale_name for w in self.reloaded}
        return out, kept + [whole[n] for n in kept if n in whole]

    def declare(self, rollout: Any) -> None:
        """set_block_scaling for every weight (before commit)."""
        for w in self.weights:
            rollout.set_block_scaling(w.hf_name, w.scale_name, format=w.format, block=w.block)
        for r in self.reloaded:
            rollout.set_block_scaling(r.hf_name, r.scale_name, format=r.format, block=r.block)

    def slot_specs(self, names: Sequence[str], shapes: Dict[str, Tuple[int, ...]],
                   dtype: torch.dtype) -> Dict[str, Tuple[Tuple[int, ...], torch.dtype]]:
        """(shape, dtype) of the fallback slots `names`: float8 / float32 for the reloaded fp8
        weights and their scales, `dtype` (the trainers') for the rest."""
        out = {n: (tuple(shapes[n]), dtype) for n in names if n in shapes}
        for r in self.reloaded:
            if r.hf_name in out:
                out[r.hf_name] = (r.shape, torch.float8_e4m3fn)
                out[r.scale_name] = (r.scale_shape, torch.float32)
        return {n: out[n] for n in names}


@functools.lru_cache(maxsize=None)
def _fp8_linear_classes() -> Optional[Tuple[Any, Any]]:
    """(Fp8LinearMethod, Fp8BlockScaledMMLinearKernel), None where this vLLM has no such
    classes (or its fp8 modules do not import here)."""
    try:
        from vllm.model_executor.kernels.linear.scaled_mm.BlockScaledMMLinearKernel import \
            Fp8BlockScaledMMLinearKernel
        from vllm.model_executor.layers.quantization.fp8 import Fp8LinearMethod
    except Exception:  # ImportError, or a build whose kernels fail to load
        return None
    return Fp8LinearMethod, Fp8BlockScaledMMLinearKernel


def _moe_method() -> Optional[Any]:
    """vLLM's Fp8MoEMethod (None where it does not import)."""
    try:
        from vllm.model_executor.layers.quantization.fp8 import Fp8MoEMethod
    except Exception:
        return None
    return Fp8MoEMethod


def fp8_weight_params(module: torch.nn.Module) -> List[str]:
    """The float8 weight parameters of a block-fp8 layer of vLLM (linear: ``weight``; fused
    experts: ``w13_weight``, ``w2_weight``), [] for any other module."""
    qm = getattr(module, "quant_method", None)
    if not getattr(qm, "block_quant", False):
        return []
    classes, moe = _fp8_linear_classes(), _moe_method()
    if classes is not None and isinstance(qm, classes[0]):
        names = ["weight"]
    elif moe is not None and isinstance(qm, moe):
        names = ["w13_weight", "w2_weight"]
    else:
        return []
    return [n for n in names if getattr(getattr(module, n, None), "dtype", None)
            == torch.float8_e4m3fn]


def _float32_scales(module: torch.nn.Module) -> bool:
    """Whether every scale parameter of a block-fp8 layer is float32 (``weight_scale_inv``,
    ``w13_`` / ``w2_`` + the experts' scale name)."""
    suffix = getattr(module.quant_method, "weight_scale_name", "weight_scale_inv")
    names = ["weight_scale_inv"] if fp8_weight_params(module) == ["weight"] else \
        [f"w13_{suffix}", f"w2_{suffix}"]
    return all(getattr(getattr(module, n, None), "dtype", None) == torch.float32 for n in names)


def layout_kept(module: torch.nn.Module) -> Optional[str]:
    """None when `module` is a block-fp8 linear layer whose live weight and scale are in the
    checkpoint's layout (in-place target), else why not ("" for a layer that is not block fp8)."""
    classes = _fp8_linear_classes()
    if classes is None:
        return ""
    fp8_method, block_kernel = classes
    qm = getattr(module, "quant_method", None)
    if not isinstance(qm, fp8_method) or not getattr(qm, "block_quant", False):
        return ""
    weight = getattr(module, "weight", None)
    scale = getattr(module, "weight_scale_inv", None)
    if weight is None or weight.dtype != torch.float8_e4m3fn or weight.dim() != 2:
        return f"weight is {None if weight is None else weight.dtype}, not 2-D float8_e4m3fn"
    if scale is None or scale.dtype != torch.float32:
        return f"weight_scale_inv is {None if scale is None else scale.dtype}, not float32"
    if getattr(qm, "use_marlin", False):
        return "Marlin repacks the weight"
    kernel = getattr(qm, "fp8_linear", None)
    name = type(kernel).__name__
    if getattr(module, "_cpu_skip_gemm_dispatch", False) and name.startswith("CPUFp8"):
        return None  # vLLM's CPU block kernels keep [N, K] and the float32 scales as loaded
    if not isinstance(kernel, block_kernel) or \
            type(kernel).process_weights_after_loading is not \
            block_kernel.process_weights_after_loading:
        return f"{name} re-lays the weight or its scales after loading"
    from vllm.platforms import current_platform

    if current_platform.is_fp8_fnuz():
        return "e4m3fnuz platform: weights renormalized after loading"
    if current_platform.is_rocm():
        import vllm.envs as envs

        if getattr(envs, "VLLM_ROCM_FP8_PADDING", False):
            return "VLLM_ROCM_FP8_PADDING pads the weight"
    return None


def scale_format(device: Union[torch.device, str, None] = None) -> ScaleFormat:
    """POW2_FLOAT32 where vLLM holds power-of-two float32 scales (checkpoint scale_fmt ue8m0, or
    DeepGEMM E8M0 in use); else FLOAT32_GPU when the model's weights are on a CUDA `device` (vLLM's
    quantizer computes ``amax / 448`` there, which torch on CUDA rounds as ``amax * fl(1 / 448)``),
    else FLOAT32 (the CPU's exact division). Reads the current vLLM config."""
    try:
        from vllm.config import get_current_vllm_config

        hf = get_current_vllm_config().model_config.hf_config
        qc = getattr(hf, "quantization_config", None) or {}
        if isinstance(qc, dict) and qc.get("scale_fmt") == "ue8m0":
            return ScaleFormat.POW2_FLOAT32
    except Exception:  # no vLLM config around this model: the default
        pass
    try:
        from vllm.utils.deep_gemm import is_deep_gemm_e8m0_used

        if is_deep_gemm_e8m0_used():
            return ScaleFormat.POW2_FLOAT32
    except Exception:
        pass
    if device is not None and torch.device(device).type == "cuda":
        return ScaleFormat.FLOAT32_GPU
    return ScaleFormat.FLOAT32


# (HF weight suffix of the part, rows of the part on this rank, first global row, local row)
_Part = Tuple[str, int, int, int]


def _row_parts(module: torch.nn.Module, leaf: str, packed: Dict[str, List[str]]
               ) -> Optional[List[_Part]]:
    """The output-dim parts of a column-parallel layer (None: not column-parallel)."""
    from vllm.model_executor.layers.linear import (ColumnParallelLinear,
                                                   MergedColumnParallelLinear,
                                                   QKVParallelLinear)

    rank = int(getattr(module, "tp_rank", 0))
    if isinstance(module, QKVParallelLinear):
        names = packed.get(leaf, ["q_proj", "k_proj", "v_proj"])
        q = module.num_heads * module.head_size
        k = module.num_kv_heads * module.head_size
        v = module.num_kv_heads * module.v_head_size
        kv_rank = rank // module.num_kv_head_replicas
        return [(names[0], q, rank * q, 0), (names[1], k, kv_rank * k, q),
                (names[2], v, kv_rank * v, q + k)]
    if isinstance(module, MergedColumnParallelLinear):
        names = packed.get(leaf, [])
        sizes = [int(s) // module.tp_size for s in module.output_sizes]
        if len(names) != len(sizes):
            return []
        starts = [sum(sizes[:i]) for i in range(len(sizes))]
        return [(n, s, rank * s, l0) for n, s, l0 in zip(names, sizes, starts)]
    if isinstance(module, ColumnParallelLinear):
        n = int(module.output_size_per_partition)
        return [("", n, rank * n, 0)]
    return None


def _module_weights(model_name: str, module: torch.nn.Module, packed: Dict[str, List[str]],
                    hf_shapes: Dict[str, Tuple[int, ...]], fmt: ScaleFormat
                    ) -> Tuple[List[BlockFp8Weight], str]:
    """The BlockFp8Weights of one in-place layer, or ([], why not)."""
    from vllm.model_executor.layers.linear import ReplicatedLinear, RowParallelLinear

    bn, bk = (int(b) for b in module.weight_block_size)
    rows, cols = (int(s) for s in module.weight.shape)
    parent, _, leaf = model_name.rpartition(".")
    parts = _row_parts(module, leaf, packed)
    col0, global_cols = 0, cols
    if parts is None:  # row-parallel (input dim cut) or replicated: one part, all rows
        if isinstance(module, RowParallelLinear):
            col0 = int(getattr(module, "tp_rank", 0)) * cols
            global_cols = cols * int(getattr(module, "tp_size", 1))
        elif not isinstance(module, ReplicatedLinear):
            return [], f"{type(module).__name__}: unknown layout"
        parts = [("", rows, 0, 0)]
    if not parts or sum(p[1] for p in parts) != rows:
        return [], "its fused parts do not add up to the weight's rows"
    if tuple(module.weight_scale_inv.shape) != (_cdiv(rows, bn), _cdiv(cols, bk)):
        return [], f"weight_scale_inv {tuple(module.weight_scale_inv.shape)} is not per block"
    out = []
    for suffix, n, g0, l0 in parts:
        base = f"{parent}.{suffix}" if suffix else model_name
        hf, scale = base + ".weight", base + ".weight_scale_inv"
        shape = hf_shapes.get(hf)
        if shape is None or len(shape) != 2:
            return [], f"the trainers publish no 2-D {hf}"
        g_rows, g_cols = int(shape[0]), int(shape[1])
        if g0 + n > g_rows or g_cols != global_cols:
            return [], f"{hf} {tuple(shape)} does not hold this rank's [{n}, {cols}] part"
        if g0 % bn or l0 % bn or col0 % bk or (n % bn and g0 + n != g_rows):
            return [], f"this rank's part of {hf} cuts {bn}x{bk} blocks"
        weight_box = Box(hf, (g_rows, g_cols), (g0, col0), (n, cols), (l0, 0))
        s_rows = _cdiv(g0 + n, bn) - g0 // bn
        scale_box = Box(scale, (_cdiv(g_rows, bn), _cdiv(g_cols, bk)), (g0 // bn, col0 // bk),
                        (s_rows, _cdiv(cols, bk)), (l0 // bn, 0))
        out.append(BlockFp8Weight(hf, scale, (bn, bk), fmt, model_name + ".weight",
                                  model_name + ".weight_scale_inv", weight_box, scale_box))
    return out, ""


def _reloaded_names(name: str, module: torch.nn.Module, packed: Dict[str, List[str]],
                    boxes: Dict[str, List[Box]]) -> List[str]:
    """The HF weights feeding the float8 parameters of block-fp8 layer `name`: a linear layer's
    by its geometry (q / k / v, gate / up as ``packed_modules_mapping`` names them), the experts'
    by the boxes vLLM's loaders gave when probed."""
    if fp8_weight_params(module) == ["weight"]:
        parent, _, leaf = name.rpartition(".")
        parts = _row_parts(module, leaf, packed) or [("", 0, 0, 0)]
        return [f"{parent}.{p[0]}.weight" if p[0] else name + ".weight" for p in parts]
    out: List[str] = []
    for p in fp8_weight_params(module):
        out += [b.tensor for b in boxes.get(f"{name}.{p}", []) if b.tensor not in out]
    return out


def plan(model: torch.nn.Module, hf_shapes: Sequence[Tuple[str, Sequence[int]]],
         fmt: Optional[ScaleFormat] = None,
         boxes: Optional[Dict[str, List[Box]]] = None) -> BlockFp8Plan:
    """The block-fp8 layers of `model` received in place, given the HF tensors the trainers
    publish (`hf_shapes`: (name, shape) pairs), and the fp8 weights of the others, received whole
    (`boxes`: the probed loaders' boxes, which name the experts' tensors); `fmt` None:
    :func:`scale_format` for the device of the model's parameters."""
    try:
        from vllm.model_executor.utils import get_packed_modules_mapping
    except ImportError:  # no vLLM here: no vLLM layers either
        return BlockFp8Plan()
    shapes = {n: tuple(int(s) for s in shape) for n, shape in hf_shapes}
    packed = get_packed_modules_mapping(model)
    out = BlockFp8Plan()
    if fmt is None:
        first = next(model.parameters(), None)
        fmt = scale_format(first.device if first is not None else None)
    for name, module in model.named_modules():
        if not fp8_weight_params(module):
            continue  # not a block-fp8 layer
        why = layout_kept(module) if fp8_weight_params(module) == ["weight"] else \
            f"{type(module.quant_method).__name__}: experts go whole through vLLM's loaders " \
            "(several of its MoE kernels re-lay them)"
        weights: List[BlockFp8Weight] = []
        if why is None:
            weights, why = _module_weights(name, module, packed, shapes, fmt)
        if weights:
            out.modules[name] = module
            out.weights += weights
            continue
        out.skipped[name] = why or "no weights"
        if not _float32_scales(module):
            out.unsupported[name] = "its scales are not float32 (e8m0 scale parameters)"
            continue
        block = tuple(int(b) for b in module.weight_block_size)
        names = [hf for hf in _reloaded_names(name, module, packed, boxes or {})
                 if len(shapes.get(hf, ())) >= 2]
        if not names:
            out.unsupported[name] = "the trainers publish no HF weight that its loaders take"
        for hf in names:
            if hf not in {r.hf_name for r in out.reloaded}:
                out.reloaded.append(ReloadedFp8Weight(hf, hf + "_scale_inv", (block[0], block[1]),
                                                      fmt, shapes[hf]))
    return out
