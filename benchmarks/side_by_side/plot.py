#!/usr/bin/env python3
"""PNG plots of side-by-side JSON lines (host_side_by_side.sh / gpu_side_by_side.sh output).

  plot.py --out-dir benchmarks/plots FILE.jsonl [FILE.jsonl ...]

Per suite (host_side_by_side -> host_*.png, side_by_side (GPU) -> gpu_*.png):
  *_methods.png  GB/s of every method at one size (--methods-size, default: the model of the
                 GPU run / 1GB on the host), 1 trainer -> 1 rollout, with the ratio to the
                 reference (memcpy / device copy) on each bar;
  *_sizes.png    seconds per version against model size (log-log), 1 -> 1;
  *_ranks.png    seconds per version against trainer ranks (1 rollout) and against rollout
                 replicas (1 trainer), at the ranks sweep's size.
Lines with "skipped" or "failed" are listed in the legend-free console summary, not plotted.
"""

from __future__ import annotations

import argparse
import json
import os
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

REF = {"host_side_by_side": ("memcpy", "ratio_to_memcpy"), "side_by_side": ("device_copy", "ratio_to_device_copy")}
PREFIX = {"host_side_by_side": "host", "side_by_side": "gpu"}


def load(paths: list[str]) -> list[dict]:
    rows = []
    for p in paths:
        with open(p) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    try:
                        rows.append(json.loads(line))
                    except json.JSONDecodeError:
                        pass
    return rows


def ok(r: dict) -> bool:
    return "skipped" not in r and "failed" not in r and r.get("seconds") is not None


def pair_key(r: dict) -> tuple[int, int]:
    return int(r.get("trainers", 1) or 1), int(r.get("rollouts", 1) or 1)


def label_of(r: dict) -> str:
    if r.get("model") == "llama3-8b":
        return "llama3-8b" + ("" if r.get("size_label") in (None, "scale1", "16.1GB") else f" {r.get('size_label')}")
    return r.get("size_label") or f"{r.get('bytes', 0) / 1e9:.2f}GB"


def latest(rows: list[dict], key) -> dict:
    out = {}
    for r in rows:
        out[key(r)] = r  # the last line of a (method, ...) wins
    return out


def plot_methods(rows, suite, size_label, path) -> bool:
    ref_method, ratio_key = REF[suite]
    pick = latest([r for r in rows if ok(r) and label_of(r) == size_label and pair_key(r) == (1, 1)],
                  lambda r: r["method"])
    if not pick:
        return False
    names = sorted(pick, key=lambda m: (m != ref_method, -pick[m]["gbps"]))
    gbps = [pick[m]["gbps"] for m in names]
    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(names)), 4.2))
    bars = ax.bar(range(len(names)), gbps, color=["#888" if m == ref_method else "#3a7" if m == "wsync" else "#47a" for m in names])
    for b, m in zip(bars, names):
        ratio = pick[m].get(ratio_key)
        txt = f"{pick[m]['gbps']:.1f} GB/s" + (f"\n{ratio:.2f}x" if ratio is not None else "")
        ax.annotate(txt, (b.get_x() + b.get_width() / 2, b.get_height()), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(names)), names, rotation=20, ha="right")
    ax.set_ylabel("GB/s delivered (1e9 B/s)")
    first = pick[names[0]]
    ax.set_title(f"{PREFIX[suite]}: {size_label}, 1 -> 1, ratio to {ref_method} ({first.get('date', '')[:10]})", fontsize=10)
    ax.set_ylim(0, max(gbps) * 1.25)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def plot_sizes(rows, suite, path) -> bool:
    sel = [r for r in rows if ok(r) and r.get("model") == "generic" and pair_key(r) == (1, 1)]
    by = defaultdict(dict)
    for r in sel:
        by[r["method"]][r["bytes"]] = r["seconds"]
    by = {m: v for m, v in by.items() if len(v) >= 2}
    if not by:
        return False
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for m in sorted(by):
        xs = sorted(by[m])
        ax.plot([x / 1e9 for x in xs], [by[m][x] for x in xs], marker="o", label=m,
                linewidth=2.5 if m == "wsync" else 1.2)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("model size (GB)")
    ax.set_ylabel("seconds per version")
    ax.set_title(f"{PREFIX[suite]}: sync time vs model size, 1 trainer -> 1 rollout", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def plot_ranks(rows, suite, path) -> bool:
    sel = [r for r in rows if ok(r) and r.get("model") == "generic" and r.get("sweep") == "ranks"]
    if not sel:
        return False
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
    for ax, (title, vary, fixed) in zip(axes, [("trainer ranks (1 rollout)", 0, 1), ("rollout replicas (1 trainer)", 1, 0)]):
        by = defaultdict(dict)
        for r in sel:
            k = pair_key(r)
            if k[1 - vary] == 1:
                by[r["method"]][k[vary]] = r["seconds"]
        for m in sorted(by):
            if m in ("memcpy", "device_copy"):
                continue
            xs = sorted(by[m])
            ax.plot(xs, [by[m][x] for x in xs], marker="o", label=m, linewidth=2.5 if m == "wsync" else 1.2)
        ax.set_xlabel(title)
        ax.set_ylabel("seconds per version")
        ax.set_xticks(sorted({x for v in by.values() for x in v}))
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    size = sel[0].get("size_label", "")
    fig.suptitle(f"{PREFIX[suite]}: sync time vs ranks ({size} model; every rollout gets the whole model)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+")
    ap.add_argument("--out-dir", default="benchmarks/plots")
    ap.add_argument("--methods-size", default="", help="size label of the methods plot (default: llama3-8b / 1GB)")
    a = ap.parse_args(argv)
    rows = load(a.files)
    os.makedirs(a.out_dir, exist_ok=True)
    for suite, prefix in PREFIX.items():
        srows = [r for r in rows if r.get("suite") == suite]
        if not srows:
            continue
        size = a.methods_size or ("llama3-8b" if suite == "side_by_side" else "1GB")
        made = []
        for name, fn in [("methods", lambda p: plot_methods(srows, suite, size, p)),
                         ("sizes", lambda p: plot_sizes(srows, suite, p)),
                         ("ranks", lambda p: plot_ranks(srows, suite, p))]:
            path = os.path.join(a.out_dir, f"{prefix}_{name}.png")
            if fn(path):
                made.append(path)
        for r in srows:
            if not ok(r):
                print(f"[plot] {suite} {r.get('method')} {label_of(r)} {pair_key(r)}: "
                      f"{'skipped' if 'skipped' in r else 'failed'}: {str(r.get('skipped') or r.get('failed'))[:160]}")
        print(f"[plot] {suite}: {', '.join(made) or 'nothing to plot'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
