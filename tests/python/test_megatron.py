"""Megatron-core-style trainers (TP 2 x PP 2, grouped-query fused linear_qkv, gate_up linear_fc1,
row-parallel linear_proj / linear_fc2, padded vocabulary-parallel embeddings, routed experts
stacked by EP rank) register their local tensors with one call and explicit wsync.layout specs;
a rollout holding whole Hugging Face tensors and one holding vLLM's fused MoE layout must get
every version they see bit for bit (megatron_jobs.py builds the trainers' local tensors with
plain torch slicing, and the rollouts check against the HF checkpoint)."""
from __future__ import annotations

import json

import wsync
from conftest import HERE

MEGATRON_JOBS = HERE / "megatron_jobs.py"


def test_megatron_tp_pp_ep_trainers_reach_hf_and_fused_moe_rollouts(job, tmp_path):
    versions = 3
    with wsync.Coordinator(trainers=4, rollouts=2, timeout_ms=300000, quiet=False) as c:
        base = {"address": c.address, "secret": c.secret, "trainers": 4, "rollouts": 2,
                "versions": versions}
        for r in range(4):
            job.start("megatron", "trainer", dict(base, rank=r), name=f"trainer{r}",
                      script=MEGATRON_JOBS)
        job.start("megatron", "rollout_hf", dict(base, rank=0), name="rollout_hf",
                  script=MEGATRON_JOBS)
        job.start("megatron", "rollout_moe", dict(base, rank=1), name="rollout_moe",
                  script=MEGATRON_JOBS)
        job.wait(timeout_s=400, coordinator=c)
    hf = json.loads((tmp_path / "rollout_hf.json").read_text())
    moe = json.loads((tmp_path / "rollout_moe.json").read_text())
    assert hf["seen"][-1] == versions and moe["seen"][-1] == versions
    assert hf["tensors"] == 3 + 2 * (9 + 3 * 4)  # every HF tensor arrived
    for r in range(4):
        info = json.loads((tmp_path / f"trainer{r}.json").read_text())
        stage = r // 2
        # the pipeline stage's local layer 0 is published as global layer `stage`
        assert f"decoder.layers.{stage}.self_attention.linear_qkv.weight" in info["names"]
        assert ("embedding.word_embeddings.weight" in info["names"]) == (stage == 0)
        assert ("output_layer.weight" in info["names"]) == (stage == 1)
