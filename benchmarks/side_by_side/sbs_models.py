"""Tensor lists of the side-by-side benchmark: the same lists as wsync-sync-bench's.

`llama3_8b(scale)` is src/models/demo_policy.cc's policyTensors(llama3_8b()) (291 tensors,
8,030,261,248 parameters) with the number of layers scaled by `scale` (at least one layer); scale 1
is exactly wsync's `--model llama3-8b`. `generic(nbytes, element_bytes)` is policyShapeForBytes as
wsync-sync-bench's `--model generic --bytes N` builds it for a trainer dtype of `element_bytes`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PolicyShape:
    layers: int
    hidden: int
    ffn: int
    vocab: int
    post_attention_norm: bool = False
    untied_lm_head: bool = False


def policy_tensors(s: PolicyShape) -> list[tuple[str, tuple[int, ...]]]:
    """(name, shape) of every tensor, in wsync's order (demo_policy.cc policyTensors)."""
    kv = max(1, s.hidden // 4)  # grouped-query attention: 4 q heads per kv head
    t: list[tuple[str, tuple[int, ...]]] = [("model.embed_tokens.weight", (s.vocab, s.hidden))]
    for layer in range(s.layers):
        p = f"model.layers.{layer}."
        t.append((p + "input_layernorm.weight", (s.hidden,)))
        t.append((p + "self_attn.q_proj.weight", (s.hidden, s.hidden)))
        t.append((p + "self_attn.k_proj.weight", (kv, s.hidden)))
        t.append((p + "self_attn.v_proj.weight", (kv, s.hidden)))
        t.append((p + "self_attn.o_proj.weight", (s.hidden, s.hidden)))
        if s.post_attention_norm:
            t.append((p + "post_attention_layernorm.weight", (s.hidden,)))
        t.append((p + "mlp.gate_proj.weight", (s.ffn, s.hidden)))
        t.append((p + "mlp.up_proj.weight", (s.ffn, s.hidden)))
        t.append((p + "mlp.down_proj.weight", (s.hidden, s.ffn)))
    t.append(("model.norm.weight", (s.hidden,)))
    if s.untied_lm_head:
        t.append(("lm_head.weight", (s.vocab, s.hidden)))
    return t


def llama3_8b(scale: float = 1.0) -> list[tuple[str, tuple[int, ...]]]:
    layers = max(1, round(32 * scale))
    return policy_tensors(PolicyShape(layers, 4096, 14336, 128256, True, True))


def generic(nbytes: int, element_bytes: int = 2) -> list[tuple[str, tuple[int, ...]]]:
    """wsync-sync-bench --model generic --bytes nbytes (nbytes counts the trainer dtype)."""
    f32_bytes = nbytes if element_bytes == 4 else nbytes // element_bytes * 4
    hidden, ffn, vocab = 1024, 3072, 8192
    per_layer = (hidden * hidden * 2 + hidden * hidden // 2 + 3 * ffn * hidden + hidden) * 4
    layers = max(1, (f32_bytes - vocab * hidden * 4) // per_layer)
    return policy_tensors(PolicyShape(layers, hidden, ffn, vocab))


def numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def model_tensors(model: str, scale: float, nbytes: int, element_bytes: int):
    if model == "llama3-8b":
        return llama3_8b(scale)
    if model == "generic":
        return generic(nbytes, element_bytes)
    raise ValueError(f"unknown model {model!r} (llama3-8b | generic)")
