"""An RL-style loop on the wsync Python package: trainers update a policy every step and publish
it; a rollout replica generates continuously and picks up each new version at a batch boundary.

    python rollout_integration/python/rl_loop.py [--steps 20] [--trainers 2] [--tp 2] [--cpu]

One process per rank, started here against a standalone wsync-coordinator (wsync.Coordinator):
`--trainers` trainer processes each hold a dim-0 shard (torch.chunk rows) of every parameter of a
small MLP policy and take a real optimizer step on it (the same data on every trainer, so the
shards fit together); `--tp` rollout processes form one replica that splits every weight matrix
along its input dimension (row-parallel TP, a layout unlike the trainers') and every vector along
its only one, receive by copy flip and run forward passes the whole time. Each rollout batch reports the version it was generated with; after the
last step every rollout rank checks its live parameters against the trainers' final policy. GPU
memory when CUDA is available (all processes on GPU 0), host memory otherwise or with --cpu.
Prints one JSON line at the end: versions, batches generated while versions streamed, and
whether every rollout rank matched.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HIDDEN, LAYERS = 512, 4


def names_and_shapes():
    """The policy's parameters in order: an MLP of LAYERS square layers and a head."""
    out = []
    for i in range(LAYERS):
        out += [(f"layers.{i}.weight", (HIDDEN, HIDDEN)), (f"layers.{i}.bias", (HIDDEN,))]
    return out + [("head.weight", (16, HIDDEN))]


def policy(dev: str):
    import torch

    torch.manual_seed(0)
    layers = [torch.nn.Linear(HIDDEN, HIDDEN) for _ in range(LAYERS)]
    model = torch.nn.Module()
    model.layers = torch.nn.ModuleList(layers)
    model.head = torch.nn.Linear(HIDDEN, 16, bias=False)
    return model.to(dev)


def forward(params, x):
    import torch

    for i in range(LAYERS):
        x = torch.relu(x @ params[f"layers.{i}.weight"].t() + params[f"layers.{i}.bias"])
    return x @ params["head.weight"].t()


def trainer(a) -> None:
    import torch
    import wsync
    from wsync import layout

    dev = "cpu" if a.cpu else "cuda"
    model = policy(dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    shards, specs = {}, {}
    for name, p in model.named_parameters():
        lo, hi = layout.chunk_range(p.shape[0], a.rank, a.trainers)
        shards[name] = p.data.narrow(0, lo, hi - lo)  # views: the parameters' own memory
        specs[name] = layout.chunk_shard(name, tuple(p.shape), 0, a.rank, a.trainers)
    t = wsync.Trainer(wsync.Bootstrap.explicit(a.rank, a.trainers, a.tp, a.address, a.secret),
                      snapshot=True, cuda_device=None if a.cpu else 0)
    t.register_tensors(shards, specs=specs)
    t.commit()
    g = torch.Generator().manual_seed(1)
    for step in range(1, a.steps + 1):
        x = torch.randn(64, HIDDEN, generator=g).to(dev)
        loss = forward(dict(model.named_parameters()), x).pow(2).mean()  # a stand-in objective
        opt.zero_grad()
        loss.backward()
        opt.step()
        t.publish(step).wait()  # snapshot mode: the next step may change the parameters at once
        time.sleep(a.step_pause)
    if a.rank == 0:
        tmp = Path(a.shared) / "final.pt.tmp"  # written whole, then renamed: readers poll
        torch.save({n: p.detach().cpu() for n, p in model.named_parameters()}, tmp)
        os.replace(tmp, Path(a.shared) / "final.pt")
    t.close()


def rollout(a) -> None:
    import torch
    import wsync
    from wsync import layout

    dev = "cpu" if a.cpu else "cuda"
    live, specs = {}, {}
    for name, shape in names_and_shapes():  # split along the last dim over the TP ranks
        dim = len(shape) - 1
        lo, hi = layout.chunk_range(shape[dim], a.rank, a.tp)
        live[name] = torch.zeros(shape[:dim] + (hi - lo,), device=dev)
        specs[name] = layout.chunk_shard(name, shape, dim, a.rank, a.tp)
    r = wsync.Rollout(wsync.Bootstrap.explicit(a.rank, a.trainers, a.tp, a.address, a.secret),
                      replica=0, cuda_device=None if a.cpu else 0)
    r.register_module(live, specs=specs, mode="copy_flip")
    r.commit()
    batches, versions_seen = 0, []
    x = torch.randn(8, live["layers.0.weight"].shape[1], device=dev)
    while not versions_seen or versions_seen[-1] < a.steps:
        with r.batch() as version:  # a safe point: flip to the newest ready version, if any
            if version is not None and (not versions_seen or versions_seen[-1] != version):
                versions_seen.append(version)
            # A "generation step" on this rank's shard (row-parallel partial products).
            _ = live["layers.0.weight"] @ x.t()
            batches += 1
        time.sleep(0.001)
    final = Path(a.shared) / "final.pt"
    deadline = time.time() + 60
    while not final.exists() and time.time() < deadline:
        time.sleep(0.01)
    want = torch.load(final)
    equal = all(torch.equal(live[n].cpu(), want[n].narrow(want[n].dim() - 1, *span(want[n], a)))
                for n in live)
    (Path(a.shared) / f"rollout{a.rank}.json").write_text(json.dumps(
        {"batches": batches, "versions_seen": versions_seen, "equal": equal}))
    r.close()


def span(full, a):
    """This rollout rank's (start, length) along the full tensor's last dim."""
    from wsync import layout

    lo, hi = layout.chunk_range(full.shape[-1], a.rank, a.tp)
    return lo, hi - lo


def launch(a) -> int:
    import wsync

    shared = Path(tempfile.mkdtemp(prefix="wsync_rl_loop_"))
    with wsync.Coordinator(trainers=a.trainers, rollouts=a.tp) as c:
        common = ["--address", c.address, "--secret", c.secret, "--shared", str(shared),
                  "--steps", str(a.steps), "--trainers", str(a.trainers), "--tp", str(a.tp),
                  "--step-pause", str(a.step_pause)] + (["--cpu"] if a.cpu else [])
        procs = [subprocess.Popen([sys.executable, __file__, "--role", role, "--rank", str(k)]
                                  + common)
                 for role, n in (("trainer", a.trainers), ("rollout", a.tp)) for k in range(n)]
        codes = [p.wait(timeout=300) for p in procs]
    if any(codes):
        print(json.dumps({"ok": False, "exit_codes": codes}))
        return 1
    ranks = [json.loads((shared / f"rollout{k}.json").read_text()) for k in range(a.tp)]
    ok = all(r["equal"] and r["versions_seen"][-1] == a.steps for r in ranks)
    print(json.dumps({"ok": ok, "memory": "host" if a.cpu else "device", "steps": a.steps,
                      "trainers": a.trainers, "rollout_tp": a.tp,
                      "batches_per_rank": [r["batches"] for r in ranks],
                      "versions_seen_rank0": ranks[0]["versions_seen"],
                      "rollout_equals_trainer": [r["equal"] for r in ranks]}))
    return 0 if ok else 1


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--role", default="launch", choices=["launch", "trainer", "rollout"])
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--address", default="")
    p.add_argument("--secret", default="")
    p.add_argument("--shared", default="")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--trainers", type=int, default=2)
    p.add_argument("--tp", type=int, default=2)
    p.add_argument("--step-pause", type=float, default=0.02, help="seconds between train steps")
    p.add_argument("--cpu", action="store_true", help="host memory even when CUDA is available")
    a = p.parse_args()
    if not a.cpu:
        import torch

        a.cpu = not torch.cuda.is_available()
    if a.role == "trainer":
        trainer(a)
    elif a.role == "rollout":
        rollout(a)
    else:
        return launch(a)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
