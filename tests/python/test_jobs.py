"""Real multi-process jobs: torch trainers publish, torch rollouts receive; bytes compared."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import wsync
from conftest import JOBS, free_port, worker_env

VERSIONS = 4
JOIN_MS = 300000  # workers import torch and transformers: slow on a loaded 2-core machine


def reference_tp_local(state: dict, tp_rank: int, tp: int, nh=4, nkv=2, hd=16, vocab_pad=64):
    """vLLM's TP rank layout built with plain torch ops from a full HF state dict (independent of
    wsync.layout): q/k/v heads of this rank concatenated, gate/up likewise, o/down split on dim 1,
    vocabulary padded to a multiple of vocab_pad * tp and split."""
    out = {}
    vocab, hidden = state["model.embed_tokens.weight"].shape
    padded = -(-vocab // (vocab_pad * tp)) * vocab_pad * tp
    for name in ("model.embed_tokens.weight", "lm_head.weight"):
        full = torch.zeros(padded, hidden)
        full[:vocab] = state[name]
        out[name] = full.chunk(tp, 0)[tp_rank]
    layers = {k.split(".")[2] for k in state if k.startswith("model.layers.")}
    for i in sorted(layers):
        p = f"model.layers.{i}."
        a, m = p + "self_attn.", p + "mlp."
        q = state[a + "q_proj.weight"].chunk(tp, 0)[tp_rank]
        k = state[a + "k_proj.weight"].chunk(tp, 0)[tp_rank]  # nkv >= tp here
        v = state[a + "v_proj.weight"].chunk(tp, 0)[tp_rank]
        out[a + "qkv_proj.weight"] = torch.cat([q, k, v])
        out[a + "o_proj.weight"] = state[a + "o_proj.weight"].chunk(tp, 1)[tp_rank]
        out[m + "gate_up_proj.weight"] = torch.cat(
            [state[m + "gate_proj.weight"].chunk(tp, 0)[tp_rank],
             state[m + "up_proj.weight"].chunk(tp, 0)[tp_rank]])
        out[m + "down_proj.weight"] = state[m + "down_proj.weight"].chunk(tp, 1)[tp_rank]
        for n in ("input_layernorm.weight", "post_attention_layernorm.weight"):
            out[p + n] = state[p + n]
    out["model.norm.weight"] = state["model.norm.weight"]
    return out


def check_llama_outputs(out: Path, tp: int, with_hf: bool) -> None:
    trainer = {v: torch.load(out / f"trainer_v{v}.pt") for v in range(1, VERSIONS + 1)}
    losses = [trainer[v]["loss"] for v in range(1, VERSIONS + 1)]
    assert losses[-1] < losses[0], f"training did not train: {losses}"
    for r in range(tp):
        seen = json.loads((out / f"seen_tp{r}.json").read_text())
        assert seen[-1] == VERSIONS and seen == sorted(set(seen))
        for v in seen:
            got = torch.load(out / f"tp{r}_v{v}.pt")
            want = reference_tp_local(trainer[v]["state"], r, tp)
            vocab = trainer[v]["state"]["model.embed_tokens.weight"].shape[0]
            per = want["model.embed_tokens.weight"].shape[0]
            for name, w in want.items():
                g = got[name]
                if name in ("model.embed_tokens.weight", "lm_head.weight"):
                    real = max(0, min(per, vocab - r * per))  # padding rows are never written
                    g, w = g[:real], w[:real]
                assert torch.equal(g, w), f"tp rank {r} version {v}: {name} differs"
    if with_hf:
        seen = json.loads((out / "seen_hf.json").read_text())
        assert seen[-1] == VERSIONS
        for v in seen:
            got = torch.load(out / f"hf_v{v}.pt")
            for name, w in trainer[v]["state"].items():
                assert torch.equal(got["state"][name], w), f"hf replica version {v}: {name}"
            assert torch.equal(got["logits"], trainer[v]["logits"]), f"logits differ at v{v}"


def test_llama_explicit_bootstrap(job, tmp_path):
    """2 trainers (dim-0 shards of a training transformers Llama) -> replica 0 (TP 2, fused qkv /
    gate_up, copy flip) and replica 1 (a whole transformers model, pointer swap), all through a
    standalone wsync-coordinator."""
    with wsync.Coordinator(trainers=2, rollouts=3, timeout_ms=JOIN_MS, quiet=False) as c:
        base = {"address": c.address, "secret": c.secret, "trainers": 2, "rollouts": 3,
                "versions": VERSIONS}
        for r in range(2):
            job.start("llama", "trainer", dict(base, rank=r), name=f"trainer{r}")
        for r in range(2):
            job.start("llama", "rollout_tp", dict(base, rank=r, tp=2), name=f"tp{r}")
        job.start("llama", "rollout_hf", dict(base, rank=2), name="hf")
        job.wait(coordinator=c)
        assert c.wait(30) == 0, c.stderr
    check_llama_outputs(tmp_path, tp=2, with_hf=True)


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun not installed")
def test_llama_under_mpirun(tmp_path):
    """The same trainers and TP rollouts launched as one MPMD mpirun job (MPI bootstrap: the
    coordinator runs on a thread of world rank 0)."""
    base = {"mpi": True, "trainers": 2, "rollouts": 2, "versions": VERSIONS, "out": str(tmp_path),
            "mpi_rank_from_env": True}
    apps = []
    for role, base_rank, extra in (("trainer", 0, {}), ("rollout_tp", 2, {"tp": 2})):
        args = dict(base, mpi_rank_base=base_rank, **extra)
        apps += [":", "-np", "2", sys.executable, str(JOBS), "llama", role, json.dumps(args)]
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-x", "PYTHONPATH", "-x",
           "OMP_NUM_THREADS"] + apps[1:]
    env = worker_env()
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_btl="self,vader", OMPI_MCA_pml="ob1")
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    check_llama_outputs(tmp_path, tp=2, with_hf=False)


def test_dtensor_gloo(job, tmp_path):
    """Trainers under torch.distributed (gloo on CPU) publish DTensor parameters (uneven Shard(0)
    and Shard(1), Replicate, _StridedShard, a 3-D Shard(1)) straight from their local shards."""
    with wsync.Coordinator(trainers=2, rollouts=1, timeout_ms=JOIN_MS, quiet=False) as c:
        base = {"address": c.address, "secret": c.secret, "trainers": 2, "rollouts": 1,
                "versions": 3, "dist_port": free_port()}
        for r in range(2):
            job.start("dtensor", "trainer", dict(base, rank=r), name=f"trainer{r}")
        job.start("dtensor", "rollout", base, name="rollout")
        job.wait()
    got = torch.load(tmp_path / "rollout.pt")
    want = torch.load(tmp_path / f"trainer_v{got['version']}.pt")
    assert got["version"] >= 2
    for name, w in want.items():
        assert torch.equal(got["tensors"]["model." + name], w), name
    for r in range(2):
        info = json.loads((tmp_path / f"boxes_{r}.json").read_text())
        for name, boxes in info["torch"].items():  # contiguous shards: torch's offsets and shapes
            assert info["boxes"][name] == boxes, (r, name)
        # _StridedShard(0, split_factor=2) of 8 rows on 2 ranks: rows {2r, 2r+1} and {4+2r, ...}
        assert info["boxes"]["model.w_strided"] == [[[2 * r, 0], [2, 3]], [[4 + 2 * r, 0], [2, 3]]]


def test_gpu_proof_flow_on_host_memory(tmp_path):
    """The GPU proof's flow (2 deterministic trainers with dim-0 shards of a Qwen2, TP-2 vLLM
    layout with copy flip, logits rebuilt from both ranks' bytes) on host memory."""
    result = subprocess.run([sys.executable, str(Path(JOBS).parent / "gpu_proof.py"), "--cpu",
                             "--versions", "3", "--layers", "2", "--hidden", "128", "--out",
                             str(tmp_path)], capture_output=True, text=True, timeout=500,
                            env=worker_env())
    assert result.returncode == 0 and "RESULT: PASS" in result.stdout, \
        result.stdout[-4000:] + result.stderr[-2000:]
