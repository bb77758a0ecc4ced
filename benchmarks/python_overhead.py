#!/usr/bin/env python3
"""The Python layer's cost per publish and per flip, next to the C API call it wraps.

A trainer and a rollout process (explicit bootstrap, a standalone wsync-coordinator, host memory)
sync a model of `--tensors` float32 tensors of `--numel` elements each. The trainer times every
Trainer.publish (its total, and the wsync_publish call inside it); the rollout times every
Rollout.flip (total, and the wsync_copy_flip call inside it). The Python layer's cost is the
total minus the C call. Also timed: one trivial C call through ctypes (wsync_newest_version), the
floor of any binding. Prints one JSON line per measurement (microseconds; median, p90, mean).

    PYTHONPATH=python WSYNC_LIBRARY=build/src/capi/libwsync.so \\
        python benchmarks/python_overhead.py [--versions 200] [--tensors 8 200] [--numel 65536]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time


def summary(what: str, seconds: list, **extra) -> dict:
    us = sorted(s * 1e6 for s in seconds)
    return dict(what=what, n=len(us), median_us=round(statistics.median(us), 2),
                p90_us=round(us[int(0.9 * (len(us) - 1))], 2),
                mean_us=round(statistics.fmean(us), 2), **extra)


def model(tensors: int, numel: int, fill: float):
    import torch

    return {f"layers.{i}.weight": torch.full((numel // 256, 256), fill + i) for i in range(tensors)}


def trainer(args) -> list:
    import wsync

    tensors = model(args.tensors, args.numel, 0.0)
    t = wsync.Trainer(wsync.Bootstrap.explicit(0, 1, 1, args.address, args.secret),
                      timeout_ms=120000)
    t.register_tensors(tensors)
    t.commit()
    totals = []
    for v in range(1, args.versions + 1):
        for x in tensors.values():
            x.add_(1.0)
        t0 = time.perf_counter()
        request = t.publish(v)
        totals.append(time.perf_counter() - t0)
        request.wait()  # one version at a time: every flip sees each version
    skip = min(5, len(totals) // 10)  # the first publishes touch fresh staging
    out = [summary("publish_total", totals[skip:]),
           summary("publish_c_call", t.publish_c_s[skip:]),
           summary("publish_python", t.publish_python_s[skip:])]
    t.close()
    return out


def rollout(args) -> list:
    import wsync

    tensors = model(args.tensors, args.numel, -1.0)
    r = wsync.Rollout(wsync.Bootstrap.explicit(0, 1, 1, args.address, args.secret),
                      timeout_ms=120000)
    r.register_module(tensors, mode="copy_flip")
    r.commit()
    totals, version = [], 0
    while version < args.versions:
        r.wait_for_version(version, timeout_ms=120000)
        t0 = time.perf_counter()
        version = r.flip()
        totals.append(time.perf_counter() - t0)
    first = next(iter(tensors.values()))
    assert float(first[0, 0]) == float(version), "the flip did not bring the last version"
    ctx, calls = r.ctx, []
    for _ in range(2000):
        t0 = time.perf_counter()
        ctx.newest_version()
        calls.append(time.perf_counter() - t0)
    skip = min(5, len(totals) // 10)
    out = [summary("flip_total", totals[skip:]), summary("flip_c_call", r.flip_c_s[skip:]),
           summary("flip_python", r.flip_python_s[skip:]),
           summary("ctypes_trivial_call", calls[100:])]
    r.close()
    return out


def run_pair(script: str, tensors: int, args) -> None:
    import wsync

    with wsync.Coordinator(trainers=1, rollouts=1, timeout_ms=120000) as c:
        common = ["--address", c.address, "--secret", c.secret, "--versions",
                  str(args.versions), "--numel", str(args.numel), "--tensors", str(tensors)]
        procs = [subprocess.Popen([sys.executable, script, "--role", role] + common,
                                  stdout=subprocess.PIPE, text=True)
                 for role in ("trainer", "rollout")]
        outs = [p.communicate(timeout=600)[0] for p in procs]
        if any(p.returncode for p in procs):
            raise SystemExit(f"a worker failed: {[p.returncode for p in procs]}")
    for text in outs:
        for line in text.splitlines():
            row = json.loads(line)
            row.update(tensors=tensors, numel_per_tensor=args.numel,
                       bytes=tensors * args.numel * 4, memory="host")
            print(json.dumps(row), flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--role", choices=("trainer", "rollout"))
    p.add_argument("--address")
    p.add_argument("--secret")
    p.add_argument("--versions", type=int, default=200)
    p.add_argument("--tensors", type=int, nargs="+", default=[8, 200])
    p.add_argument("--numel", type=int, default=65536)
    args = p.parse_args()
    if args.role:
        args.tensors = args.tensors[0]
        for row in (trainer if args.role == "trainer" else rollout)(args):
            print(json.dumps(dict(row, role=args.role)), flush=True)
        return
    for tensors in args.tensors:
        run_pair(sys.argv[0], tensors, args)


if __name__ == "__main__":
    main()
