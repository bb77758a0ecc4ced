"""GPU proof of the Python layer on one H200 (run through gpu_proof.sh; needs torch with CUDA,
transformers and a built libwsync.so with CUDA).

    python gpu_proof.py [--versions 8] [--layers 8] [--fsdp2] [--out DIR]

A random-init Qwen2 model (bf16, grouped-query attention: 16 query / 4 kv heads) is trained for
real (forward, backward, AdamW step) by 2 trainer processes: both run the same deterministic steps
and each registers only its dim-0 shard (torch.chunk rows) of every parameter, straight from the
parameter's memory; or, with --fsdp2, by ONE trainer process whose model is wrapped with FSDP2
(fully_shard per decoder layer and on the model, a one-rank mesh: NCCL refuses two ranks on one
GPU) and registered with register_module(model) from its DTensor placements. 2 rollout processes form one replica in vLLM's TP-2 layout (fused qkv_proj
with biases, fused gate_up_proj, row-parallel o/down, vocabulary padded to 32128) and receive by
copy flip. After every publish:
  * rollout rank 0 rebuilds the full model from both TP ranks' live tensors and its logits must
    equal the trainer's at that version bit for bit (bf16 everywhere: no conversion);
  * rollout rank 0 replays a CUDA graph captured ONCE (before the first version) over the live
    parameters (a computation reading every fused 2-D weight, with a static input); its output
    must equal the same computation run eagerly, and change with every version;
  * generation steps (graph replays on rank 0, eager steps on rank 1) keep running while each
    transfer runs: steps whose end falls between the trainers' publish and the version's
    readiness are counted.
The Python layer's time per publish and per flip is reported next to the C call's.
A transformers forward is not capturable as it is (it copies host tensors); the graph captures a
computation over the live parameters instead.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TP = 2
TRAINERS = 2  # without --fsdp2; with it, one FSDP2 process (NCCL needs a GPU per rank)


def config(a):
    from transformers import Qwen2Config

    return Qwen2Config(vocab_size=32010, hidden_size=a.hidden, intermediate_size=a.hidden * 11 // 4,
                       num_hidden_layers=a.layers, num_attention_heads=16, num_key_value_heads=4,
                       head_dim=a.hidden // 16, max_position_embeddings=512,
                       tie_word_embeddings=False, torch_dtype="bfloat16")


def device(a) -> str:
    return "cpu" if a.cpu else "cuda"


def build_model(cfg, seed: int, dev: str):
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.bfloat16,
                                             attn_implementation="eager")
    return model.to(dev)


def eval_batch(dev: str):
    import torch

    g = torch.Generator().manual_seed(4321)
    return torch.randint(0, 32010, (2, 64), generator=g).to(dev)


def write_atomic(path: Path, save) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    save(tmp)
    os.replace(tmp, path)


def wait_file(path: Path, timeout_s: float = 120) -> None:
    deadline = time.time() + timeout_s
    while not path.exists():
        if time.time() > deadline:
            raise TimeoutError(f"{path} did not appear")
        time.sleep(0.002)


# ---- trainer ------------------------------------------------------------------------------------
def trainers(a) -> int:
    return 1 if a.fsdp2 else TRAINERS


def local(p):
    """A parameter's local tensor (a DTensor's shard under FSDP2)."""
    return p.to_local() if hasattr(p, "to_local") else p


def fsdp2_wrap(model, a, dev: str) -> None:
    """fully_shard over a one-rank mesh (each decoder layer, then the model)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    dist.init_process_group("gloo" if a.cpu else "nccl", rank=0, world_size=1,
                            init_method=f"file://{Path(a.shared) / 'trainer_pg'}")
    mesh = init_device_mesh("cpu" if a.cpu else "cuda", (1,))
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)


def trainer(a) -> None:
    import torch
    import wsync
    from wsync import layout

    # Both trainers must compute the same bits (each publishes half of every tensor); the
    # checksums compared after every step prove it.
    torch.use_deterministic_algorithms(True, warn_only=True)
    cfg, dev = config(a), device(a)
    model = build_model(cfg, seed=0, dev=dev)
    model.train()
    t = wsync.Trainer(wsync.Bootstrap.explicit(a.rank, trainers(a), TP, a.address, a.secret),
                      snapshot=True, cuda_device=None if a.cpu else 0)
    if a.fsdp2:  # FSDP2 on a 1-rank mesh: parameters are DTensors; wsync reads their placements
        fsdp2_wrap(model, a, dev)
        t.register_module(model)
    else:  # each process registers the torch.chunk dim-0 shard of every parameter (views)
        shards, specs = {}, {}
        for name, p in model.named_parameters():
            lo, hi = layout.chunk_range(p.shape[0], a.rank, TRAINERS)
            shards[name] = p.data.narrow(0, lo, hi - lo)
            specs[name] = layout.chunk_shard(name, tuple(p.shape), 0, a.rank, TRAINERS)
        t.register_tensors(shards, specs=specs)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    info = t.commit()
    shared, batch = Path(a.shared), eval_batch(dev)
    for v in range(1, a.versions + 1):
        if v > 1:
            wait_file(shared / f"ack_v{v - 1}")
        g = torch.Generator().manual_seed(7)  # the same batch each step: the loss must fall
        tokens = torch.randint(0, cfg.vocab_size, (4, 128), generator=g).to(dev)
        loss = model(input_ids=tokens, labels=tokens).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        t_pub = time.time()
        request = t.publish(v)  # current stream, snapshot: returns without a device sync
        request.wait()
        t_ready = time.time()
        with torch.no_grad():
            checksum = float(sum(local(p).double().sum() for p in model.parameters()))
            if a.rank == 0:
                model.eval()
                logits = model(input_ids=batch).logits.cpu()
                model.train()
                write_atomic(shared / f"logits_v{v}.pt", lambda p: torch.save(logits, p))
        record = {"loss": float(loss), "checksum": checksum, "t_publish": t_pub,
                  "t_ready": t_ready, "publish_python_us": t.publish_python_s[-1] * 1e6,
                  "publish_c_us": t.publish_c_s[-1] * 1e6,
                  "bytes_per_version": info.bytes_per_version, "write_ops": info.write_ops}
        write_atomic(shared / f"trainer{a.rank}_v{v}.json",
                     lambda p: p.write_text(json.dumps(record)))
    t.close()


# ---- rollout ------------------------------------------------------------------------------------
def graph_computation(tensors, x):
    """Reads every fused 2-D weight whose input dim is the hidden size: x @ W^T, reduced."""
    import torch

    outs = [(x @ w.t()).float().sum(dim=0) for name, w in sorted(tensors.items())
            if w.dim() == 2 and w.shape[1] == x.shape[1]]
    return torch.cat(outs)


def rollout(a) -> None:
    import torch
    import torch.distributed as dist
    import wsync
    from wsync import models

    dist.init_process_group("gloo", rank=a.rank, world_size=TP,
                            init_method=f"tcp://127.0.0.1:{a.dist_port}")
    cfg, dev = config(a), device(a)
    local = models.llama_tp_layout(cfg, a.rank, TP)
    tensors = {n: torch.zeros(t.shape, dtype=torch.bfloat16, device=dev)
               for n, t in local.items()}
    r = wsync.Rollout(wsync.Bootstrap.explicit(a.rank, trainers(a), TP, a.address, a.secret),
                      replica=0, cuda_device=None if a.cpu else 0)
    r.register_module(tensors, specs=models.specs_of(local), mode="copy_flip")
    r.commit()
    shared = Path(a.shared)
    x = torch.randn(16, cfg.hidden_size, dtype=torch.bfloat16, device=dev)
    graph, static_out = None, None
    if a.rank == 0 and not a.cpu:  # capture once, over the live parameters, before any version
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                graph_computation(tensors, x)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = graph_computation(tensors, x)
    if a.rank == 0:
        checker = build_model(cfg, seed=1, dev=dev)
        checker.eval()
        layouts = [models.llama_tp_layout(cfg, k, TP) for k in range(TP)]
        batch = eval_batch(dev)
    steps, results, current, previous_graph = [], [], 0, None
    while current < a.versions:
        newest = torch.tensor([r.newest_version() or 0])
        dist.all_reduce(newest, op=dist.ReduceOp.MIN)  # both TP ranks flip the same version
        target = int(newest)
        if target <= current:
            if graph is not None:
                graph.replay()
            else:
                graph_computation(tensors, x)
            if not a.cpu:
                torch.cuda.synchronize()
            steps.append(time.time())
            continue
        t_seen = time.time()
        flipped = r.flip(target)
        assert flipped == target, (flipped, target)
        current = target
        flip = {"version": target, "t_seen": t_seen, "flip_python_us": r.flip_python_s[-1] * 1e6,
                "flip_c_us": r.flip_c_s[-1] * 1e6}
        gathered = {}
        for name in sorted(tensors):  # rank 0 collects both ranks' live bytes
            cpu = tensors[name].cpu()
            parts = [torch.empty_like(cpu) for _ in range(TP)] if a.rank == 0 else None
            dist.gather(cpu, parts, dst=0)
            gathered[name] = parts
        if a.rank == 0:
            flip.update(verify(target, gathered, layouts, checker, batch, shared, tensors, x,
                               graph, static_out, previous_graph, trainers(a)))
            previous_graph = static_out.clone() if static_out is not None else None
            write_atomic(shared / f"ack_v{target}", lambda p: p.write_text("ok"))
        results.append(flip)
    write_atomic(shared / f"rollout{a.rank}.json",
                 lambda p: p.write_text(json.dumps({"flips": results, "steps": steps})))
    r.close()
    dist.destroy_process_group()


def verify(v, gathered, layouts, checker, batch, shared, tensors, x, graph, static_out,
           previous_graph, num_trainers) -> dict:
    """Rebuilds the HF model from the TP ranks' bytes, compares logits, replays the graph."""
    import torch

    params = dict(checker.named_parameters())
    with torch.no_grad():
        for name, parts in gathered.items():
            for k, part in enumerate(parts):
                for b in layouts[k][name].boxes:  # scatter each box back into its HF tensor
                    src = part[tuple(slice(s, s + e) for s, e in zip(b.local_start, b.extent))]
                    dst = params[b.tensor].data
                    dst[tuple(slice(o, o + e) for o, e in zip(b.offset, b.extent))] = \
                        src.to(dst.device)
        logits = checker(input_ids=batch).logits.cpu()
    wait_file(shared / f"logits_v{v}.pt")
    want = torch.load(shared / f"logits_v{v}.pt")
    records = []
    for k in range(num_trainers):  # each trainer writes its record after its own publish completed
        wait_file(shared / f"trainer{k}_v{v}.json")
        records.append(json.loads((shared / f"trainer{k}_v{v}.json").read_text()))
    result = {"logits_equal": bool(torch.equal(logits, want)),
              "max_abs_diff": float((logits.float() - want.float()).abs().max()),
              "trainers_identical": all(r["checksum"] == records[0]["checksum"] for r in records),
              "graph_equal_eager": None, "graph_changed": None}
    if graph is not None:  # --cpu smoke runs have no graph
        graph.replay()
        torch.cuda.synchronize()
        eager = graph_computation(tensors, x)
        result["graph_equal_eager"] = bool(torch.equal(static_out, eager))
        result["graph_changed"] = previous_graph is None or not torch.equal(previous_graph,
                                                                             static_out)
    return result


# ---- launcher -----------------------------------------------------------------------------------
def launch(a) -> int:
    import socket
    import tempfile

    import wsync

    out = Path(a.out or tempfile.mkdtemp(prefix="wsync_gpu_proof_"))
    shared = out / "exchange"
    shared.mkdir(parents=True, exist_ok=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dist_port = s.getsockname()[1]
    env = dict(os.environ, CUBLAS_WORKSPACE_CONFIG=":4096:8", OMP_NUM_THREADS="2")
    t_start = time.time()
    with wsync.Coordinator(trainers=trainers(a), rollouts=TP, timeout_ms=120000, quiet=False) as c:
        common = ["--address", c.address, "--secret", c.secret, "--shared", str(shared),
                  "--versions", str(a.versions), "--layers", str(a.layers),
                  "--hidden", str(a.hidden), "--dist-port", str(dist_port)]
        common += ["--cpu"] if a.cpu else []
        common += ["--fsdp2"] if a.fsdp2 else []
        procs = []
        for role, n in (("trainer", trainers(a)), ("rollout", TP)):
            for rank in range(n):
                log = open(out / f"{role}{rank}.log", "w")
                procs.append((f"{role}{rank}", subprocess.Popen(
                    [sys.executable, __file__, "--role", role, "--rank", str(rank)] + common,
                    stdout=log, stderr=subprocess.STDOUT, env=env), log))
        failed = []
        for name, p, log in procs:
            try:
                rc = p.wait(timeout=280)
            except subprocess.TimeoutExpired:
                p.kill()
                rc = "timeout"
            log.close()
            if rc != 0:
                failed.append(name)
        for name in failed:
            print(f"--- {name} failed:\n" + (out / f"{name}.log").read_text()[-4000:])
        if failed:
            print("--- coordinator:\n" + c.stderr[-2000:])
            return 1
    return report(shared, a.versions, time.time() - t_start, a.fsdp2)


def report(shared: Path, versions: int, wall_s: float, fsdp2: bool) -> int:
    r0 = json.loads((shared / "rollout0.json").read_text())
    r1 = json.loads((shared / "rollout1.json").read_text())
    trainers = [[json.loads((shared / f"trainer{k}_v{v}.json").read_text())
                 for v in range(1, versions + 1)] for k in range(1 if fsdp2 else TRAINERS)]
    steps = sorted(r0["steps"] + r1["steps"])
    ok = True
    who = "1 FSDP2 trainer (fully_shard, DTensor placements)" if fsdp2 else \
        f"{TRAINERS} trainers (dim-0 shards)"
    print(f"wsync GPU proof: Qwen2 bf16 GQA, {who} -> 1 replica TP "
          f"{TP} (fused qkv/gate_up, copy flip); {trainers[0][0]['bytes_per_version'] / 1e6:.1f} "
          f"MB per version")
    print("version  loss    logits==trainer  trainers_same  graph==eager  graph_changed  "
          "steps_during_transfer  publish_py_us  publish_c_us  flip_py_us  flip_c_us")
    for f in r0["flips"]:
        v = f["version"]
        t = [tr[v - 1] for tr in trainers]
        start, end = min(x["t_publish"] for x in t), f["t_seen"]
        during = sum(1 for s in steps if start <= s <= end)
        flip1 = next(x for x in r1["flips"] if x["version"] == v)
        good = f["logits_equal"] and f["trainers_identical"] and \
            f["graph_equal_eager"] is not False and f["graph_changed"] is not False
        ok = ok and good
        print(f"{v:7d}  {t[0]['loss']:.4f}  {str(f['logits_equal']):15s}  "
              f"{str(f['trainers_identical']):13s}  {str(f['graph_equal_eager']):12s}  "
              f"{str(f['graph_changed']):13s}  {during:21d}  "
              f"{max(x['publish_python_us'] for x in t):13.1f}  "
              f"{max(x['publish_c_us'] for x in t):12.1f}  "
              f"{max(f['flip_python_us'], flip1['flip_python_us']):10.1f}  "
              f"{max(f['flip_c_us'], flip1['flip_c_us']):9.1f}")
    seen = [f["version"] for f in r0["flips"]]
    ok = ok and seen and seen[-1] == versions
    losses = [trainers[0][v]["loss"] for v in range(versions)]
    ok = ok and losses[-1] < losses[0]
    print(f"generation steps in all: {len(steps)}; versions flipped: {seen}; wall {wall_s:.1f} s")
    print("RESULT: " + ("PASS" if ok else "FAIL"))
    return 0 if ok else 1


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--role", default="launch", choices=["launch", "trainer", "rollout"])
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--address", default="")
    p.add_argument("--secret", default="")
    p.add_argument("--shared", default="")
    p.add_argument("--dist-port", type=int, default=0)
    p.add_argument("--versions", type=int, default=8)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--cpu", action="store_true",
                   help="a smoke run of the same flow on host memory (no CUDA graph)")
    p.add_argument("--fsdp2", action="store_true",
                   help="one trainer process wrapped with FSDP2 fully_shard (register_module)")
    p.add_argument("--out", default="")
    a = p.parse_args()
    if a.role == "trainer":
        trainer(a)
        return 0
    if a.role == "rollout":
        rollout(a)
        return 0
    return launch(a)


if __name__ == "__main__":
    sys.exit(main())
