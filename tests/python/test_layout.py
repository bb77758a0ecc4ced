"""Layout builders against plain torch slicing (the engines' and Megatron's own layouts)."""
from __future__ import annotations

import pytest
import torch

from wsync import layout
from wsync.errors import UnpublishableError


def assemble(boxes, tensors, local_shape):
    """The local tensor the boxes describe, filled from the global tensors."""
    local = torch.full(local_shape, float("nan"))
    for b in boxes:
        src = tensors[b.tensor][tuple(slice(o, o + e) for o, e in zip(b.offset, b.extent))]
        dims = b.local_dims or tuple(range(len(b.extent)))
        index = list(b.local_start)
        for i, d in enumerate(dims):
            index[d] = slice(b.local_start[d], b.local_start[d] + b.extent[i])
        local[tuple(index)] = src
    return local


@pytest.mark.parametrize("n", [0, 1, 5, 7, 8, 13])
@pytest.mark.parametrize("k", [1, 2, 3, 4, 8])
def test_chunk_range_is_torch_chunk(n, k):
    chunks = torch.arange(n).chunk(k) if n else []
    for r in range(k):
        lo, hi = layout.chunk_range(n, r, k)
        want = chunks[r].tolist() if r < len(chunks) else []
        assert list(range(lo, hi)) == want


@pytest.mark.parametrize("nh,nkv,tp", [(8, 8, 2), (8, 2, 2), (8, 2, 4), (8, 1, 4), (16, 4, 8)])
def test_fused_qkv_concat_matches_vllm_layout(nh, nkv, tp):
    hd, hidden = 4, 6
    t = {"q": torch.randn(nh * hd, hidden), "k": torch.randn(nkv * hd, hidden),
         "v": torch.randn(nkv * hd, hidden)}
    for r in range(tp):
        boxes = layout.fused_qkv("q", "k", "v", num_heads=nh, num_kv_heads=nkv, head_dim=hd,
                                 hidden=hidden, tp_rank=r, tp_size=tp)
        kv_heads = t["k"].view(nkv, hd, hidden)
        if nkv >= tp:
            k = kv_heads.chunk(tp)[r].reshape(-1, hidden)
            v = t["v"].view(nkv, hd, hidden).chunk(tp)[r].reshape(-1, hidden)
        else:  # vLLM replicates each kv head on tp / nkv ranks
            head = r // (tp // nkv)
            k, v = kv_heads[head], t["v"].view(nkv, hd, hidden)[head]
        want = torch.cat([t["q"].chunk(tp)[r], k, v])
        assert torch.equal(assemble(boxes, t, tuple(want.shape)), want)


def test_fused_qkv_grouped_matches_megatron_layout():
    nh, nkv, hd, hidden, tp = 8, 4, 2, 3, 2
    t = {"q": torch.randn(nh * hd, hidden), "k": torch.randn(nkv * hd, hidden),
         "v": torch.randn(nkv * hd, hidden)}
    # Megatron-core linear_qkv: [ng, (nq/ng + 2) * hd, hidden], query groups split over TP.
    q = t["q"].view(nkv, nh // nkv * hd, hidden)
    k = t["k"].view(nkv, hd, hidden)
    v = t["v"].view(nkv, hd, hidden)
    fused = torch.cat([q, k, v], dim=1)
    for r in range(tp):
        want = fused.chunk(tp)[r].reshape(-1, hidden)
        boxes = layout.fused_qkv("q", "k", "v", num_heads=nh, num_kv_heads=nkv, head_dim=hd,
                                 hidden=hidden, tp_rank=r, tp_size=tp, order="grouped")
        assert torch.equal(assemble(boxes, t, tuple(want.shape)), want)


def test_gate_up_row_vocab_and_experts():
    t = {"g": torch.randn(8, 3), "u": torch.randn(8, 3), "o": torch.randn(3, 8),
         "emb": torch.randn(10, 3)}
    for r in range(2):
        want = torch.cat([t["g"].chunk(2)[r], t["u"].chunk(2)[r]])
        boxes = layout.gate_up("g", "u", intermediate=8, hidden=3, tp_rank=r, tp_size=2)
        assert torch.equal(assemble(boxes, t, (8, 3)), want)
        assert torch.equal(assemble(layout.row_parallel("o", (3, 8), r, 2), t, (3, 4)),
                           t["o"].chunk(2, 1)[r])
        padded = torch.zeros(16, 3)
        padded[:10] = t["emb"]
        got = assemble(layout.vocab_parallel("emb", (10, 3), r, 2, padded_rows=16), t, (8, 3))
        real = 8 if r == 0 else 2
        assert torch.equal(got[:real], padded.chunk(2)[r][:real])
        assert torch.isnan(got[real:]).all()  # padding rows are in no box
    experts = {f"e{i}": torch.randn(2, 3) for i in range(4)}
    for r in range(2):
        boxes = layout.experts([f"e{i}" for i in range(4)], (2, 3), r, 2)
        want = torch.stack([experts[f"e{2 * r}"], experts[f"e{2 * r + 1}"]])
        assert torch.equal(assemble(boxes, experts, (2, 2, 3)), want)


def test_pieces_use_the_local_strides():
    full = torch.arange(24.).view(4, 6)
    view = full[1:3]  # rows 1..2 of a row-major [4, 6] buffer
    boxes = [layout.Box("w", (8, 6), (2, 0), (2, 6), (0, 0))]
    (piece,) = layout.pieces_for(boxes, view.stride())
    assert piece.local_strides == (6, 1) and piece.local_offset == 0
    expert_boxes = layout.experts(["a", "b"], (2, 3), 0, 1)
    pieces = layout.pieces_for(expert_boxes, torch.empty(2, 2, 3).stride())
    assert [p.local_offset for p in pieces] == [0, 6] and pieces[1].local_strides == (3, 1)
    with pytest.raises(UnpublishableError, match="innermost local stride"):
        layout.pieces_for(layout.whole("t", (3, 2)), torch.empty(2, 3).t().stride())


def test_builders_reject_what_does_not_divide():
    with pytest.raises(UnpublishableError, match="not divisible"):
        layout.column_parallel("w", (7, 4), 0, 2)
    with pytest.raises(UnpublishableError, match="kv heads"):
        layout.fused_qkv("q", "k", "v", num_heads=6, num_kv_heads=3, head_dim=2, hidden=4,
                         tp_rank=0, tp_size=2)


def test_shift_layers_maps_pipeline_stages():
    m = layout.shift_layers(12)
    assert m("model.layers.3.mlp.up_proj.weight") == "model.layers.15.mlp.up_proj.weight"
    assert m("model.norm.weight") == "model.norm.weight"


def test_hugging_face_names_from_wrapped_modules_and_a_user_mapping():
    """Wrapper segments (torch.compile, DDP, FSDP1, activation checkpointing) are stripped; a dict
    maps the names that differ and keeps the others; a callable returning None drops a tensor;
    a tied weight is registered once."""
    from wsync import _torch

    inner = torch.nn.Module()
    inner.embed = torch.nn.Embedding(5, 3)
    inner.head = torch.nn.Linear(3, 5, bias=False)
    inner.head.weight = inner.embed.weight  # tied
    inner.norm = torch.nn.LayerNorm(3)
    outer = torch.nn.Module()
    outer._orig_mod = torch.nn.Module()
    outer._orig_mod.module = inner  # torch.compile around DDP
    names = [e.name for e in _torch.entries_of(outer, None, {"embed.weight": "model.embed_tokens"
                                                             ".weight"})]
    assert names == ["model.embed_tokens.weight", "norm.weight", "norm.bias"]
    dropped = _torch.entries_of(outer, None, lambda n: None if n.endswith("bias") else "m." + n)
    assert [e.name for e in dropped] == ["m.embed.weight", "m.norm.weight"]
    assert _torch.strip_wrappers("_fsdp_wrapped_module.layers.0._checkpoint_wrapped_module.w") \
        == "layers.0.w"


def test_the_package_never_gathers():
    """No call in python/wsync gathers a tensor (full_tensor, all_gather, gather_object,
    redistribute, dist.gather): every rank registers the memory it holds."""
    import ast
    from pathlib import Path

    import wsync

    banned = {"full_tensor", "all_gather", "all_gather_object", "all_gather_into_tensor",
              "gather_object", "redistribute", "broadcast_object_list"}
    calls = []
    for path in Path(wsync.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                owner = node.func.value
                if node.func.attr in banned or (node.func.attr == "gather" and isinstance(
                        owner, ast.Name) and owner.id in ("dist", "distributed")):
                    calls.append(f"{path.name}:{node.lineno} {node.func.attr}")
    assert calls == []
    assert len(list(Path(wsync.__file__).parent.rglob("*.py"))) >= 15  # the scan saw the package
