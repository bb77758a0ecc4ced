"""The ways of moving the model through outside libraries: NIXL (nixl-cu13) and MoonshotAI's
checkpoint-engine. Both are imported lazily; a missing or broken library makes the method
unavailable (the harness prints a "skipped" line), it never stops the benchmark."""

from __future__ import annotations

import os
import socket
import sys
import time

import torch

from sbs_common import Context, PeerError
from sbs_methods import Method


def import_nixl():
    """The nixl_agent and nixl_agent_config classes of whichever NIXL package is installed."""
    try:
        from nixl_cu13 import nixl_agent, nixl_agent_config  # the nixl-cu13 wheel
    except ImportError:
        from nixl._api import nixl_agent, nixl_agent_config  # the nixl wheel
    return nixl_agent, nixl_agent_config


class Nixl(Method):
    """NIXL one-sided WRITE over its UCX backend: both sides register their parameters (one region
    per tensor), exchange agent metadata once, the sender prepares one transfer of every tensor
    into the receiver's parameter, posted once per version with a notification; the receiver is
    done when the notification arrives (NIXL delivers it after the data)."""

    name = "nixl"

    def unavailable(self, ctx: Context) -> str | None:
        try:
            import_nixl()
        except Exception as e:  # noqa: BLE001  (any import failure: missing wheel, missing lib)
            return f"import failed: {type(e).__name__}: {e}"
        return None

    def _agent(self, name: str):
        nixl_agent, nixl_agent_config = import_nixl()
        return nixl_agent(name, nixl_agent_config(backends=["UCX"]))

    def receiver_setup(self, ctx: Context) -> None:
        self.agent = self._agent(f"sbs-receiver-{os.getpid()}")
        tensors = [ctx.params[n] for n in ctx.names]
        self.reg = self.agent.register_memory(tensors)
        descs = self.agent.get_serialized_descs(self.agent.get_xfer_descs(tensors))
        ctx.send("nixl_meta", self.agent.get_agent_metadata(), descs)
        _, sender_meta = ctx.recv("nixl_meta")
        self.peer = self.agent.add_remote_agent(sender_meta)

    def sender_setup(self, ctx: Context) -> None:
        self.agent = self._agent(f"sbs-sender-{os.getpid()}")
        tensors = [ctx.params[n] for n in ctx.names]
        self.reg = self.agent.register_memory(tensors)
        _, meta, descs = ctx.recv("nixl_meta")
        self.peer = self.agent.add_remote_agent(meta)
        ctx.send("nixl_meta", self.agent.get_agent_metadata())
        local = self.agent.get_xfer_descs(tensors)
        remote = self.agent.deserialize_descs(descs)
        self.handle = self.agent.initialize_xfer("WRITE", local, remote, self.peer, b"sbs")

    def sender_version(self, ctx: Context, version: int) -> dict:
        ctx.sync()  # the parameters are final before the device is read
        tag = f"v{version}".encode()
        state = self.agent.transfer(self.handle, tag)
        deadline = time.monotonic() + ctx.timeout_s
        while state == "PROC" and time.monotonic() < deadline:
            state = self.agent.check_xfer_state(self.handle)
        if state != "DONE":
            raise RuntimeError(f"NIXL transfer state {state}")
        ctx.recv("done")
        return {}

    def receiver_version(self, ctx: Context, version: int) -> None:
        tag = f"v{version}".encode()
        deadline = time.monotonic() + ctx.timeout_s
        while True:
            notifs = self.agent.get_new_notifs()
            if any(tag in msgs for msgs in notifs.values()):
                break
            if time.monotonic() > deadline:
                raise PeerError(f"no NIXL notification {tag!r} in {ctx.timeout_s:.0f} s")
        ctx.sync()
        ctx.send("done")

    def _teardown(self, sender: bool) -> None:
        agent = getattr(self, "agent", None)
        if agent is None:
            return
        try:
            if sender and getattr(self, "handle", None) is not None:
                agent.release_xfer_handle(self.handle)
            if getattr(self, "peer", None):
                agent.remove_remote_agent(self.peer)
            if getattr(self, "reg", None) is not None:
                agent.deregister_memory(self.reg)
        finally:
            self.agent = None

    def sender_teardown(self, ctx: Context) -> None:
        self._teardown(True)

    def receiver_teardown(self, ctx: Context) -> None:
        self._teardown(False)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class CheckpointEngine(Method):
    """MoonshotAI checkpoint-engine's colocated update (ParameterServer.update with no ranks:
    broadcast mode, world size 1 on one GPU): the checkpoint is registered once (copied to pinned
    host memory, not timed, as the library keeps it); each update copies host -> device buckets
    (up to PS_MAX_BUCKET_SIZE_GB, 8 GiB, and a third of free memory) and hands them to the
    receiver by CUDA IPC over ZeroMQ; the receiver runs checkpoint_engine.worker's
    update_weights_from_ipc with a callback that copies into its own parameters. The process group
    is made once (auto_pg=False) so its setup is not timed. Measures the library's whole update,
    whose source is host memory: compare it with the pinned host->device bound too."""

    name = "checkpoint_engine"
    slow = True

    def unavailable(self, ctx: Context) -> str | None:
        if ctx.device.type != "cuda":
            return "needs a CUDA device (CUDA IPC and pinned memory)"
        try:
            import checkpoint_engine.ps  # noqa: F401
            import checkpoint_engine.worker  # noqa: F401
        except Exception as e:  # noqa: BLE001
            return f"import failed: {type(e).__name__}: {e}"
        return None

    def sender_setup(self, ctx: Context) -> None:
        from loguru import logger

        logger.remove()
        logger.add(sys.stderr, level="WARNING")
        from checkpoint_engine.ps import ParameterServer

        os.environ.update(
            RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port())
        )
        self.ps = ParameterServer(rank=0, world_size=1, auto_pg=False, gpu_count=1)
        self.ps.init_process_group()
        self._register(ctx)

    def _register(self, ctx: Context) -> None:
        self.ps.register_checkpoint("sbs", named_tensors={n: ctx.params[n] for n in ctx.names})
        self.ps.gather_metas("sbs")

    def sender_refilled(self, ctx: Context) -> None:
        self.ps.unregister_checkpoint("sbs")
        self._register(ctx)

    def sender_version(self, ctx: Context, version: int) -> dict:
        failure: list[BaseException] = []

        def req_func(socket_paths: list[tuple[str, str]]) -> None:
            try:
                ctx.send("zmq", socket_paths[0][1])
                ctx.recv("done")
            except BaseException as e:  # noqa: BLE001  (reported by the main thread)
                failure.append(e)

        self.ps.update("sbs", req_func)
        if failure:
            raise failure[0]
        return {}

    def receiver_version(self, ctx: Context, version: int) -> None:
        import zmq
        from checkpoint_engine.worker import update_weights_from_ipc

        if not hasattr(self, "zmq_ctx"):
            self.zmq_ctx = zmq.Context()
        _, handle = ctx.recv("zmq")

        def load(weights: list[tuple[str, torch.Tensor]]) -> None:
            for name, t in weights:
                ctx.params[name].copy_(t)

        update_weights_from_ipc(self.zmq_ctx, handle, ctx.device.index or 0, run=load)
        ctx.sync()
        ctx.send("done")

    def sender_teardown(self, ctx: Context) -> None:
        ps = getattr(self, "ps", None)
        if ps is None:
            return
        try:
            ps.unregister_checkpoint("sbs", force=True)
        finally:
            if torch.distributed.is_initialized():
                torch.distributed.destroy_process_group()
            self.ps = None
