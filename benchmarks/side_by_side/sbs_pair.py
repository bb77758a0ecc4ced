#!/usr/bin/env python3
"""Side by side: one model moved between the same two processes by several methods.

This process is the sender (it holds the new weights); it spawns the receiver, whose own
parameters must end up equal to the sender's. Both hold the model as one allocation per tensor
(the tensor lists of wsync-sync-bench: sbs_models.py), on --device. For each model size:
  * device_copy: torch copy_ of the model's bytes in the receiver (the reference of every ratio);
  * each method of --methods: setup (untimed), --warmup untimed versions, then --iters timed ones
    (--slow-iters for the slow ones), each timed from the sender's start to the receiver's "done"
    (its parameters written, its device synchronized); then one more version with fresh random
    weights, checked tensor by tensor against the sender (verified: true/false).
One JSON object per line on stdout (and appended to --out): a result, or {"skipped": why}, or
{"failed": why}. A failing method restarts the receiver and the benchmark goes on.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

import sbs_common as common  # noqa: E402
from sbs_common import Context, PeerError  # noqa: E402
from sbs_methods import IpcBucketed, IpcPerTensor, SafetensorsFile  # noqa: E402
from sbs_methods_ext import CheckpointEngine, Nixl  # noqa: E402
from sbs_models import model_tensors, numel  # noqa: E402

METHODS = {m.name: m for m in (IpcPerTensor, IpcBucketed, SafetensorsFile, Nixl, CheckpointEngine)}
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def make_context(conn, opt: dict) -> Context:
    device = torch.device(opt["device"])
    if device.type == "cuda":
        torch.cuda.set_device(device)
    return Context(conn, device, DTYPES[opt["dtype"]], opt["timeout_s"], options=opt)


def receiver_main(conn, opt: dict) -> None:
    """The receiver's loop: one message from the harness at a time, "error" on any failure."""
    ctx = make_context(conn, opt)
    method = None
    while True:
        msg = conn.recv()
        op = msg[0]
        try:
            if op == "exit":
                return
            if op == "alloc":
                common.allocate(ctx, msg[1])
                ctx.send("ok")
            elif op == "free":
                common.release(ctx)
                ctx.send("ok")
            elif op == "copy_ref":
                ctx.send("ok", common.copy_reference(ctx, msg[1]))
            elif op == "zero":
                for p in ctx.params.values():
                    p.zero_()
                ctx.sync()
                ctx.send("ok")
            elif op == "fingerprint":
                ctx.send("ok", common.fingerprint(ctx))
            elif op == "setup":
                method = METHODS[msg[1]]()
                method.receiver_setup(ctx)
                ctx.send("setup_ok")
            elif op == "version":
                ctx.send("ready")
                method.receiver_version(ctx, msg[1])
            elif op == "teardown":
                if method is not None:
                    method.receiver_teardown(ctx)
                method = None
                ctx.send("ok")
        except BaseException:  # noqa: BLE001  (reported to the sender, which restarts us)
            try:
                conn.send(("error", traceback.format_exc()))
            except Exception:  # noqa: BLE001
                return


class Pair:
    """The sender's side: the receiver process and this process's parameters."""

    def __init__(self, opt: dict):
        self.opt = opt
        self.mp = mp.get_context("spawn")
        self.ctx = make_context(None, opt)
        self.proc = None
        self.tensors: list = []
        self.start_receiver()

    def start_receiver(self) -> None:
        parent, child = self.mp.Pipe()
        self.proc = self.mp.Process(target=receiver_main, args=(child, self.opt), daemon=True)
        self.proc.start()
        self.ctx.conn = parent
        if self.tensors:
            self.request("alloc", self.tensors)

    def restart_receiver(self) -> None:
        self.proc.kill()
        self.proc.join(10)
        self.start_receiver()

    def request(self, *msg):
        self.ctx.send(*msg)
        return self.ctx.recv("ok")

    def allocate(self, tensors) -> None:
        self.tensors = tensors
        common.allocate(self.ctx, tensors)
        common.fill(self.ctx, 1)
        self.request("alloc", tensors)

    def release(self) -> None:
        self.tensors = []
        common.release(self.ctx)
        self.request("free")

    def close(self) -> None:
        try:
            self.ctx.send("exit")
        except Exception:  # noqa: BLE001
            pass
        self.proc.join(10)
        if self.proc.is_alive():
            self.proc.kill()

    def run_version(self, method, version: int) -> tuple[float, dict]:
        self.ctx.send("version", version)
        self.ctx.recv("ready")
        t0 = time.perf_counter()
        extra = method.sender_version(self.ctx, version)
        return time.perf_counter() - t0, extra

    def run_method(self, method, iters: int) -> dict:
        """Setup, warm-up, timed versions, the verified version, teardown."""
        ctx = self.ctx
        ctx.send("setup", method.name)
        method.sender_setup(ctx)
        ctx.recv("setup_ok")
        version = 0
        warm = []
        for _ in range(self.opt["warmup"]):
            warm.append(self.run_version(method, version)[0])
            version += 1
        if warm and max(warm) > self.opt["max_version_s"]:
            iters = 1  # too slow to repeat within the budget: one timed version
        samples, extras = [], []
        for _ in range(iters):
            s, extra = self.run_version(method, version)
            samples.append(s)
            extras.append(extra)
            version += 1
        common.fill(ctx, 1000 + version)
        method.sender_refilled(ctx)
        self.request("zero")
        self.run_version(method, version)
        _, theirs = self.request("fingerprint")
        verified = theirs == common.fingerprint(ctx)
        method.sender_teardown(ctx)
        self.request("teardown")
        out = {"warmup_seconds": warm, "samples": samples, "verified": verified}
        for key in sorted({k for e in extras for k in e}):
            values = [e[key] for e in extras if key in e]
            out[key] = common.median(values) if isinstance(values[0], float) else values[0]
        return out


def base_fields(opt: dict, model: str, tensors, label: str) -> dict:
    nbytes = sum(numel(s) for _, s in tensors) * torch.tensor([], dtype=DTYPES[opt["dtype"]]).element_size()
    device_name = torch.cuda.get_device_name() if opt["device"].startswith("cuda") else platform.processor()
    return {
        "suite": "side_by_side",
        "model": model,
        "size_label": label,
        "bytes": nbytes,
        "tensors": len(tensors),
        "dtype": opt["dtype"],
        "device": opt["device"],
        "device_name": device_name,
        "torch": torch.__version__,
        "host": platform.node(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "tag": opt["tag"],
        "sweep": opt["sweep"],
    }


def emit(opt: dict, obj: dict) -> None:
    line = json.dumps(obj)
    print(line, flush=True)
    if opt["out"]:
        with open(opt["out"], "a") as f:
            f.write(line + "\n")


def model_sizes(opt: dict) -> list[tuple[str, str, list]]:
    """(model, label, tensors) for every size asked for."""
    esz = torch.tensor([], dtype=DTYPES[opt["dtype"]]).element_size()
    if opt["model"] == "generic":
        return [("generic", f"{gb:g}GB", model_tensors("generic", 1.0, int(gb * 1e9), esz)) for gb in opt["sizes_gb"]]
    return [("llama3-8b", f"scale{s:g}", model_tensors("llama3-8b", s, 0, esz)) for s in opt["scales"]]


def fits(opt: dict, nbytes: int) -> str | None:
    """Why two copies of `nbytes` (sender + receiver) and the working buffers do not fit, or None."""
    if not opt["device"].startswith("cuda"):
        return None
    free, _ = torch.cuda.mem_get_info()
    need = 2 * nbytes + 4 * common.GIB
    return None if need <= free else f"needs ~{need / 1e9:.1f} GB of device memory, {free / 1e9:.1f} GB free"


def run_size(pair: Pair, opt: dict, model: str, label: str, tensors, deadline: float, too_slow: dict) -> None:
    base = base_fields(opt, model, tensors, label)
    why = fits(opt, base["bytes"])
    if why:
        emit(opt, {**base, "method": "all", "skipped": why})
        return
    pair.allocate(tensors)
    try:
        _, copy_gbps = pair.request("copy_ref", base["bytes"])
        emit(opt, {**base, "method": "device_copy", "seconds": base["bytes"] / copy_gbps / 1e9,
                   "gbps": copy_gbps, "device_copy_gbps": copy_gbps, "ratio_to_device_copy": 1.0})
        for name in opt["methods"]:
            method = METHODS[name]()
            why = method.unavailable(pair.ctx) or too_slow.get(name)
            if why is None and method.name == "safetensors" and base["bytes"] > opt["max_file_bytes"]:
                why = f"model larger than --max-file-gb {opt['max_file_bytes'] / 1e9:g}"
            if why is None and time.monotonic() > deadline:
                why = "out of the time budget (--budget-s)"
            if why:
                emit(opt, {**base, "method": name, "skipped": why})
                continue
            iters = opt["slow_iters"] if method.slow else opt["iters"]
            try:
                r = pair.run_method(method, iters)
            except Exception as e:  # noqa: BLE001  (recorded; the benchmark goes on)
                emit(opt, {**base, "method": name, "failed": f"{type(e).__name__}: {e}"[:2000]})
                traceback.print_exc()
                try:
                    method.sender_teardown(pair.ctx)
                except Exception:  # noqa: BLE001
                    pass
                pair.restart_receiver()
                continue
            sec = common.median(r["samples"])
            gbps = base["bytes"] / sec / 1e9
            emit(opt, {**base, "method": name, "seconds": sec, "seconds_min": min(r["samples"]),
                       "seconds_max": max(r["samples"]), "gbps": gbps, "device_copy_gbps": copy_gbps,
                       "ratio_to_device_copy": gbps / copy_gbps, "warmup": opt["warmup"],
                       "iters": len(r["samples"]), **r})
            if sec > opt["max_version_s"]:
                too_slow[name] = f"took {sec:.1f} s per version at a smaller size"
    finally:
        pair.release()


def parse_args(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda:0", help="cuda:N or cpu (cpu: to test the harness)")
    ap.add_argument("--model", default="llama3-8b", choices=["llama3-8b", "generic"])
    ap.add_argument("--scale", default="1", help="llama3-8b: comma list of layer scales (1 = 32 layers)")
    ap.add_argument("--sizes-gb", default="1", help="generic: comma list of model sizes in GB (1e9)")
    ap.add_argument("--dtype", default="bfloat16", choices=sorted(DTYPES))
    ap.add_argument("--methods", default="ipc_per_tensor,ipc_bucketed,safetensors,nixl,checkpoint_engine",
                    help="in this order; checkpoint_engine last: a failed receiver can leave it waiting")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--slow-iters", type=int, default=3, help="timed versions of safetensors, checkpoint_engine")
    ap.add_argument("--bucket-mb", type=int, default=512, help="ipc_bucketed bucket size (MiB)")
    ap.add_argument("--no-ipc-clone", action="store_true", help="ipc_per_tensor: share the live parameters")
    ap.add_argument("--tmpdir", default="/tmp", help="safetensors: where the file goes")
    ap.add_argument("--max-file-gb", type=float, default=20.0, help="safetensors: skip larger models")
    ap.add_argument("--max-version-s", type=float, default=20.0,
                    help="a method slower than this per version gets 1 timed version and is skipped at larger sizes")
    ap.add_argument("--timeout-s", type=float, default=180.0, help="longest wait for the other process")
    ap.add_argument("--budget-s", type=float, default=1e9, help="start no method after this many seconds")
    ap.add_argument("--tag", default="", help="free text copied into every line")
    ap.add_argument("--sweep", default="", help="free text copied into every line (main, sizes)")
    ap.add_argument("--out", default="", help="also append the JSON lines here")
    a = ap.parse_args(argv)
    unknown = [m for m in a.methods.split(",") if m and m not in METHODS]
    if unknown:
        ap.error(f"unknown methods {unknown}; known: {sorted(METHODS)}")
    return {
        "device": a.device, "model": a.model, "scales": [float(x) for x in a.scale.split(",")],
        "sizes_gb": [float(x) for x in a.sizes_gb.split(",")], "dtype": a.dtype,
        "methods": [m for m in a.methods.split(",") if m], "warmup": a.warmup, "iters": a.iters,
        "slow_iters": a.slow_iters, "bucket_mb": a.bucket_mb, "ipc_clone": not a.no_ipc_clone,
        "tmpdir": a.tmpdir, "max_file_bytes": a.max_file_gb * 1e9, "max_version_s": a.max_version_s,
        "timeout_s": a.timeout_s, "budget_s": a.budget_s, "tag": a.tag, "sweep": a.sweep, "out": a.out,
    }


def main(argv=None) -> int:
    opt = parse_args(argv)
    start = time.monotonic()
    if opt["device"].startswith("cuda") and not torch.cuda.is_available():
        emit(opt, {"suite": "side_by_side", "method": "all", "skipped": "no CUDA device", "tag": opt["tag"]})
        return 77
    pair = Pair(opt)
    too_slow: dict = {}
    try:
        for model, label, tensors in model_sizes(opt):
            run_size(pair, opt, model, label, tensors, start + opt["budget_s"], too_slow)
    finally:
        pair.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
