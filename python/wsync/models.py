"""Layouts of common Hugging Face architectures in an inference engine's tensor-parallel form.

:func:`llama_tp_layout` describes a Llama / Qwen2 / Mistral-style decoder as vLLM's TP ranks hold
it: fused ``qkv_proj`` (grouped-query heads) and ``gate_up_proj`` (column parallel), ``o_proj`` and
``down_proj`` row parallel, vocabulary-parallel embedding and LM head padded to a multiple of
`vocab_pad`, norms replicated. Each entry gives the local tensor's shape and its boxes in the HF
tensors, ready for ``Rollout.register_module(..., specs=...)`` or ``register_slots``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Tuple

from . import layout
from .layout import Box


@dataclass
class LocalTensor:
    """A TP rank's local tensor: its shape and where its elements come from."""

    shape: Tuple[int, ...]
    boxes: List[Box]


def _pad(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def llama_tp_layout(config: Any, tp_rank: int, tp_size: int, *, vocab_pad: int = 64,
                    prefix: str = "model.") -> Dict[str, LocalTensor]:
    """The vLLM-style local tensors of TP rank `tp_rank` for a transformers Llama/Qwen2 config
    (hidden_size, num_attention_heads, num_key_value_heads, head_dim, intermediate_size,
    num_hidden_layers, vocab_size; Qwen2's q/k/v biases when ``attention_bias`` or model_type
    qwen2). Keys are vLLM's parameter names."""
    h = int(config.hidden_size)
    nh = int(config.num_attention_heads)
    nkv = int(getattr(config, "num_key_value_heads", None) or nh)
    hd = int(getattr(config, "head_dim", None) or h // nh)
    inter = int(config.intermediate_size)
    vocab = int(config.vocab_size)
    qkv_bias = bool(getattr(config, "attention_bias", False)) or \
        getattr(config, "model_type", "") == "qwen2"
    kv_local = max(1, nkv // tp_size)
    qkv_rows = (nh // tp_size + 2 * kv_local) * hd
    padded = _pad(vocab, vocab_pad * tp_size) if vocab_pad else vocab
    out: Dict[str, LocalTensor] = {}

    def vocab_entry(local: str, hf: str) -> None:
        out[local] = LocalTensor((padded // tp_size, h),
                                 layout.vocab_parallel(hf, (vocab, h), tp_rank, tp_size, padded))

    vocab_entry(f"{prefix}embed_tokens.weight", f"{prefix}embed_tokens.weight")
    for i in range(int(config.num_hidden_layers)):
        p = f"{prefix}layers.{i}."
        a = p + "self_attn."
        out[a + "qkv_proj.weight"] = LocalTensor((qkv_rows, h), layout.fused_qkv(
            a + "q_proj.weight", a + "k_proj.weight", a + "v_proj.weight", num_heads=nh,
            num_kv_heads=nkv, head_dim=hd, hidden=h, tp_rank=tp_rank, tp_size=tp_size))
        if qkv_bias:
            out[a + "qkv_proj.bias"] = LocalTensor((qkv_rows,), layout.fused_qkv(
                a + "q_proj.bias", a + "k_proj.bias", a + "v_proj.bias", num_heads=nh,
                num_kv_heads=nkv, head_dim=hd, hidden=None, tp_rank=tp_rank, tp_size=tp_size))
        out[a + "o_proj.weight"] = LocalTensor(
            (h, nh * hd // tp_size),
            layout.row_parallel(a + "o_proj.weight", (h, nh * hd), tp_rank, tp_size))
        m = p + "mlp."
        out[m + "gate_up_proj.weight"] = LocalTensor((2 * inter // tp_size, h), layout.gate_up(
            m + "gate_proj.weight", m + "up_proj.weight", intermediate=inter, hidden=h,
            tp_rank=tp_rank, tp_size=tp_size))
        out[m + "down_proj.weight"] = LocalTensor(
            (h, inter // tp_size),
            layout.row_parallel(m + "down_proj.weight", (h, inter), tp_rank, tp_size))
        for norm in ("input_layernorm.weight", "post_attention_layernorm.weight"):
            out[p + norm] = LocalTensor((h,), layout.whole(p + norm, (h,)))
    out[f"{prefix}norm.weight"] = LocalTensor((h,), layout.whole(f"{prefix}norm.weight", (h,)))
    if not getattr(config, "tie_word_embeddings", False):
        vocab_entry("lm_head.weight", "lm_head.weight")
    return out


def specs_of(local: Dict[str, LocalTensor]) -> Dict[str, List[Box]]:
    """The `specs=` argument for register_module / register_slots."""
    return {name: t.boxes for name, t in local.items()}
