#!/usr/bin/env python3
"""How many bf16 elements of a policy change per RL-like training step (issue 22, "measure first").

Trains a Hugging Face transformers model (Qwen2 architecture, random init, a few hundred million
parameters) with AdamW at RL-like learning rates, in two precisions:
  bf16    the parameters themselves are bf16 (the optimizer updates bf16 weights);
  fp32    fp32 master weights, cast to bf16 at each publish (FSDP2 mixed precision's param dtype).
After every step it takes the bf16 view a rollout would receive and counts, per tensor kind
(attention, mlp, embedding, norm), the share of elements that differ from the previous step's and
from the one two steps back. It also prices delta encodings of that change per chunk of
``--chunk-bytes`` (a bitmap + changed values, an index list + changed values, or the dense chunk,
whichever is smallest per chunk), as a share of the dense bytes, which is what decides the wire
encoding.

The loss is next-token cross-entropy on sequences drawn from a fixed random Markov chain over the
vocabulary, weighted per sequence by a random advantage in [-1, 1] (a REINFORCE-shaped objective:
the gradient has RL's sign noise; AdamW normalises its size, so the share depends mostly on the
learning rate and the weights' magnitudes).

Usage (GPU when present, else CPU with a small model):
  python3 benchmarks/delta/changed_share.py --steps 60 --lrs 1e-6,3e-6,1e-5 --out results.json
Prints one summary line per (precision, lr) and writes every per-step number to --out.
"""
from __future__ import annotations

import argparse
import json
import math
import time
from collections import defaultdict

import torch


def kind_of(name: str) -> str:
    if "embed" in name or "lm_head" in name:
        return "embedding"
    if "norm" in name:
        return "norm"
    if "self_attn" in name:
        return "attention"
    if "mlp" in name:
        return "mlp"
    return "other"


def encoded_bytes(changed: torch.Tensor, elem_bytes: int, chunk_bytes: int) -> tuple[int, int, int, int]:
    """Bytes of (dense, bitmap, index-list, best-per-chunk) encodings of a flat change mask.

    bitmap chunk: one bit per element + the changed values; index chunk: a 2-byte in-chunk index
    (chunks of <= 65536 elements) + value per changed element; every chunk also pays a 4-byte
    header (kind and count)."""
    per_chunk = max(1, chunk_bytes // elem_bytes)
    n = changed.numel()
    pad = (-n) % per_chunk
    mask = torch.nn.functional.pad(changed.to(torch.int32), (0, pad)).view(-1, per_chunk)
    counts = mask.sum(dim=1).to(torch.int64)
    chunk_elems = torch.full_like(counts, per_chunk)
    if pad:
        chunk_elems[-1] = per_chunk - pad
    dense = chunk_elems * elem_bytes
    bitmap = (chunk_elems + 7) // 8 + counts * elem_bytes
    index = counts * (2 + elem_bytes)
    header = 4
    best = torch.minimum(torch.minimum(dense, bitmap), index) + header
    # an unchanged chunk costs only its header in every encoding
    best = torch.where(counts == 0, torch.full_like(best, header), best)
    return (int(dense.sum()), int((bitmap + header).sum()), int((index + header).sum()),
            int(best.sum()))


def make_model(args, device):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(vocab_size=args.vocab, hidden_size=args.hidden,
                      intermediate_size=args.ffn, num_hidden_layers=args.layers,
                      num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
                      max_position_embeddings=args.seq, tie_word_embeddings=False)
    torch.manual_seed(args.seed)
    model = Qwen2ForCausalLM(cfg).to(device)
    return model


def markov_batch(gen: torch.Generator, table: torch.Tensor, batch: int, seq: int, device):
    vocab, fan = table.shape
    tokens = torch.empty(batch, seq, dtype=torch.long)
    tokens[:, 0] = torch.randint(0, vocab, (batch,), generator=gen)
    for t in range(1, seq):
        choice = torch.randint(0, fan, (batch,), generator=gen)
        tokens[:, t] = table[tokens[:, t - 1], choice]
    adv = torch.rand(batch, generator=gen) * 2 - 1
    return tokens.to(device), adv.to(device)


def run(args, precision: str, lr: float, device) -> dict:
    model = make_model(args, device)
    if precision == "bf16":
        model = model.to(torch.bfloat16)
    params = {n: p for n, p in model.named_parameters()}
    total_params = sum(p.numel() for p in params.values())
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.999), weight_decay=0.0,
                            eps=1e-8)
    gen = torch.Generator().manual_seed(args.seed + 1)
    table = torch.randint(0, args.vocab, (args.vocab, 4), generator=gen)

    def snapshot():
        return {n: p.detach().to(torch.bfloat16).clone() for n, p in params.items()}

    history = [snapshot()]
    steps = []
    t0 = time.time()
    for step in range(1, args.steps + 1):
        tokens, adv = markov_batch(gen, table, args.batch, args.seq, device)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16,
                            enabled=(precision == "fp32" and device.type == "cuda")):
            logits = model(input_ids=tokens).logits[:, :-1].float()
        nll = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                tokens[:, 1:].reshape(-1), reduction="none")
        loss = (nll.view(args.batch, -1).mean(dim=1) * adv).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        cur = snapshot()
        row = {"step": step, "loss": float(loss.detach())}
        for back, key in ((1, "prev"), (2, "prev2")):
            if len(history) < back:
                continue
            base = history[-back]
            by_kind = defaultdict(lambda: [0, 0])
            enc = [0, 0, 0, 0]
            for n, v in cur.items():
                diff = (v.view(torch.int16) != base[n].view(torch.int16)).flatten()
                k = kind_of(n)
                by_kind[k][0] += int(diff.sum())
                by_kind[k][1] += diff.numel()
                if key == "prev":
                    for i, b in enumerate(encoded_bytes(diff, 2, args.chunk_bytes)):
                        enc[i] += b
            row[key] = {k: c / t for k, (c, t) in by_kind.items()}
            row[key]["all"] = sum(c for c, _ in by_kind.values()) / total_params
            if key == "prev":
                row["encoded_share"] = {"bitmap": enc[1] / enc[0], "index": enc[2] / enc[0],
                                        "best_per_chunk": enc[3] / enc[0]}
        steps.append(row)
        history = (history + [cur])[-2:]
    seconds = time.time() - t0
    tail = steps[args.steps // 5:]  # past the first steps (Adam's bias correction is large)

    def mean(key, kind):
        vals = [r[key][kind] for r in tail if key in r and kind in r[key]]
        return sum(vals) / len(vals) if vals else float("nan")

    summary = {
        "precision": precision, "lr": lr, "params": total_params, "steps": args.steps,
        "seconds": seconds,
        "changed_prev": {k: mean("prev", k) for k in ("all", "attention", "mlp", "embedding", "norm")},
        "changed_prev2": {k: mean("prev2", k) for k in ("all", "attention", "mlp", "embedding", "norm")},
        "encoded_share": {e: sum(r["encoded_share"][e] for r in tail) / len(tail)
                          for e in ("bitmap", "index", "best_per_chunk")},
    }
    del model, opt
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return {"summary": summary, "per_step": steps}


def main() -> None:
    gpu = torch.cuda.is_available()
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--lrs", default="1e-6,3e-6,1e-5")
    p.add_argument("--precisions", default="bf16,fp32")
    p.add_argument("--hidden", type=int, default=1024 if gpu else 128)
    p.add_argument("--ffn", type=int, default=2816 if gpu else 352)
    p.add_argument("--layers", type=int, default=16 if gpu else 2)
    p.add_argument("--heads", type=int, default=16 if gpu else 4)
    p.add_argument("--kv-heads", type=int, default=4 if gpu else 2)
    p.add_argument("--vocab", type=int, default=32000 if gpu else 1000)
    p.add_argument("--seq", type=int, default=512 if gpu else 64)
    p.add_argument("--batch", type=int, default=8 if gpu else 2)
    p.add_argument("--chunk-bytes", type=int, default=4096)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="")
    args = p.parse_args()
    device = torch.device("cuda" if gpu else "cpu")
    results = []
    print(f"# device {torch.cuda.get_device_name() if gpu else 'cpu'}, torch {torch.__version__}, "
          f"steps {args.steps}, chunk {args.chunk_bytes} B; shares are means over steps "
          f">= {args.steps // 5 + 1}")
    for precision in args.precisions.split(","):
        for lr in (float(x) for x in args.lrs.split(",")):
            r = run(args, precision, lr, device)
            results.append(r)
            s = r["summary"]
            cp, c2, e = s["changed_prev"], s["changed_prev2"], s["encoded_share"]
            print(f"{precision:4s} lr {lr:.0e} params {s['params'] / 1e6:.0f}M: changed vs prev "
                  f"{cp['all']:.4f} (attn {cp['attention']:.4f} mlp {cp['mlp']:.4f} "
                  f"emb {cp['embedding']:.4f} norm {cp['norm']:.4f}), vs prev-2 {c2['all']:.4f}; "
                  f"encoded/dense: bitmap {e['bitmap']:.4f} index {e['index']:.4f} "
                  f"best-per-chunk {e['best_per_chunk']:.4f}; {s['seconds']:.1f} s", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"args": vars(args), "results": results}, f, indent=1,
                      default=lambda x: None if isinstance(x, float) and math.isnan(x) else x)


if __name__ == "__main__":
    main()
