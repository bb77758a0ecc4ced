"""test_verl.py's Ray scenario: verl's own CheckpointEngineManager, RolloutReplica,
CheckpointEngineWorker and RayWorkerGroup on a local Ray cluster (CPU), with the "wsync" backend
(checkpoint_engine.custom_backend_module = wsync.engines.verl), driving replicas that verl adds
and removes while the actors publish.

    python verl_ray_jobs.py driver '<json args>'

What is not verl's own (nothing of it runs on this CPU venv): the actor workers' policy (a
verl Worker whose update_weights sends fixed tensors through the wsync checkpoint engine, as
verl's ActorRolloutRefWorker sends its model's per-tensor parameters) and the inference server
behind each rollout worker (a BaseRollout server adapter that bit-checks the tensors verl's
CheckpointEngineWorker hands it; RolloutReplica.launch_servers starts no server).

Timeline (global steps): 1-2 replica 0 (the fixed member); replica 1 added (verl's
add_replicas), steps 3-4 both; replica 1 removed with wsync.engines.verl.remove_replicas (its
worker leaves, then verl forgets it), step 5 replica 0 only; replica 2 added, step 6 both; its
Ray actor killed (ray.kill: the process dies) and verl's own remove_replicas, step 7 replica 0
only. The rollout engines derive the tensors' names and shapes from model_path (no hf_shapes).
"""
from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import torch

from job_main import run

CONFIG_DIR = "model"  # under args["out"]: the tiny Llama config the rollouts derive shapes from


def llama_config():
    from transformers import LlamaConfig

    cfg = LlamaConfig(vocab_size=61, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32,
                      tie_word_embeddings=False)
    cfg.architectures = ["LlamaForCausalLM"]
    return cfg


def weights(version: int) -> dict:
    """The policy at `version` (the same on every actor rank: verl's per-tensor gather)."""
    from transformers import LlamaForCausalLM

    torch.manual_seed(7)
    model = LlamaForCausalLM(llama_config())
    return {n: p.detach() * version for n, p in model.named_parameters()}


def make_classes():
    """The verl subclasses (defined after ray / verl import, inside the Ray workers too)."""
    from verl.checkpoint_engine.base import CheckpointEngineRegistry, CheckpointEngineWorker
    from verl.single_controller.base import Worker
    from verl.single_controller.base.decorator import Dispatch, register
    from verl.single_controller.ray import RayClassWithInitArgs
    from verl.workers.rollout.base import BaseRollout
    from verl.workers.rollout.replica import RolloutReplica
    import ray

    class PolicyActor(Worker):
        """An actor rank: the wsync checkpoint engine of verl's registry, sending the policy."""

        def __init__(self, engine_kwargs: dict) -> None:
            super().__init__()
            import wsync.engines.verl  # noqa: F401  (custom_backend_module)

            self.checkpoint_engine = CheckpointEngineRegistry.new("wsync", bucket_size=0,
                                                                  **engine_kwargs)

        @register(dispatch_mode=Dispatch.ONE_TO_ALL, blocking=False)
        async def update_weights(self, global_steps: int = None, mode: str = "auto"):
            await self.checkpoint_engine.send_weights(iter(weights(global_steps).items()),
                                                      global_steps=global_steps)
            return {}

        @register(dispatch_mode=Dispatch.DP_COMPUTE, blocking=False)
        def execute_checkpoint_engine(self, method: str, *args, **kwargs):
            return getattr(self.checkpoint_engine, method)(*args, **kwargs)

        @register(dispatch_mode=Dispatch.ONE_TO_ALL)
        def last_ready_replicas(self) -> list:
            import wsync

            return self.checkpoint_engine.trainer.last_request.replicas(wsync.Replicas.READY)

    class CheckingServer(BaseRollout):
        """The inference server's weight intake: bit-checks every tensor verl hands it."""

        def __init__(self, out: str, replica_rank: int) -> None:  # no BaseRollout config
            self.out, self.replica_rank, self.is_leader_rank = out, replica_rank, True

        async def update_weights(self, weights, wire_format="named_tensors", global_steps=None,
                                 **kwargs):
            got = {n: t.clone() async for n, t in weights}
            want = weights_at(global_steps)
            assert got.keys() == want.keys(), (sorted(got)[:3], sorted(want)[:3])
            for n in want:
                assert torch.equal(got[n], want[n]), (global_steps, n)
            Path(self.out, f"replica{self.replica_rank}_v{global_steps}").write_text("")

        async def resume(self, tags):
            pass

        async def release(self):
            pass

    def weights_at(step):
        return weights(step)

    class CpuReplica(RolloutReplica):
        """A rollout replica on Ray CPU workers (verl's CheckpointEngineWorker actors)."""

        def __init__(self, *args, out: str, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self.out = out

        def rollout_worker_use_gpu(self) -> bool:
            return False

        def get_ray_class_with_init_args(self):
            return RayClassWithInitArgs(cls=ray.remote(CheckpointEngineWorker),
                                        rollout_config=self.config,
                                        model_config=self.model_config,
                                        server_adapter=CheckingServer(self.out,
                                                                      self.replica_rank))

        async def launch_servers(self):
            pass  # no inference server runs here

    return PolicyActor, CpuReplica


def driver(a: dict) -> None:
    import ray
    from verl.checkpoint_engine.base import CheckpointEngineManager
    from verl.single_controller.ray import (RayClassWithInitArgs, RayResourcePool,
                                            RayWorkerGroup)
    from verl.workers.config import CheckpointEngineConfig, RolloutConfig

    import wsync.engines.verl as adapter

    out = Path(a["out"])
    llama_config().save_pretrained(out / CONFIG_DIR)
    kwargs = {"coordinator_address": a["address"], "secret": a["secret"],
              "model_path": str(out / CONFIG_DIR), "dtype": torch.float32,
              "timeout_ms": 120000, "replica_size": 1}
    ce_config = CheckpointEngineConfig(backend="wsync", engine_kwargs={"wsync": kwargs},
                                       custom_backend_module="wsync.engines.verl")
    rollout_config = RolloutConfig(name="vllm", tensor_model_parallel_size=1,
                                   checkpoint_engine=ce_config)
    ray.init(num_cpus=16, include_dashboard=False, log_to_driver=True)
    PolicyActor, CpuReplica = make_classes()
    actors = RayWorkerGroup(resource_pool=RayResourcePool([a["actors"]], use_gpu=False,
                                                          max_colocate_count=1),
                            ray_cls_with_init=RayClassWithInitArgs(cls=ray.remote(PolicyActor),
                                                                   engine_kwargs=kwargs))

    def replica(rank: int):
        r = CpuReplica(rank, rollout_config, None, gpus_per_node=1, out=str(out))
        asyncio.run(r.init_colocated(RayResourcePool([1], use_gpu=False, max_colocate_count=1)))
        return r

    def stats(r) -> dict:
        return ray.get(r.workers[0].execute_checkpoint_engine.remote("stats"))

    timeline = []

    def step(manager, v: int) -> None:
        manager.update_weights(global_steps=v)
        ready = actors.last_ready_replicas()
        timeline.append({"step": v, "replicas": [r.replica_rank for r in manager.replicas],
                         "ready_wsync_replicas": ready[0]})

    r0 = replica(0)
    manager = CheckpointEngineManager(ce_config, actors, [r0])
    step(manager, 1)
    step(manager, 2)
    r1 = replica(1)
    manager.add_replicas([r1])
    step(manager, 3)
    r1_stats = stats(r1)
    step(manager, 4)
    adapter.remove_replicas(manager, [r1])
    step(manager, 5)
    r2 = replica(2)
    manager.add_replicas([r2])
    step(manager, 6)
    r2_stats = stats(r2)
    ray.kill(r2.workers[0], no_restart=True)  # the process dies: its connection closes
    manager.remove_replicas([r2])  # verl's own, nothing of wsync's
    step(manager, 7)
    (out / "ray.json").write_text(json.dumps({
        "timeline": timeline, "r0": stats(r0), "r1": r1_stats, "r2": r2_stats}, default=str))
    ray.get(actors.execute_checkpoint_engine(["close"] * a["actors"]))
    ray.get(r0.workers[0].execute_checkpoint_engine.remote("close"))
    ray.shutdown()


if __name__ == "__main__":
    run(lambda: {"driver": driver}[sys.argv[1]](json.loads(sys.argv[2])))
