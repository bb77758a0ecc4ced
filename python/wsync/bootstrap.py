"""How a process joins a wsync job: under mpirun, explicitly, or from torch.distributed's env.

A :class:`Bootstrap` value is passed to :class:`wsync.Trainer` / :class:`wsync.Rollout`. Under
mpirun (``Bootstrap.mpi()``) MPI_COMM_WORLD holds every trainer and rollout and the coordinator
runs on world rank 0 (a thread of trainer 0, or a ``wsync-coordinator --mpi`` process). Everywhere
else (torchrun, Ray, an engine started by its own launcher) ranks join a standalone
``wsync-coordinator`` (:class:`Coordinator` starts one) with an explicit rank, counts, address and
shared secret. A rollout replica may also join a running job (:meth:`Bootstrap.join`) with only
the coordinator's address and secret, its replica's size and its rank in it.
"""
from __future__ import annotations

import os
import secrets
import subprocess
import threading
from dataclasses import dataclass
from typing import List, Optional

from . import _lib
from .core import ContextConfig
from .types import Bootstrap as BootstrapKind


@dataclass
class Bootstrap:
    """Bootstrap settings (the explicit fields matter only when `kind` is EXPLICIT). Fields left
    None take the library's defaults. `replica_size` > 0: a rollout replica joining a running
    job (:meth:`join`)."""

    kind: BootstrapKind = BootstrapKind.MPI
    rank: Optional[int] = None
    num_trainers: Optional[int] = None
    num_rollouts: Optional[int] = None
    coordinator_address: Optional[str] = None
    secret: Optional[str] = None
    replica_size: Optional[int] = None
    replica_rank: Optional[int] = None

    @property
    def joins(self) -> bool:
        """Whether this is a rollout replica joining a running job."""
        return bool(self.replica_size)

    @staticmethod
    def mpi() -> "Bootstrap":
        """Under mpirun: roles and ranks from MPI_COMM_WORLD (wsync initializes MPI when needed)."""
        return Bootstrap(BootstrapKind.MPI)

    @staticmethod
    def explicit(rank: int, num_trainers: int, num_rollouts: int, coordinator_address: str,
                 secret: str) -> "Bootstrap":
        """Rank among the ranks of its role, the job's counts, and the coordinator's
        ``"host:port"`` and secret. A trainer of an elastic job (no fixed rollout rank, every
        replica joins with :meth:`join`) passes `num_rollouts` 0."""
        return Bootstrap(BootstrapKind.EXPLICIT, rank, num_trainers, num_rollouts,
                         coordinator_address, secret)

    @staticmethod
    def join(coordinator_address: str, secret: str, replica_size: int = 1,
             replica_rank: int = 0) -> "Bootstrap":
        """A rank of a rollout replica joining a running job (explicit bootstrap, no job-wide
        counts): the coordinator's ``"host:port"`` and secret, the number of ranks of this
        replica (e.g. the engine's TP size) and this rank's index in it. Every rank of the
        replica joins with the same `replica_size` and the same replica id (``Rollout(replica=)``,
        an id no live replica of the job has: an explicit one, or :func:`replica_id` of the
        engine's own id); commit returns once all of them committed. Its first version comes from
        a running replica when one holds a ready version (peer cold start:
        ``version_stats().first_version_from_peer``), else from the trainers' next publish."""
        return Bootstrap(BootstrapKind.EXPLICIT, coordinator_address=coordinator_address,
                         secret=secret, replica_size=int(replica_size),
                         replica_rank=int(replica_rank))

    @staticmethod
    def from_torch_distributed(coordinator_address: Optional[str] = None,
                               num_rollouts: Optional[int] = None,
                               secret: Optional[str] = None) -> "Bootstrap":
        """A trainer's bootstrap under torchrun: rank and trainer count from torch.distributed
        (the default process group when initialized, else torchrun's RANK / WORLD_SIZE), the
        coordinator from the arguments or $WSYNC_COORDINATOR_ADDRESS, $WSYNC_NUM_ROLLOUTS and
        $WSYNC_SECRET. `num_rollouts` 0 (given, or $WSYNC_NUM_ROLLOUTS=0): an elastic job whose
        replicas all join at run time."""
        rank, world = _torch_rank_world()
        address = coordinator_address or os.environ.get("WSYNC_COORDINATOR_ADDRESS")
        rollouts = num_rollouts if num_rollouts is not None else \
            int(os.environ.get("WSYNC_NUM_ROLLOUTS", "-1"))
        key = secret or os.environ.get("WSYNC_SECRET")
        if not address or rollouts < 0 or not key:
            raise ValueError("from_torch_distributed needs the coordinator address, the number "
                             "of rollout ranks and the secret (arguments or WSYNC_COORDINATOR_"
                             "ADDRESS, WSYNC_NUM_ROLLOUTS, WSYNC_SECRET)")
        return Bootstrap.explicit(rank, world, rollouts, address, key)

    def apply(self, config: ContextConfig) -> ContextConfig:
        """Writes these settings into `config` and returns it."""
        config.bootstrap = self.kind
        if self.kind == BootstrapKind.EXPLICIT:
            config.rank, config.num_trainers = self.rank, self.num_trainers
            config.num_rollouts = self.num_rollouts
            config.coordinator_address, config.secret = self.coordinator_address, self.secret
            config.replica_size, config.replica_rank = self.replica_size, self.replica_rank
        else:
            config.secret = self.secret
        return config


# Derived replica ids (replica_id) are in [_DERIVED_LOW, _DERIVED_HIGH): above the ids fixed
# membership jobs number from 0, below the library's bound (a rollout's replica < 65536).
_DERIVED_LOW, _DERIVED_HIGH = 1 << 12, 1 << 16


def replica_id(engine_id: str) -> int:
    """A replica id derived from an engine's own id (a vLLM / SGLang instance id, a Ray actor
    id, a host:port): stable for the same id, in [4096, 65536), so it does not collide with the
    ids 0, 1, ... a fixed-membership job uses. Two engine ids may map to the same replica id
    (about 1 in 61000 per pair); the second to join then fails its create with wsync's error
    naming the replica: pass an explicit replica id where engines are numbered anyway."""
    import zlib

    return _DERIVED_LOW + zlib.crc32(engine_id.encode()) % (_DERIVED_HIGH - _DERIVED_LOW)


def _torch_rank_world() -> "tuple[int, int]":
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
    except ImportError:
        pass
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    raise ValueError("torch.distributed is not initialized and RANK / WORLD_SIZE are not set")


class Coordinator:
    """A standalone ``wsync-coordinator`` process (for explicit bootstrap), started on this host.

    ``with Coordinator(trainers=2, rollouts=2) as c: ... c.address, c.secret ...``. The process
    exits on its own once every rank said goodbye; :meth:`stop` ends it earlier. `rollouts` 0
    starts an elastic job: the trainers commit and publish alone (each version completes at once
    until a replica joined) and every replica joins at run time (:meth:`Bootstrap.join`).
    `trainers` must be positive and `rollouts` >= 0 (ValueError otherwise)."""

    def __init__(self, trainers: int, rollouts: int, *, secret: Optional[str] = None,
                 bind: str = "127.0.0.1", port: int = 0, timeout_ms: int = 60000,
                 max_staleness: int = -1, quiet: bool = True, program: Optional[str] = None,
                 extra_args: Optional[List[str]] = None) -> None:
        if trainers <= 0 or rollouts < 0:
            raise ValueError(f"Coordinator: trainers must be positive and rollouts >= 0 (0: an "
                             f"elastic job), got trainers={trainers}, rollouts={rollouts}")
        self.secret = secret or secrets.token_hex(16)
        self.program = program or _lib.find_coordinator()
        args = [self.program, "--trainers", str(trainers), "--rollouts", str(rollouts),
                "--bind", bind, "--port", str(port), "--secret", self.secret,
                "--timeout-ms", str(timeout_ms), "--max-staleness", str(max_staleness)]
        args += ["--quiet"] if quiet else []
        self.process = subprocess.Popen(args + list(extra_args or []), stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True)
        line = self.process.stdout.readline() if self.process.stdout else ""
        if "listening on port" not in line:
            err = self.process.stderr.read() if self.process.stderr else ""
            self.process.wait(timeout=10)
            raise RuntimeError(f"wsync-coordinator did not start: {line.strip()} {err.strip()}")
        self.port = int(line.rsplit(" ", 1)[-1])
        self.address = f"{bind}:{self.port}"
        self._stderr: List[str] = []
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self._stderr.append(line)

    @property
    def stderr(self) -> str:
        """What the coordinator printed on stderr so far."""
        return "".join(self._stderr)

    def wait(self, timeout_s: Optional[float] = None) -> int:
        """Waits for the process to exit; its exit code (0: the job finished cleanly)."""
        return self.process.wait(timeout=timeout_s)

    def stop(self) -> None:
        """Ends the process (terminate, then kill after 5 s)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> "Coordinator":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
