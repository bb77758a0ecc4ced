"""The ways of moving the model that need nothing outside torch and safetensors.

Each Method has a sender side (the process holding the new weights) and a receiver side (the
process whose own parameters must end up equal to them). A version's sender side returns only
once the receiver has its parameters updated and its device synchronized (it answered "done").
Setup runs before the timed versions and is not timed. Protocol order inside setup: the receiver
speaks first, so that large messages never cross (a pipe write blocks until the peer reads).
"""

from __future__ import annotations

import os
import time

import torch
from torch.multiprocessing.reductions import reduce_tensor

from sbs_common import Context, as_bytes


class Method:
    name = ""
    slow = False  # timed with --slow-iters instead of --iters

    def unavailable(self, ctx: Context) -> str | None:
        """Why this method cannot run here (checked on the sender side), or None."""
        return None

    def sender_setup(self, ctx: Context) -> None:
        pass

    def receiver_setup(self, ctx: Context) -> None:
        pass

    def sender_version(self, ctx: Context, version: int) -> dict:
        raise NotImplementedError

    def receiver_version(self, ctx: Context, version: int) -> None:
        raise NotImplementedError

    def sender_refilled(self, ctx: Context) -> None:
        """The sender's parameters got new values (before the verified version)."""

    def sender_teardown(self, ctx: Context) -> None:
        pass

    def receiver_teardown(self, ctx: Context) -> None:
        pass


def rebuild_shared(handle, ctx: Context) -> torch.Tensor:
    """The receiver's tensor from reduce_tensor's (rebuild function, args), as OpenRLHF and
    checkpoint-engine do it: CUDA handles get the receiver's own device index."""
    func, args = handle
    args = list(args)
    if ctx.device.type == "cuda":
        args[6] = ctx.device.index if ctx.device.index is not None else torch.cuda.current_device()
    return func(*args)


class IpcPerTensor(Method):
    """OpenRLHF's colocated update: per parameter, clone it, send reduce_tensor's CUDA IPC handle,
    the receiver rebuilds the tensor, copies it into its own parameter, synchronizes and answers;
    one round trip per tensor (options: ipc_clone, default True as in OpenRLHF)."""

    name = "ipc_per_tensor"

    def sender_version(self, ctx: Context, version: int) -> dict:
        clone = ctx.options.get("ipc_clone", True)
        for name in ctx.names:
            p = ctx.params[name]
            w = p.clone() if clone else p
            ctx.send("t", name, reduce_tensor(w))
            ctx.recv("ok")
            ctx.sync()
            del w
        ctx.send("end")
        ctx.recv("done")
        return {}

    def receiver_version(self, ctx: Context, version: int) -> None:
        while True:
            msg = ctx.recv()
            if msg[0] == "end":
                ctx.send("done")
                return
            _, name, handle = msg
            w = rebuild_shared(handle, ctx)
            ctx.params[name].copy_(w)
            ctx.sync()
            del w
            ctx.send("ok")


def bucket_plan(ctx: Context, bucket_bytes: int) -> list[list[tuple[int, int, int, int]]]:
    """Buckets of (tensor index, byte start in the tensor, bytes, byte offset in the bucket), in
    the model's order; a tensor larger than a bucket is split across buckets."""
    buckets: list[list[tuple[int, int, int, int]]] = [[]]
    used = 0
    for i, name in enumerate(ctx.names):
        nbytes = ctx.params[name].numel() * ctx.params[name].element_size()
        start = 0
        while start < nbytes:
            if used == bucket_bytes:
                buckets.append([])
                used = 0
            n = min(nbytes - start, bucket_bytes - used)
            buckets[-1].append((i, start, n, used))
            used += n
            start += n
            # keep pieces 256-byte aligned in the bucket, as the packers of real engines do
            used = min(bucket_bytes, (used + 255) // 256 * 256)
    return [b for b in buckets if b]


class IpcBucketed(Method):
    """verl's naive checkpoint engine: two bucket buffers (ping-pong) on the sender, shared once by
    CUDA IPC; per bucket the sender packs tensors into the free buffer, synchronizes and sends the
    bucket's metadata; the receiver unpacks into its parameters, synchronizes and frees the buffer.
    Packing bucket k+1 overlaps unpacking bucket k (options: bucket_mb, default 512)."""

    name = "ipc_bucketed"

    def sender_setup(self, ctx: Context) -> None:
        self.bucket_bytes = int(ctx.options.get("bucket_mb", 512)) << 20
        total = sum(p.numel() * p.element_size() for p in ctx.params.values())
        size = min(self.bucket_bytes, (total + 255) // 256 * 256)
        self.buffers = [torch.empty(size, dtype=torch.uint8, device=ctx.device) for _ in range(2)]
        if ctx.device.type == "cpu":
            for b in self.buffers:
                b.share_memory_()
        self.plan = bucket_plan(ctx, size)
        ctx.recv("ready_for_buffers")
        ctx.send("buffers", [reduce_tensor(b) for b in self.buffers])

    def receiver_setup(self, ctx: Context) -> None:
        ctx.send("ready_for_buffers")
        _, handles = ctx.recv("buffers")
        self.buffers = [rebuild_shared(h, ctx) for h in handles]

    def sender_version(self, ctx: Context, version: int) -> dict:
        freed = 0
        for k, bucket in enumerate(self.plan):
            slot = k % 2
            if k >= 2:
                ctx.recv("free")
                freed += 1
            buf = self.buffers[slot]
            for i, start, n, off in bucket:
                buf[off : off + n].copy_(as_bytes(ctx.params[ctx.names[i]])[start : start + n])
            ctx.sync()
            ctx.send("b", slot, bucket)
        while freed < len(self.plan):
            ctx.recv("free")
            freed += 1
        ctx.send("end")
        ctx.recv("done")
        return {"buckets": len(self.plan), "bucket_bytes": self.buffers[0].numel()}

    def receiver_version(self, ctx: Context, version: int) -> None:
        while True:
            msg = ctx.recv()
            if msg[0] == "end":
                ctx.send("done")
                return
            _, slot, bucket = msg
            buf = self.buffers[slot]
            for i, start, n, off in bucket:
                as_bytes(ctx.params[ctx.names[i]])[start : start + n].copy_(buf[off : off + n])
            ctx.sync()
            ctx.send("free", slot)

    def sender_teardown(self, ctx: Context) -> None:
        self.buffers = []

    def receiver_teardown(self, ctx: Context) -> None:
        self.buffers = []
        if ctx.device.type == "cuda":
            torch.cuda.ipc_collect()


class SafetensorsFile(Method):
    """Save every parameter to one safetensors file (device -> host -> file), the receiver loads it
    (file -> host -> its device) and copies into its parameters. The file lives under
    options["tmpdir"] (default /tmp) and is removed before each save and at teardown; a file this
    size stays in the page cache, so this is the best case of a disk round trip."""

    name = "safetensors"
    slow = True

    def sender_setup(self, ctx: Context) -> None:
        tmpdir = ctx.options.get("tmpdir", "/tmp")
        self.path = os.path.join(tmpdir, f"wsync_sbs_{os.getpid()}.safetensors")

    def _remove(self) -> None:
        if os.path.exists(self.path):
            os.remove(self.path)

    def sender_version(self, ctx: Context, version: int) -> dict:
        from safetensors.torch import save_file

        self._remove()
        t0 = time.perf_counter()
        save_file({n: ctx.params[n] for n in ctx.names}, self.path)
        save_s = time.perf_counter() - t0
        ctx.send("file", self.path)
        _, load_s = ctx.recv("done")
        return {"save_seconds": save_s, "load_seconds": load_s}

    def receiver_version(self, ctx: Context, version: int) -> None:
        from safetensors.torch import load_file

        _, path = ctx.recv("file")
        t0 = time.perf_counter()
        loaded = load_file(path, device=str(ctx.device))
        for name, t in loaded.items():
            ctx.params[name].copy_(t)
        ctx.sync()
        del loaded
        ctx.send("done", time.perf_counter() - t0)

    def sender_teardown(self, ctx: Context) -> None:
        self._remove()
