"""Shared pieces of the two-process side-by-side benchmark (sbs_pair.py).

A Context is one side of the pair: its connection to the other side, its parameters (one
allocation per tensor, in the model's order, like an nn.Module's) and its device. Messages are
tuples whose first item names them; a receiver that fails answers ("error", traceback).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

GIB = 1 << 30


class PeerError(RuntimeError):
    """The other process failed, answered something unexpected or did not answer in time."""


@dataclass
class Context:
    conn: object  # multiprocessing Connection to the peer
    device: torch.device
    dtype: torch.dtype
    timeout_s: float
    names: list[str] = field(default_factory=list)
    params: dict[str, torch.Tensor] = field(default_factory=dict)
    options: dict = field(default_factory=dict)

    def send(self, *msg) -> None:
        self.conn.send(msg)

    def recv(self, expect: str | None = None):
        """The next message; PeerError on a timeout, an error report or (with `expect`) another
        message name."""
        if not self.conn.poll(self.timeout_s):
            raise PeerError(f"no message from the peer in {self.timeout_s:.0f} s (wanted {expect})")
        msg = self.conn.recv()
        if msg[0] == "error":
            raise PeerError("peer failed:\n" + str(msg[1]))
        if expect is not None and msg[0] != expect:
            raise PeerError(f"wanted {expect!r} from the peer, got {msg[0]!r}")
        return msg

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def allocate(ctx: Context, tensors: list[tuple[str, tuple[int, ...]]]) -> None:
    """One allocation per tensor, zeroed."""
    ctx.params = {}
    ctx.names = [name for name, _ in tensors]
    for name, shape in tensors:
        ctx.params[name] = torch.zeros(shape, dtype=ctx.dtype, device=ctx.device)
    ctx.sync()


def release(ctx: Context) -> None:
    ctx.params = {}
    ctx.names = []
    if ctx.device.type == "cuda":
        torch.cuda.synchronize(ctx.device)
        torch.cuda.empty_cache()


def fill(ctx: Context, seed: int) -> None:
    """Random normal values from `seed` in every parameter."""
    gen = torch.Generator(device=ctx.device)
    gen.manual_seed(seed)
    for p in ctx.params.values():
        p.normal_(generator=gen)
    ctx.sync()


def as_bytes(t: torch.Tensor) -> torch.Tensor:
    """The bytes of a contiguous tensor, 1-D uint8 (a view)."""
    return t.reshape(-1).view(torch.uint8)


def fingerprint(ctx: Context) -> list[int]:
    """Per tensor: the sum of its 16-bit words and its first and last 8 words (chunked sums, so no
    temporary of more than 256 MiB)."""
    out = []
    chunk = 1 << 25
    for name in ctx.names:
        words = as_bytes(ctx.params[name]).view(torch.int16)
        total = torch.zeros((), dtype=torch.int64, device=ctx.device)
        for start in range(0, words.numel(), chunk):
            total += words[start : start + chunk].to(torch.int64).sum()
        ends = torch.cat([words[:8].to(torch.int64), words[-8:].to(torch.int64)])
        out.append(torch.cat([total.reshape(1), ends]))
    return torch.cat(out).cpu().tolist() if out else []


def copy_reference(ctx: Context, nbytes: int, repeats: int = 3) -> float:
    """GB/s (1e9 bytes/s) of torch copy_ of `nbytes` bytes on this side's device: two buffers of at
    most 1 GiB, copied repeatedly to total the bytes, best of `repeats` (bytes copied, not read +
    written)."""
    size = min(nbytes, GIB)
    src = torch.ones(size, dtype=torch.uint8, device=ctx.device)
    dst = torch.empty(size, dtype=torch.uint8, device=ctx.device)
    dst.copy_(src)
    ctx.sync()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        left = nbytes
        while left > 0:
            n = min(left, size)
            dst[:n].copy_(src[:n])
            left -= n
        ctx.sync()
        best = min(best, time.perf_counter() - t0)
    del src, dst
    if ctx.device.type == "cuda":
        torch.cuda.empty_cache()
    return nbytes / best / 1e9


def median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])
