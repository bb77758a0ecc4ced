"""Worker processes of test_megatron.py: trainers holding a Megatron-core-style model (TP 2 x PP 2,
experts split by EP rank) registered with explicit specs, and rollouts that check every version
they see against the Hugging Face checkpoint the trainers' shards make up.

    python megatron_jobs.py megatron trainer|rollout_hf|rollout_moe '<json args>'

The global model is a small Qwen2-MoE-like decoder (grouped-query attention, a shared expert and 4
routed experts per layer, padded vocabulary), HF names. Trainer rank r is pipeline stage r // 2
(global layer = stage) and TP / EP rank r % 2. Its local tensors are built from the HF tensors with
plain torch ops in Megatron-core's layouts (independent of wsync.layout):
  linear_qkv          per query group [its q heads | k head | v head], groups split over TP
  linear_proj / fc2   row parallel (input dim split)
  shared linear_fc1   [gate rows of this rank | up rows of this rank]
  experts fc1 / fc2   the EP rank's experts stacked: [E/ep, 2*I, H] and [E/ep, H, I]
  word_embeddings / output_layer   vocabulary padded to 64 rows and split over TP
The module's local layer 0 is global layer `stage` (wsync.layout.shift_layers as the name map).
Every version adds 1.0 to every local element, so version v of the HF checkpoint is the initial
one plus v (the same float operations on both sides: bit-equal).
rollout_hf: whole HF tensors in wsync slots (named_tensors). rollout_moe: vLLM's fused MoE
layout of all experts ([E, 2*I, H] w13 and [E, H, I] w2 per layer, copy flip).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Dict

import torch

import wsync
from wsync import layout
from job_main import run

V, V_PADDED, H, NH, NKV, HD, I_SHARED, I_EXPERT, E, LAYERS, TP = 50, 64, 16, 8, 4, 2, 24, 8, 4, 2, 2


def hf_state(version: int) -> Dict[str, torch.Tensor]:
    """The HF checkpoint at `version` (version 0: seeded random)."""
    g = torch.Generator().manual_seed(5)
    shapes = {"model.embed_tokens.weight": (V, H), "model.norm.weight": (H,),
              "lm_head.weight": (V, H)}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        shapes.update({p + "input_layernorm.weight": (H,),
                       p + "post_attention_layernorm.weight": (H,),
                       p + "self_attn.q_proj.weight": (NH * HD, H),
                       p + "self_attn.k_proj.weight": (NKV * HD, H),
                       p + "self_attn.v_proj.weight": (NKV * HD, H),
                       p + "self_attn.o_proj.weight": (H, NH * HD)})
        for proj, shape in (("gate", (I_SHARED, H)), ("up", (I_SHARED, H)),
                            ("down", (H, I_SHARED))):
            shapes[p + f"mlp.shared_expert.{proj}_proj.weight"] = shape
        for e in range(E):
            for proj, shape in (("gate", (I_EXPERT, H)), ("up", (I_EXPERT, H)),
                                ("down", (H, I_EXPERT))):
                shapes[p + f"mlp.experts.{e}.{proj}_proj.weight"] = shape
    state = {n: torch.randn(s, generator=g) for n, s in shapes.items()}
    for _ in range(version):
        for t in state.values():
            t.add_(1.0)
    return state


def megatron_local(state: Dict[str, torch.Tensor], stage: int, t: int) -> Dict[str, torch.Tensor]:
    """This rank's Megatron-core local tensors (module names, local layer 0), by torch slicing."""
    out: Dict[str, torch.Tensor] = {}
    p, d = f"model.layers.{stage}.", "decoder.layers.0."
    q = state[p + "self_attn.q_proj.weight"].view(NKV, NH // NKV * HD, H)
    k = state[p + "self_attn.k_proj.weight"].view(NKV, HD, H)
    v = state[p + "self_attn.v_proj.weight"].view(NKV, HD, H)
    out[d + "self_attention.linear_qkv.weight"] = torch.cat([q, k, v], 1).chunk(TP)[t] \
        .reshape(-1, H)
    out[d + "self_attention.linear_proj.weight"] = state[p + "self_attn.o_proj.weight"] \
        .chunk(TP, 1)[t]
    out[d + "input_layernorm.weight"] = state[p + "input_layernorm.weight"]
    out[d + "pre_mlp_layernorm.weight"] = state[p + "post_attention_layernorm.weight"]
    s = p + "mlp.shared_expert."
    out[d + "mlp.shared_experts.linear_fc1.weight"] = torch.cat(
        [state[s + "gate_proj.weight"].chunk(TP)[t], state[s + "up_proj.weight"].chunk(TP)[t]])
    out[d + "mlp.shared_experts.linear_fc2.weight"] = state[s + "down_proj.weight"].chunk(TP, 1)[t]
    mine = range(t * E // TP, (t + 1) * E // TP)  # EP rank t's experts
    out[d + "mlp.experts.linear_fc1.weight"] = torch.stack([torch.cat(
        [state[p + f"mlp.experts.{e}.gate_proj.weight"],
         state[p + f"mlp.experts.{e}.up_proj.weight"]]) for e in mine])
    out[d + "mlp.experts.linear_fc2.weight"] = torch.stack(
        [state[p + f"mlp.experts.{e}.down_proj.weight"] for e in mine])
    vocab_names = {0: ("embedding.word_embeddings.weight", "model.embed_tokens.weight"),
                   LAYERS - 1: ("output_layer.weight", "lm_head.weight")}
    if stage in vocab_names:
        local_name, hf = vocab_names[stage]
        padded = torch.zeros(V_PADDED, H)
        padded[:V] = state[hf]
        out[local_name] = padded.chunk(TP)[t].clone()
    if stage == LAYERS - 1:
        out["decoder.final_layernorm.weight"] = state["model.norm.weight"]
    return {n: x.clone().contiguous() for n, x in out.items()}


def megatron_specs(stage: int, t: int) -> Dict[str, list]:
    """The boxes of each local tensor in the HF tensors, with wsync.layout's Megatron builders,
    keyed by the name after the pipeline-stage name map."""
    p, d = f"model.layers.{stage}.", f"decoder.layers.{stage}."
    a, s = p + "self_attn.", p + "mlp.shared_expert."
    specs = {
        d + "self_attention.linear_qkv.weight": layout.fused_qkv(
            a + "q_proj.weight", a + "k_proj.weight", a + "v_proj.weight", num_heads=NH,
            num_kv_heads=NKV, head_dim=HD, hidden=H, tp_rank=t, tp_size=TP, order="grouped"),
        d + "self_attention.linear_proj.weight": layout.row_parallel(
            a + "o_proj.weight", (H, NH * HD), t, TP),
        d + "input_layernorm.weight": layout.whole(p + "input_layernorm.weight", (H,)),
        d + "pre_mlp_layernorm.weight": layout.whole(p + "post_attention_layernorm.weight", (H,)),
        d + "mlp.shared_experts.linear_fc1.weight": layout.gate_up(
            s + "gate_proj.weight", s + "up_proj.weight", intermediate=I_SHARED, hidden=H,
            tp_rank=t, tp_size=TP),
        d + "mlp.shared_experts.linear_fc2.weight": layout.row_parallel(
            s + "down_proj.weight", (H, I_SHARED), t, TP),
        d + "mlp.experts.linear_fc1.weight": layout.experts(
            [p + f"mlp.experts.{e}." for e in range(E)], (2 * I_EXPERT, H), t, TP,
            inner=lambda name, shape: layout.gate_up(name + "gate_proj.weight",
                                                     name + "up_proj.weight",
                                                     intermediate=I_EXPERT, hidden=H,
                                                     tp_rank=0, tp_size=1)),
        d + "mlp.experts.linear_fc2.weight": layout.experts(
            [p + f"mlp.experts.{e}.down_proj.weight" for e in range(E)], (H, I_EXPERT), t, TP),
    }
    if stage == 0:
        specs["embedding.word_embeddings.weight"] = layout.vocab_parallel(
            "model.embed_tokens.weight", (V, H), t, TP, padded_rows=V_PADDED)
    if stage == LAYERS - 1:
        specs["output_layer.weight"] = layout.vocab_parallel("lm_head.weight", (V, H), t, TP,
                                                             padded_rows=V_PADDED)
        specs["decoder.final_layernorm.weight"] = layout.whole("model.norm.weight", (H,))
    return specs


def trainer(a: dict) -> None:
    stage, t = divmod(a["rank"], TP)
    params = {n: torch.nn.Parameter(x) for n, x in megatron_local(hf_state(0), stage, t).items()}
    tr = wsync.Trainer(wsync.Bootstrap.explicit(a["rank"], a["trainers"], a["rollouts"],
                                                a["address"], a["secret"]), timeout_ms=300000)
    # One call with Megatron's parameter names; specs say where each lands in the HF tensors.
    names = tr.register_module(params, specs=megatron_specs(stage, t),
                               name_map=layout.shift_layers(stage))
    tr.commit()
    for version in range(1, a["versions"] + 1):
        with torch.no_grad():
            for prm in params.values():
                prm.add_(1.0)
        tr.publish(version, wait=True)
    Path(a["out"], f"trainer{a['rank']}.json").write_text(json.dumps(
        {"names": names, "pieces": sum(len(e.boxes) for e in tr.entries)}))
    tr.close()


def _follow(rollout: "wsync.Rollout", a: dict, check) -> list:
    """Checks the newest version whenever a newer one is ready (check returns the version it
    checked), until the last one."""
    seen: list = []
    while not seen or seen[-1] < a["versions"]:
        rollout.wait_for_version(seen[-1] if seen else 0, timeout_ms=120000)
        seen.append(check())
    return seen


def rollout_hf(a: dict) -> None:
    state0 = hf_state(0)
    r = wsync.Rollout(wsync.Bootstrap.explicit(a["rank"], a["trainers"], a["rollouts"],
                                               a["address"], a["secret"]), replica=0,
                      timeout_ms=300000)
    r.register_slots({n: (tuple(x.shape), torch.float32) for n, x in state0.items()})
    r.commit()

    def check() -> int:
        got = {n: x.clone() for n, x in r.named_tensors()}  # the newest ready version
        v = r.last_named_version
        want = hf_state(v)
        assert got.keys() == want.keys()
        for n in want:
            assert torch.equal(got[n], want[n]), f"version {v}: {n} differs"
        return v

    seen = _follow(r, a, check)
    Path(a["out"], "rollout_hf.json").write_text(json.dumps({"seen": seen,
                                                             "tensors": len(state0)}))
    r.close()


def rollout_moe(a: dict) -> None:
    """vLLM's FusedMoE layout: w13 [E, 2*I, H] (gate rows then up rows per expert), w2 [E, H, I],
    all experts on this one rank (EP 1), copy flip into these tensors."""
    tensors, specs = {}, {}
    for i in range(LAYERS):
        p = f"model.layers.{i}.mlp.experts."
        w13, w2 = p + "w13_weight", p + "w2_weight"
        tensors[w13] = torch.zeros(E, 2 * I_EXPERT, H)
        tensors[w2] = torch.zeros(E, H, I_EXPERT)
        specs[w13] = layout.experts([f"{p}{e}." for e in range(E)], (2 * I_EXPERT, H), 0, 1,
                                    inner=lambda name, shape: layout.gate_up(
                                        name + "gate_proj.weight", name + "up_proj.weight",
                                        intermediate=I_EXPERT, hidden=H, tp_rank=0, tp_size=1))
        specs[w2] = layout.experts([f"{p}{e}.down_proj.weight" for e in range(E)], (H, I_EXPERT),
                                   0, 1)
    r = wsync.Rollout(wsync.Bootstrap.explicit(a["rank"], a["trainers"], a["rollouts"],
                                               a["address"], a["secret"]), replica=1,
                      timeout_ms=300000)
    r.register_module(tensors, specs=specs, mode="copy_flip")
    r.commit()

    def check() -> int:
        v = r.flip()
        want = hf_state(v)
        for i in range(LAYERS):
            p = f"model.layers.{i}.mlp.experts."
            w13 = torch.stack([torch.cat([want[f"{p}{e}.gate_proj.weight"],
                                          want[f"{p}{e}.up_proj.weight"]]) for e in range(E)])
            w2 = torch.stack([want[f"{p}{e}.down_proj.weight"] for e in range(E)])
            assert torch.equal(tensors[p + "w13_weight"], w13), f"version {v}: layer {i} w13"
            assert torch.equal(tensors[p + "w2_weight"], w2), f"version {v}: layer {i} w2"
        return v

    seen = _follow(r, a, check)
    Path(a["out"], "rollout_moe.json").write_text(json.dumps({"seen": seen}))
    r.close()


SCENARIOS = {("megatron", "trainer"): trainer, ("megatron", "rollout_hf"): rollout_hf,
             ("megatron", "rollout_moe"): rollout_moe}


if __name__ == "__main__":
    run(lambda: SCENARIOS[(sys.argv[1], sys.argv[2])](json.loads(sys.argv[3])))
