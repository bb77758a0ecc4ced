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

Elastic replicas. verl's ``CheckpointEngineManager.add_replicas`` / ``remove_replicas`` change
the replica list; the manager then calls prepare / build_topology / init_process_group again on
every worker before each update. Here the rollout workers present at the first update are the
job's fixed members (the coordinator's ``--rollouts``); the workers of a replica added later
join the running job (wsync config.replica_size / replica_rank: ``replica_size`` in the engine's
kwargs is the rollout replica's worker count, e.g. its TP size), with a replica id derived from
the worker's own id, in verl's init_process_group (before the actors publish that update), and
get their first version from a running replica (peer cold start). Workers already in the job
keep their place. The rollouts' tensors: ``hf_shapes``, else derived from ``model_path``'s config
(wsync.engines.hf_shapes). :func:`remove_replicas` makes the removed
replicas' workers leave (wsync_context_destroy) before verl's own ``remove_replicas``; a replica
whose process dies is dropped by the coordinator and the actors go on.
"""
from __future__ import annotations

import dataclasses
import uuid
from typing import Any, AsyncGenerator, AsyncIterator, Dict, Iterable, List, Optional, Tuple

import torch

from .. import layout
from ..bootstrap import Bootstrap, replica_id
from ..errors import WsyncTimeoutError
from ..rollout import Rollout
from ..trainer import Trainer
from . import hf_shapes as shapes_of

try:
    from verl.checkpoint_engine.base import CheckpointEngine, CheckpointEngineRegistry
    HAVE_VERL = True
except Exception:  # verl (and ray) not installed
    HAVE_VERL = False
    CheckpointEngine = object  # type: ignore[assignment,misc]
    CheckpointEngineRegistry = None


class WsyncCheckpointEngine(CheckpointEngine):  # type: ignore[misc,valid-type]
    """verl CheckpointEngine over wsync. kwargs: coordinator_address, secret, model_path (verl's
    ``actor_rollout_ref.model.path``: the rollouts derive the tensors' names and shapes from its
    config, wsync.engines.hf_shapes), hf_shapes ({name: shape} the rollouts allocate: overrides
    model_path's), dtype (rollout dtype), device, timeout_ms, replica_size (workers per rollout
    replica; None: the fixed rollout workers form one replica, and a replica added later joins
    with one worker per replica), join_wait_ms (how long an added replica's worker waits in
    init_process_group for its peer cold start)."""

    def __init__(self, bucket_size: int = 0, is_master: bool = False, *,
                 coordinator_address: str = "", secret: str = "",
                 hf_shapes: Optional[Dict[str, List[int]]] = None, model_path: str = "",
                 dtype: torch.dtype = torch.bfloat16, device: str = "cpu",
                 timeout_ms: int = 60000, replica_size: Optional[int] = None,
                 join_wait_ms: int = 30000, **_: Any) -> None:
        self.is_master = is_master
        self.uid = uuid.uuid4().hex  # this worker's own id (a joined replica's id derives from it)
        self.replica_size = replica_size
        self.address, self.secret = coordinator_address, secret
        self.hf_shapes = hf_shapes or {}
        self.model_path = model_path
        self.dtype, self.device, self.timeout_ms = dtype, device, timeout_ms
        self.join_wait_ms = join_wait_ms
        self.trainer: Optional[Trainer] = None
        self.rollout: Optional[Rollout] = None
        self.buffers: Dict[str, torch.Tensor] = {}
        self.topology: Dict[str, Any] = {}

    @property
    def in_job(self) -> bool:
        """Whether this worker's wsync context exists (it joined the job)."""
        return self.trainer is not None or self.rollout is not None

    def prepare(self) -> Dict[str, Any]:
        """Nothing to allocate per step (wsync registered its buffers once); tells build_topology
        this worker's id, replica size, and its place when it is in the job already."""
        return {"wsync_uid": self.uid, "wsync_replica_size": self.replica_size,
                "wsync_topology": dict(self.topology) if self.in_job else None}

    @classmethod
    def build_topology(cls, actor_wg_world_size: int, rollout_world_size: int,
                       metadata: List[dict]) -> Tuple[Dict[str, List[Any]], Dict[str, List[Any]]]:
        """First update: actor ranks are wsync trainers 0..A-1, rollout ranks wsync rollouts
        0..R-1 (fixed membership; replica rank // replica_size, or 0 without replica_size).
        Later: workers in the job keep their place; rollout workers not in it (replicas added
        by add_replicas) join, grouped by replica_size in order, each group's replica id
        derived from its first worker's id. `metadata` is prepare()'s, actors first."""
        a, r = actor_wg_world_size, rollout_world_size
        meta = list(metadata) + [{}] * max(0, a + r - len(metadata))
        actor_meta, rollout_meta = meta[:a], meta[a:a + r]
        placed: List[Dict[str, Any]] = [m["wsync_topology"] for m in actor_meta
                                        if m.get("wsync_topology")]
        fixed_rollouts = placed[0]["num_rollouts"] if placed else r
        actor: Dict[str, List[Any]] = {"role": ["trainer"] * a, "rank": list(range(a)),
                                       "num_trainers": [a] * a,
                                       "num_rollouts": [fixed_rollouts] * a}
        rollout: Dict[str, List[Any]] = {k: [] for k in (
            "role", "rank", "num_trainers", "num_rollouts", "replica", "replica_size",
            "replica_rank")}
        group_left, group_replica, group_size = 0, 0, 1
        for i, m in enumerate(rollout_meta):
            size = m.get("wsync_replica_size")
            if m.get("wsync_topology"):
                t = m["wsync_topology"]
                values = [t.get(k) for k in rollout]
            elif not placed:  # the first update: the fixed members
                replica = i // size if size else 0
                values = ["rollout", i, a, r, replica, 0, 0]
            else:  # a worker of a replica added after the first update: joins
                if group_left == 0:
                    group_size = size or 1
                    group_left = group_size
                    group_replica = replica_id(str(m.get("wsync_uid", i)))
                values = ["rollout", -1, a, fixed_rollouts, group_replica, group_size,
                          group_size - group_left]
                group_left -= 1
            for k, v in zip(rollout, values):
                rollout[k].append(v)
        return actor, rollout

    def init_process_group(self, role: str, rank: int, num_trainers: int, num_rollouts: int,
                           replica: int = 0, replica_size: int = 0, replica_rank: int = 0,
                           **_: Any) -> None:
        """Remembers this rank's place (nothing when it is in the job already: its wsync context
        keeps it). The fixed members' wsync contexts are created with the first weights (their
        commit waits for the actors'); a rollout worker of an added replica joins the running job
        here, before verl's manager starts the update (so the actors' next version includes it:
        its first version is a running replica's, peer cold start, then that update's)."""
        if self.in_job:
            return
        self.topology = {"role": role, "rank": rank, "num_trainers": num_trainers,
                         "num_rollouts": num_rollouts, "replica": replica,
                         "replica_size": replica_size, "replica_rank": replica_rank}
        if role == "rollout" and replica_size:
            rollout = self._rollout()
            # After verl's first update a running replica holds the last step: wait for the
            # peer cold start before the actors publish, so that the trainers write this replica
            # the manager's next step (a version they started before they could write to it
            # would never come, and receive_weights(global_steps) would wait for it). Bounded:
            # where no peer can fill it (the coordinator logs why) the first version is the
            # actors' next one.
            try:
                rollout.wait_for_version(after=0, timeout_ms=self.join_wait_ms)
            except WsyncTimeoutError:
                pass

    def _bootstrap(self) -> Bootstrap:
        t = self.topology
        if t.get("replica_size"):
            return Bootstrap.join(self.address, self.secret, t["replica_size"],
                                  t["replica_rank"])
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
        rollout = self._rollout()
        after = (global_steps - 1) if global_steps is not None else (rollout.version or 0)
        newest = rollout.wait_for_version(after=after)
        # The actors may already have published a later step: yield exactly the one asked for
        # (its slot is still held by this replica unless two newer versions have replaced it,
        # in which case the acquire raises a NotReadyError naming the version).
        version = global_steps if global_steps is not None else newest
        for name, tensor in rollout.named_tensors(version):
            yield name, tensor
        rollout.version = version

    def _rollout(self) -> Rollout:
        """This rollout worker's wsync Rollout: created, registered (the tensors' names and shapes
        from hf_shapes, else model_path's config) and committed on first use."""
        if self.rollout is None:
            rollout = Rollout(self._bootstrap(), replica=self.topology.get("replica", 0),
                              timeout_ms=self.timeout_ms)
            shapes = shapes_of.from_model_path(self.model_path, self.hf_shapes) \
                if self.model_path else shapes_of.resolve(self.hf_shapes,
                                                          what="hf_shapes or model_path")
            rollout.register_slots({n: (tuple(s), self.dtype) for n, s in shapes.items()},
                                   device=self.device)
            rollout.commit()
            self.rollout = rollout
        return self.rollout

    def stats(self) -> Optional[Dict[str, Any]]:
        """This worker's wsync state for the driver (verl's ``execute_checkpoint_engine("stats")``):
        its place, and a rollout's version stats (first_version_from_peer: filled by a running
        replica); None before it joined."""
        if not self.in_job:
            return None
        out: Dict[str, Any] = {"topology": dict(self.topology)}
        if self.rollout is not None:
            stats = self.rollout.version_stats()
            out["version"] = self.rollout.version
            out["version_stats"] = dataclasses.asdict(stats) if stats is not None else None
        return out

    def finalize(self) -> None:
        """Per-step cleanup: none (the plan and buffers are kept for the next step)."""

    def close(self) -> None:
        """Leaves the wsync job (wsync_context_destroy: later versions do not wait for it)."""
        for endpoint in (self.trainer, self.rollout):
            if endpoint is not None:
                endpoint.close()
        self.trainer = self.rollout = None
        self.topology = {}


def remove_replicas(manager: Any, replicas: List[Any]) -> None:
    """verl's ``CheckpointEngineManager.remove_replicas`` with a wsync leave first: every worker
    of the removed replicas closes its wsync context (through verl's own
    ``execute_checkpoint_engine("close")`` on the worker actors), so the trainers stop writing to
    them at once; then the manager forgets them. (Adding needs nothing beyond verl's
    ``add_replicas``: the new workers join at the next update, see the module docstring.)"""
    import ray  # type: ignore[import-not-found]  # verl's dependency

    ray.get([w.execute_checkpoint_engine.remote("close") for r in replicas for w in r.workers])
    manager.remove_replicas(replicas)


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
