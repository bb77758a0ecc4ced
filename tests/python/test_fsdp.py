"""FSDP2 (torch.distributed.fsdp.fully_shard) trainers on CPU with gloo: the model is registered
with one call from its DTensor placements and every version reaches a rollout in another layout
(vLLM's TP 2 with fused qkv / gate_up) bit for bit, compared with full_tensor() gathered by the
trainers for the test only."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import wsync
from conftest import HERE, free_port, worker_env
from test_jobs import JOIN_MS, VERSIONS, check_llama_outputs

FSDP_JOBS = HERE / "fsdp_jobs.py"


def run_fsdp_job(job, mesh: str, trainers: int) -> None:
    with wsync.Coordinator(trainers=trainers, rollouts=2, timeout_ms=JOIN_MS, quiet=False) as c:
        base = {"address": c.address, "secret": c.secret, "trainers": trainers, "rollouts": 2,
                "versions": VERSIONS, "dist_port": free_port(), "mesh": mesh}
        for r in range(trainers):
            job.start("fsdp", "trainer", dict(base, rank=r), name=f"trainer{r}", script=FSDP_JOBS)
        for r in range(2):
            job.start("fsdp", "rollout_tp", dict(base, rank=r, tp=2), name=f"tp{r}",
                      script=FSDP_JOBS)
        job.wait(timeout_s=550, coordinator=c)


def test_fsdp2_shards_reach_a_tp_rollout(job, tmp_path):
    """2 trainers, fully_shard per decoder layer and at the root: Shard(0) with torch.chunk's
    uneven rule (250 vocabulary rows -> 125 + 125; 96 MLP rows -> 48 + 48)."""
    run_fsdp_job(job, "1d", 2)
    check_llama_outputs(tmp_path, tp=2, with_hf=False)
    for r in range(2):
        info = json.loads((tmp_path / f"trainer{r}.json").read_text())
        assert info["placements"]["model.embed_tokens.weight"] == ["Shard(dim=0)"]
        assert info["boxes"]["model.embed_tokens.weight"] == [[[125 * r, 0], [125, 64]]]
        assert info["boxes"]["model.layers.0.self_attn.k_proj.weight"] == [[[16 * r, 0],
                                                                          [16, 64]]]
        assert info["boxes"]["model.norm.weight"] == [[[32 * r], [32]]]
        assert len(info["names"]) == 21  # every parameter, one register_module call


def test_tp_inside_fsdp2_on_a_2d_mesh(job, tmp_path):
    """4 trainers on a (dp 2, tp 2) mesh: Colwise q/k/v/gate/up become (_StridedShard(0),
    Shard(0)), Rowwise o/down (Shard(0), Shard(1)); embeddings and norms Shard(0) over dp."""
    run_fsdp_job(job, "2d", 4)
    check_llama_outputs(tmp_path, tp=2, with_hf=False)
    for rank in range(4):
        d, t = divmod(rank, 2)  # init_device_mesh's row-major ranks
        info = json.loads((tmp_path / f"trainer{rank}.json").read_text())
        q = "model.layers.1.self_attn.q_proj.weight"
        assert info["placements"][q][0].startswith("_StridedShard(dim=0"), info["placements"][q]
        assert info["boxes"][q] == [[[32 * t + 16 * d, 0], [16, 64]]]  # dp's half of tp's half
        o = "model.layers.1.self_attn.o_proj.weight"
        assert info["placements"][o] == ["Shard(dim=0)", "Shard(dim=1)"]
        assert info["boxes"][o] == [[[32 * d, 32 * t], [32, 32]]]
        assert info["boxes"]["model.embed_tokens.weight"] == [[[125 * d, 0], [125, 64]]]


def test_fsdp2_trainers_launched_by_torchrun(job, tmp_path):
    """torchrun starts the 2 FSDP2 trainers; each calls Bootstrap.from_torch_distributed() with no
    arguments: rank and trainer count from torch.distributed (initialized from torchrun's env://),
    coordinator, rollout count and secret from WSYNC_COORDINATOR_ADDRESS / WSYNC_NUM_ROLLOUTS /
    WSYNC_SECRET."""
    torchrun = Path(sys.executable).with_name("torchrun")
    launcher = [str(torchrun)] if torchrun.exists() else [sys.executable, "-m",
                                                          "torch.distributed.run"]
    with wsync.Coordinator(trainers=2, rollouts=2, timeout_ms=JOIN_MS, quiet=False) as c:
        env = dict(worker_env(), WSYNC_COORDINATOR_ADDRESS=c.address, WSYNC_NUM_ROLLOUTS="2",
                   WSYNC_SECRET=c.secret)
        args = {"torchrun": True, "versions": VERSIONS, "mesh": "1d", "out": str(tmp_path)}
        with open(tmp_path / "torchrun.log", "w") as log:
            trainers = subprocess.Popen(
                launcher + ["--standalone", "--nproc-per-node", "2", str(FSDP_JOBS), "fsdp",
                            "trainer", json.dumps(args)],
                env=env, stdout=log, stderr=subprocess.STDOUT)
            base = {"address": c.address, "secret": c.secret, "trainers": 2, "rollouts": 2,
                    "versions": VERSIONS}
            for r in range(2):
                job.start("fsdp", "rollout_tp", dict(base, rank=r, tp=2), name=f"tp{r}",
                          script=FSDP_JOBS)
            try:
                rc = trainers.wait(timeout=550)
            finally:
                if trainers.poll() is None:
                    trainers.kill()
                    trainers.wait()
        assert rc == 0, (tmp_path / "torchrun.log").read_text()[-4000:] + c.stderr
        job.wait(timeout_s=120, coordinator=c)
    check_llama_outputs(tmp_path, tp=2, with_hf=False)
    for r in range(2):  # torchrun's ranks became wsync's trainer ranks
        info = json.loads((tmp_path / f"trainer{r}.json").read_text())
        assert info["boxes"]["model.embed_tokens.weight"] == [[[125 * r, 0], [125, 64]]]
