"""The loader probe (wsync.engines.probe) on loaders written with plain torch ops: index maps to
boxes (any local rank), value- or layout-transforming loaders reported for the load_weights
fallback, and decoder layers probed once per kind. test_vllm.py runs the same probe on vLLM's
own loaders."""
from __future__ import annotations

import torch

from wsync.engines.probe import boxes_from_indices, decode, layer_of, probe_loaders, probe_values
from test_layout import assemble


def index_map(local_shape, fill):
    """A local index map: -1 everywhere, `fill(t)` writes global linear indices into it."""
    t = torch.full(local_shape, -1, dtype=torch.int64)
    fill(t)
    return t


def test_rows_and_columns_of_a_2d_tensor():
    g = torch.arange(6 * 4).view(6, 4)
    local = index_map((5, 4), lambda t: t[1:4].copy_(g[2:5]))  # rows 2..4 at local rows 1..3
    boxes = boxes_from_indices("w", (6, 4), local)
    assert [(b.offset, b.extent, b.local_start) for b in boxes] == [((2, 0), (3, 4), (1, 0))]
    cols = index_map((6, 2), lambda t: t.copy_(g[:, 2:]))  # a row-parallel shard: columns 2..3
    (box,) = boxes_from_indices("w", (6, 4), cols)
    assert (box.offset, box.extent, box.local_start) == ((0, 2), (6, 2), (0, 0))


def test_experts_stacked_in_a_3d_local_tensor():
    w = {f"e{i}": torch.randn(4, 3) for i in range(3)}
    local = torch.full((3, 4, 3), -1, dtype=torch.int64)
    local[2] = torch.arange(12).view(4, 3)  # the global expert in local slot 2
    (box,) = boxes_from_indices("e1", (4, 3), local)
    assert (box.offset, box.extent, box.local_start, box.local_dims) == \
        ((0, 0), (4, 3), (2, 0, 0), (1, 2))
    rebuilt = assemble([box], w, (3, 4, 3))
    assert torch.equal(rebuilt[2], w["e1"]) and torch.isnan(rebuilt[:2]).all()


def test_bias_into_a_fused_vector_and_padding_zeros():
    stand_in = torch.full((10,), -1.0, dtype=torch.float64)
    stand_in[4:8] = probe_values((4,))
    stand_in[8:] = 0.0  # padding a loader zeroed
    index = decode(stand_in)
    assert index.tolist() == [-1] * 4 + [0, 1, 2, 3] + [-1] * 2
    (box,) = boxes_from_indices("b", (4,), index)
    assert (box.offset, box.extent, box.local_start) == ((0,), (4,), (4,))


def test_transforming_loaders_do_not_decode_or_are_not_boxes():
    p = probe_values((3, 4))
    for transformed in (p * 0.5, p * 2, p + 1, p - 4096, p + 0.5, -p, p.to(torch.bfloat16)
                        .to(torch.float64)):
        assert decode(transformed) is None
    assert torch.equal(decode(p), torch.arange(12).view(3, 4))
    g = torch.arange(16 * 12).view(16, 12)
    assert boxes_from_indices("w", (16, 12), g.t().contiguous()) is None  # transposed (GPT-2)
    assert boxes_from_indices("w", (16, 12), g.flip(1).contiguous()) is None  # reversed
    assert boxes_from_indices("w", (16, 12), g[:, ::2].contiguous()) is None  # strided


def test_several_pieces_in_one_row_a_tp_rank_of_a_fused_bias():
    # GPT-2's c_attn bias [q | k | v] of 12, TP rank 1 of 2: [q 2:4 | k 6:8 | v 10:12]
    local = torch.cat([torch.arange(2, 4), torch.arange(6, 8), torch.arange(10, 12)])
    boxes = boxes_from_indices("b", (12,), local)
    assert [(b.offset, b.extent, b.local_start) for b in boxes] == \
        [((2,), (2,), (0,)), ((6,), (2,), (2,)), ((10,), (2,), (4,))]
    # the same for a weight: every local row [q rows' part | k part], rows merge into 2 boxes
    w = torch.arange(8 * 6).view(8, 6)
    local = torch.cat([w[0:4, 0:3], w[4:8, 0:3]], 1)
    boxes = boxes_from_indices("w", (8, 6), local)
    assert sorted((b.offset, b.extent, b.local_start) for b in boxes) == \
        [((0, 0), (4, 3), (0, 0)), ((4, 0), (4, 3), (0, 3))]


class FusedModel:
    """Parameters like an inference engine's (fused qkv, padded vocabulary) and its loader."""

    def __init__(self, layers: int, wide_layer: int = -1) -> None:
        self.params = {"embed.weight": torch.nn.Parameter(torch.zeros(8, 4))}
        self.rows = {}
        for i in range(layers):
            rows = 6 if i == wide_layer else 4
            self.rows[i] = rows
            self.params[f"layers.{i}.qk.weight"] = torch.nn.Parameter(torch.zeros(2 * rows, 4))
            self.params[f"layers.{i}.out.weight"] = torch.nn.Parameter(torch.zeros(4, rows))
        self.calls = 0

    def hf_shapes(self):
        out = [("embed.weight", (6, 4))]
        for i, rows in self.rows.items():
            out += [(f"layers.{i}.q.weight", (rows, 4)), (f"layers.{i}.k.weight", (rows, 4)),
                    (f"layers.{i}.out.weight", (4, rows))]
        return out

    def load(self, weights):
        for name, w in weights:
            self.calls += 1
            if name == "embed.weight":
                self.params[name].data[:6].copy_(w)
                self.params[name].data[6:].zero_()  # padding, as vLLM does
                continue
            layer, template = layer_of(name)
            rows = self.rows[layer]
            if template.endswith("q.weight") or template.endswith("k.weight"):
                start = 0 if template.endswith("q.weight") else rows
                self.params[f"layers.{layer}.qk.weight"].data[start:start + rows].copy_(w)
            else:
                self.params[name].data.copy_(w)


def test_layers_are_probed_once_per_kind():
    model = FusedModel(layers=5, wide_layer=3)
    boxes, fallback = probe_loaders(model.params, model.hf_shapes(), model.load)
    probed_calls = model.calls
    full = FusedModel(layers=5, wide_layer=3)
    want, want_fallback = probe_loaders(full.params, full.hf_shapes(), full.load,
                                        dedup_layers=False)
    assert boxes == want and fallback == want_fallback == []
    assert probed_calls == 1 + 3 * 2  # the embedding, layer 0 and the wider layer 3
    assert full.calls == 1 + 3 * 5
    qk = boxes["layers.4.qk.weight"]
    assert [(b.tensor, b.local_start) for b in qk] == [("layers.4.q.weight", (0, 0)),
                                                       ("layers.4.k.weight", (4, 0))]
    assert [b.extent for b in boxes["layers.3.qk.weight"]] == [(6, 4), (6, 4)]
    assert boxes["embed.weight"][0].extent == (6, 4)  # padding rows are in no box
    for p in model.params.values():  # the parameters got their own storage back
        assert p.dtype == torch.float32 and not bool(p.any())


def test_a_loader_writing_into_another_layer_turns_the_shortcut_off():
    model = FusedModel(layers=3)
    plain_load = model.load

    def shifted(weights):  # layer i's "out" lands in layer (i + 1) % 3's parameter
        for name, w in weights:
            layer, template = layer_of(name)
            if layer is not None and template.endswith("out.weight"):
                model.calls += 1
                model.params[f"layers.{(layer + 1) % 3}.out.weight"].data.copy_(w)
            else:
                plain_load([(name, w)])

    boxes, fallback = probe_loaders(model.params, model.hf_shapes(), shifted)
    assert fallback == []
    assert [b.tensor for b in boxes["layers.0.out.weight"]] == ["layers.2.out.weight"]
    assert [b.tensor for b in boxes["layers.1.out.weight"]] == ["layers.0.out.weight"]


def test_a_transforming_loader_is_reported_and_leaves_no_partial_boxes():
    params = {"a": torch.nn.Parameter(torch.zeros(12, 16)),
              "b": torch.nn.Parameter(torch.zeros(16, 12)), "c": torch.nn.Parameter(torch.zeros(2))}

    def load(weights):
        for name, w in weights:
            if name == "w":  # copied as it is into a, transposed into b (e.g. a packed copy)
                params["a"].data.copy_(w)
                params["b"].data.copy_(w.t())
            elif name == "s":
                params["c"].data.copy_(w * 0.5)  # a scale applied by the loader

    boxes, fallback = probe_loaders(params, [("w", (12, 16)), ("s", (2,)), ("unused", (5,))],
                                    load)
    assert fallback == ["w", "s", "unused"]  # the last: no parameter took it at all
    assert boxes == {}


def test_quantized_layers_go_whole_through_load_weights():
    """A module with a quant_method other than vLLM's Unquantized* is processed by vLLM once all
    of its weights went through its loaders: every HF tensor feeding it becomes a fallback and
    none of its parameters is copy-flipped (wsync.engines.vllm imports without vLLM)."""
    from wsync.engines.vllm import quantized_modules, whole_modules_to_fallback
    from wsync.layout import whole

    class Fp8LinearMethod:  # the class name is what tells quantized from unquantized
        pass

    class UnquantizedLinearMethod:
        pass

    model = torch.nn.Module()
    model.qkv = torch.nn.Linear(4, 4)
    model.qkv.quant_method = Fp8LinearMethod()
    model.o = torch.nn.Linear(4, 4)
    model.o.quant_method = UnquantizedLinearMethod()
    assert list(quantized_modules(model)) == ["qkv"]
    boxes = {"qkv.weight": whole("q", (4, 4)) + whole("k", (4, 4)), "qkv.bias": whole("qb", (4,)),
             "o.weight": whole("o", (4, 4))}
    kept, fallback = whole_modules_to_fallback(boxes, ["x"], quantized_modules(model))
    assert list(kept) == ["o.weight"] and fallback == ["x", "k", "q", "qb"]
