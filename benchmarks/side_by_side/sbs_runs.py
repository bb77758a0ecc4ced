#!/usr/bin/env python3
"""Runs one of the C++ side-by-side programs and prints its result as side-by-side JSON lines.

  sbs_runs.py wsync --bin-dir DIR --memory host|device [--model generic|llama3-8b] [--gb G]
                    [--trainers T] [--rollouts R] [--layout L] ...
      mpirun -np T+R DIR/wsync-sync-bench (R replicas of TP 1: every rollout wants the whole
      model), LD_LIBRARY_PATH=DIR; one line, method "wsync", with its own reference (host:
      memcpy_gbps / ratio_to_memcpy, device: device_copy_gbps / ratio_to_device_copy).
  sbs_runs.py baselines --bin-dir DIR --gb G [--trainers T] [--rollouts R] ...
      mpirun -np T+R DIR/wsync-host-baselines: memcpy, gather_bcast_per_tensor, bucketed_bcast.
  sbs_runs.py ucx --gb G [--memcpy-from FILE] ...
      ucx_perftest -t ucp_put_bw between two processes on this host, 256 MiB puts totalling the
      model; ratio_to_memcpy against the last memcpy line of the same size in FILE.
A run that fails or times out prints {"failed": ...}; one that cannot run prints {"skipped": ...}.
Every line also goes to --out (appended).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import shutil
import socket
import subprocess
import sys
import time

MIB = 1 << 20


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def loadavg() -> str:
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return ""


def emit(a, obj: dict) -> None:
    obj = {"suite": a.suite, "sweep": a.sweep, **obj, "tag": a.tag, "host": platform.node(), "date": now()}
    line = json.dumps(obj)
    print(line, flush=True)
    if a.out:
        with open(a.out, "a") as f:
            f.write(line + "\n")


def run(cmd: list[str], timeout: float, env: dict | None = None, log: str = "") -> tuple[int, str]:
    """(exit status, stdout + stderr); 124 on a timeout."""
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=timeout, env=env)
        out, rc = p.stdout, p.returncode
    except subprocess.TimeoutExpired as e:
        out, rc = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or ""), 124
    if log:
        with open(log, "a") as f:
            f.write(f"# {now()} rc={rc} {' '.join(cmd)}\n{out}\n")
    return rc, out


def json_lines(text: str) -> list[dict]:
    out = []
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return out


def mpirun(a, nprocs: int) -> list[str]:
    return [a.mpirun, "--allow-run-as-root", "--oversubscribe", "--mca", "btl", "self,vader",
            "-np", str(nprocs)]


def device_memory_bytes() -> int | None:
    if not shutil.which("nvidia-smi"):
        return None
    rc, out = run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits",
                   "-i", "0"], 30)
    try:
        return int(out.split()[0]) * MIB if rc == 0 else None
    except (IndexError, ValueError):
        return None


def cmd_wsync(a) -> int:
    exe = os.path.join(a.bin_dir, "wsync-sync-bench")
    base = {"method": "wsync", "model": a.model, "memory": a.memory, "trainers": a.trainers,
            "rollouts": a.rollouts, "replicas": a.rollouts,
            "size_label": "scale1" if a.model == "llama3-8b" else f"{a.gb:g}GB"}
    if not os.access(exe, os.X_OK):
        emit(a, {**base, "skipped": f"no executable {exe}"})
        return 0
    bytes_arg = [] if a.model == "llama3-8b" else ["--bytes", str(int(a.gb * 1e9))]
    if a.memory == "device" and a.model == "generic":
        total = device_memory_bytes()
        need = 3 * a.gb * 1e9 + 4 * (1 << 30)
        if total is not None and need > total:
            emit(a, {**base, "skipped": f"wsync-sync-bench keeps the trainer's parameters and 2 "
                     f"rollout slots on the one GPU: ~{need / 1e9:.0f} GB > {total / 1e9:.0f} GB"})
            return 0
    cmd = mpirun(a, a.trainers + a.rollouts) + [
        exe, "--memory", a.memory, "--model", a.model, *bytes_arg, "--layout", a.layout,
        "--trainers", str(a.trainers), "--replicas", str(a.rollouts), "--iters", str(a.iters),
        "--warmup", str(a.warmup), *(["--no-baseline"] if a.memory == "host" else []),
        *(["--dtype", "bfloat16"] if a.memory == "device" else []), *a.extra]
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = a.bin_dir + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    load = loadavg()
    rc, out = run(cmd, a.timeout_s, env, a.log)
    lines = json_lines(out)
    if rc != 0 or not lines:
        emit(a, {**base, "failed": f"exit status {rc}", "command": " ".join(cmd),
                 "output_tail": out[-1500:]})
        return 0
    r = lines[-1]
    ref_key, ratio_key = (("memcpy_gbps", "ratio_to_memcpy") if a.memory == "host"
                          else ("device_copy_gbps", "ratio_to_device_copy"))
    emit(a, {**base, "bytes": r.get("bytes"), "bytes_delivered": r.get("bytes_delivered"),
             "tensors": r.get("tensors"), "layout": r.get("layout"), "dtype": r.get("dtype"),
             "seconds": r.get("wsync_seconds"), "seconds_min": r.get("wsync_seconds_min"),
             "seconds_max": r.get("wsync_seconds_max"), "gbps": r.get("wsync_gbps"),
             ref_key: r.get(ref_key), ratio_key: r.get(ratio_key), "verified": r.get("verified"),
             "broadcast_groups": r.get("broadcast_groups"), "write_ops": r.get("write_ops"),
             "iters": a.iters, "warmup": a.warmup, "loadavg_start": load,
             "loadavg_end": loadavg(), "command": " ".join(cmd), "raw": r})
    return 0


def cmd_baselines(a) -> int:
    exe = os.path.join(a.bin_dir, "wsync-host-baselines")
    base = {"model": "generic", "trainers": a.trainers, "rollouts": a.rollouts, "size_label": f"{a.gb:g}GB"}
    if not os.access(exe, os.X_OK):
        emit(a, {**base, "method": "host_baselines", "skipped": f"no executable {exe}"})
        return 0
    cmd = mpirun(a, a.trainers + a.rollouts) + [
        exe, "--bytes", str(int(a.gb * 1e9)), "--trainers", str(a.trainers), "--iters",
        str(a.iters), "--warmup", str(a.warmup), "--bucket-mb", str(a.bucket_mb)]
    load = loadavg()
    rc, out = run(cmd, a.timeout_s, None, a.log)
    lines = json_lines(out)
    for r in lines:
        r.pop("suite", None)
        r.pop("tag", None)
        emit(a, {**base, **r, "loadavg_start": load, "loadavg_end": loadavg(), "command": " ".join(cmd)})
    if rc != 0 or len(lines) < 3:
        emit(a, {**base, "method": "host_baselines", "failed": f"exit status {rc}",
                 "output_tail": out[-1500:]})
    return 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def last_memcpy(path: str, size_label: str) -> float | None:
    best = None
    if path and os.path.exists(path):
        with open(path) as f:
            for r in json_lines(f.read()):
                if r.get("method") == "memcpy" and r.get("size_label") == size_label and r.get("rollouts") == 1:
                    best = r.get("memcpy_gbps")
    return best


def cmd_ucx(a) -> int:
    label = f"{a.gb:g}GB"
    base = {"method": "ucx_perftest_put", "model": "generic", "trainers": 1, "rollouts": 1, "size_label": label}
    exe = shutil.which("ucx_perftest")
    if not exe:
        emit(a, {**base, "skipped": "no ucx_perftest (apt-get install ucx-utils)"})
        return 0
    nbytes = int(a.gb * 1e9)
    msg = min(nbytes, 256 * MIB)
    iters = max(1, math.ceil(nbytes / msg))
    port = str(free_port())
    server = subprocess.Popen([exe, "-p", port], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        time.sleep(1.0)
        rcs, outs = [], []
        for _ in range(a.iters):  # each ucx_perftest run reports the mean over its puts
            rc, out = run([exe, "127.0.0.1", "-p", port, "-t", "ucp_put_bw", "-s", str(msg), "-n",
                           str(iters), "-w", str(max(1, a.warmup))], a.timeout_s, None, a.log)
            rcs.append(rc)
            outs.append(out)
            if rc != 0:
                break
            server.wait(timeout=30)
            server = subprocess.Popen([exe, "-p", port], stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True)
            time.sleep(0.5)
    finally:
        server.kill()
        server.wait()
    rates = []
    for out in outs:
        for line in out.splitlines():
            if line.startswith("Final:"):
                # Final: iterations, overhead 50%/avg/overall (us), bandwidth avg/overall (MB/s, 2^20)
                rates.append(float(line.split()[6]) * MIB / 1e9)
    if not rates:
        emit(a, {**base, "failed": f"exit statuses {rcs}", "output_tail": outs[-1][-1500:] if outs else ""})
        return 0
    rates.sort()
    gbps = rates[len(rates) // 2]
    memcpy = a.memcpy_gbps or last_memcpy(a.memcpy_from, label)
    emit(a, {**base, "bytes": nbytes, "bytes_delivered": nbytes, "message_bytes": msg, "puts": iters,
             "seconds": nbytes / gbps / 1e9, "gbps": gbps, "gbps_runs": rates, "memcpy_gbps": memcpy,
             "ratio_to_memcpy": gbps / memcpy if memcpy else None, "loadavg_end": loadavg()})
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["wsync", "baselines", "ucx"])
    ap.add_argument("--bin-dir", default="build/benchmarks")
    ap.add_argument("--memory", default="host", choices=["host", "device"])
    ap.add_argument("--model", default="generic", choices=["generic", "llama3-8b"])
    ap.add_argument("--gb", type=float, default=1.0, help="generic model size, GB (1e9 bytes)")
    ap.add_argument("--trainers", type=int, default=1)
    ap.add_argument("--rollouts", type=int, default=1, help="rollout ranks = replicas of TP 1")
    ap.add_argument("--layout", default="match")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--bucket-mb", type=int, default=64)
    ap.add_argument("--memcpy-gbps", type=float, default=0.0)
    ap.add_argument("--memcpy-from", default="", help="ucx: a JSON-lines file with memcpy lines")
    ap.add_argument("--timeout-s", type=float, default=300.0)
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--suite", default="host_side_by_side")
    ap.add_argument("--tag", default="")
    ap.add_argument("--sweep", default="", help="free text copied into every line (main, sizes, ranks)")
    ap.add_argument("--out", default="")
    ap.add_argument("--log", default="", help="append the programs' output here")
    ap.add_argument("extra", nargs="*", help="after --: more wsync-sync-bench flags")
    a = ap.parse_args(argv)
    if a.what == "baselines" and a.model != "generic":
        ap.error("the host baselines use the generic model")
    return {"wsync": cmd_wsync, "baselines": cmd_baselines, "ucx": cmd_ucx}[a.what](a)


if __name__ == "__main__":
    sys.exit(main())
