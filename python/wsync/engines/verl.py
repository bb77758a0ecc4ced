"""verl adapter: a ``CheckpointEngine`` registered as "wsync" in verl's
``CheckpointEngineRegistry`` (verl 0.9: prepare / build_topology / init_process_group /
send_weights / receive_weights / finalize).

verl hands the actor side a generator of ``(hf_name, full tensor)`` per step (its own per-tensor
gather). On the first step each actor rank copies only its dim-0 chunk (torch.chunk's rule) of
each tensor into a stable buffer and registers it; afterwards every step copies the chunks in and
publishes ``global_steps``. So the transfer itself has no rank-0 funnel: each rollout rank gets
its bytes from every actor rank directly. Rollout workers receive whole tensors in wsync slots
and yield them to verl's server adapter. The job's coordinator is a standalone
wsync-coordinator (``coordinator_address`` and ``secret`` in the engine's kwargs).
"""
from __future__ import annotations

from typing import Any, AsyncGenerator, AsyncIterator, Dict, Iterable, List, Optional, Tuple

import torch

from .. import layout
from ..bootstrap import Bootstrap
from ..rollout import Rollout
from ..trainer import Trainer

try:
    from verl.checkpoint_engine.base import CheckpointEngine, CheckpointEngineRegistry
    HAVE_VERL = True
except Exception:  # verl (and ray) not installed
    HAVE_VERL = False
    CheckpointEngine = object  # type: ignore[assignment,misc]
    CheckpointEngineRegistry = None


class WsyncCheckpointEngine(CheckpointEngine):  # type: ignore[misc,valid-type]
    """verl CheckpointEngine over wsync. kwargs: coordinator_address, secret, hf_shapes
    ({name: shape} the rollouts allocate), dtype (rollout dtype), device, timeout_ms."""

    def __init__(self, bucket_size: int = 0, is_master: bool = False, *,
                 coordinator_address: str = "", secret: str = "",
                 hf_shapes: Optional[Dict[str, List[int]]] = None,
                 dtype: torch.dtype = torch.bfloat16, device: str = "cpu",
                 timeout_ms: int = 60000, **_: Any) -> None:
        self.is_master = is_master
        self.address, self.secret = coordinator_address, secret
        self.hf_shapes = hf_shapes or {}
        self.dtype, self.device, self.timeout_ms = dtype, device, timeout_ms
        self.trainer: Optional[Trainer] = None
        self.rollout: Optional[Rollout] = None
        self.buffers: Dict[str, torch.Tensor] = {}
        self.topology: Dict[str, Any] = {}

    def prepare(self) -> Dict[str, Any]:
        """Nothing to allocate per step: wsync registered its buffers once."""
        return {}

    @classmethod
    def build_topology(cls, actor_wg_world_size: int, rollout_world_size: int,
                       metadata: List[dict]) -> Tuple[Dict[str, List[Any]], Dict[str, List[Any]]]:
        """Actor ranks are wsync trainers 0..A-1, rollout ranks wsync rollouts 0..R-1."""
        a, r = actor_wg_world_size, rollout_world_size
        actor: Dict[str, List[Any]] = {"role": ["trainer"] * a, "rank": list(range(a)),
                                       "num_trainers": [a] * a, "num_rollouts": [r] * a}
        rollout: Dict[str, List[Any]] = {"role": ["rollout"] * r, "rank": list(range(r)), "num_trainers": [a] * r,
                   "num_rollouts": [r] * r}
        return actor, rollout

    def init_process_group(self, role: str, rank: int, num_trainers: int, num_rollouts: int,
                           **_: Any) -> None:
        """Remembers this rank's place; the wsync context is created with the first weights."""
        self.topology = {"role": role, "rank": rank, "num_trainers": num_trainers,
                         "num_rollouts": num_rollouts}

    def _bootstrap(self) -> Bootstrap:
        t = self.topology
        return Bootstrap.explicit(t["rank"], t["num_trainers"], t["num_rollouts"], self.address,
                                  self.secret)

    async def send_weights(self, weights: Iterable[Tuple[str, torch.Tensor]],
                           global_steps: Optional[int] = None) -> None:
        """Copies this rank's dim-0 chunk of each tensor into its registered buffer, publishes."""
        rank, size = self.topology["rank"], self.topology["num_trainers"]
        first = self.trainer is None
        specs = {}
        async_items = _iterate(weights)
        async for name, tensor in async_items:
            lo, hi = layout.chunk_range(tensor.shape[0], rank, size)
            if hi <= lo:
                continue
            if first:
                self.buffers[name] = torch.empty_like(tensor[lo:hi]).contiguous()
                specs[name] = layout.chunk_shard(name, tuple(tensor.shape), 0, rank, size)
            self.buffers[name].copy_(tensor[lo:hi])
        if self.trainer is None:
            self.trainer = Trainer(self._bootstrap(), timeout_ms=self.timeout_ms)
            self.trainer.register_tensors(self.buffers, specs=specs)
            self.trainer.commit()
        self.step = (global_steps if global_steps is not None else getattr(self, "step", 0) + 1)
        self.trainer.publish(self.step, wait=True)

    async def receive_weights(self, global_steps: Optional[int] = None
                              ) -> AsyncGenerator[Tuple[str, torch.Tensor], None]:
        """Waits for `global_steps` (default: a version newer than the last) and yields the
        whole tensors of that version."""
        if self.rollout is None:
            self.rollout = Rollout(self._bootstrap(), timeout_ms=self.timeout_ms)
            self.rollout.register_slots({n: (tuple(s), self.dtype)
                                         for n, s in self.hf_shapes.items()},
                                        device=self.device)
            self.rollout.commit()
        after = (global_steps - 1) if global_steps is not None else (self.rollout.version or 0)
        newest = self.rollout.wait_for_version(after=after)
        # The actors may already have published a later step: yield exactly the one asked for
        # (its slot is still held by this replica unless two newer versions have replaced it,
        # in which case the acquire raises a NotReadyError naming the version).
        version = global_steps if global_steps is not None else newest
        for name, tensor in self.rollout.named_tensors(version):
            yield name, tensor
        self.rollout.version = version

    def finalize(self) -> None:
        """Per-step cleanup: none (the plan and buffers are kept for the next step)."""

    def close(self) -> None:
        """Leaves the wsync job."""
        for endpoint in (self.trainer, self.rollout):
            if endpoint is not None:
                endpoint.close()
        self.trainer = self.rollout = None


async def _iterate(weights: Any) -> AsyncIterator[Tuple[str, torch.Tensor]]:
    if hasattr(weights, "__aiter__"):
        async for item in weights:
            yield item
    else:
        for item in weights:
            yield item


def register() -> None:
    """Registers WsyncCheckpointEngine as "wsync" in verl's registry (idempotent)."""
    if CheckpointEngineRegistry is None:
        raise ImportError("verl is not installed")
    if "wsync" not in CheckpointEngineRegistry._registry:
        CheckpointEngineRegistry.register("wsync")(WsyncCheckpointEngine)


if HAVE_VERL:
    register()
