"""The "wsync" vLLM weight-transfer backend against the REAL vLLM (its Qwen2, Qwen2-MoE and GPT-2
models built by its own initialize_model, TP 2 over gloo on vLLM's CPU platform, its plugin loader
and engine factory). vLLM 0.33 needs torch 2.14, so it lives in its own venv: $WSYNC_VLLM_PYTHON (default /opt/wsync-vllm-venv/bin/python);
skipped when that Python cannot import vllm and wsync."""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
from pathlib import Path

import pytest
import torch

import wsync
from conftest import HERE, engine_pythonpath, free_port

VLLM_PYTHON = os.environ.get("WSYNC_VLLM_PYTHON", "/opt/wsync-vllm-venv/bin/python")


def _vllm_ready() -> str:
    if not Path(VLLM_PYTHON).exists():
        return f"{VLLM_PYTHON} does not exist (a venv with vllm==0.33 and wsync installed)"
    r = subprocess.run([VLLM_PYTHON, "-c", "import vllm, wsync.engines.vllm as e; "
                        "assert e.HAVE_VLLM"], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, VLLM_TARGET_DEVICE="cpu"))
    return "" if r.returncode == 0 else f"vllm does not import there: {r.stderr[-300:]}"


def wait_all(procs, timeout_s: float) -> list:
    """Exit codes; once one process fails the others are killed (no waiting for timeouts)."""
    import time

    deadline = time.time() + timeout_s
    while time.time() < deadline and any(p.poll() is None for p in procs):
        if any(p.poll() not in (None, 0) for p in procs):
            break
        time.sleep(0.2)
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    return [p.returncode for p in procs]


MODELS = ("qwen2", "qwen2_moe", "gpt2")


def test_vllm_backend_receives_each_tp_rank_bytes(tmp_path):
    run_models(tmp_path, MODELS)


def test_vllm_draft_model_flips_with_the_target(tmp_path):
    """Speculative decoding: a draft model (vLLM's "draft_model" method builds it with vLLM's
    own model classes: a 1-layer Qwen2 here) registered in the target's wsync context as
    WsyncWorkerExtension does with model_runner.get_draft_model(); both models' TP-rank
    parameters equal vLLM's own load_weights of the trainer's tensors at every version."""
    run_models(tmp_path, ("qwen2_draft",))


def run_models(tmp_path: Path, models) -> None:
    why = _vllm_ready()
    if why:
        pytest.skip(why)
    MODELS = tuple(models)
    tp, versions = 2, 3
    env = dict(os.environ, VLLM_TARGET_DEVICE="cpu", OMP_NUM_THREADS="1",
               PYTHONPATH=engine_pythonpath())
    with contextlib.ExitStack() as stack:
        coordinators = {m: stack.enter_context(wsync.Coordinator(
            trainers=1, rollouts=tp, timeout_ms=300000, quiet=False)) for m in MODELS}
        base = {"tp": tp, "versions": versions, "out": str(tmp_path), "dist_port": free_port(),
                "models": list(MODELS),
                "jobs": {m: {"address": c.address, "secret": c.secret}
                         for m, c in coordinators.items()}}
        procs = [subprocess.Popen([VLLM_PYTHON, str(HERE / "vllm_jobs.py"), "trainer",
                                   json.dumps(base)], env=env, stdout=open(tmp_path / "t.log", "w"),
                                  stderr=subprocess.STDOUT)]
        for r in range(tp):
            procs.append(subprocess.Popen(
                [VLLM_PYTHON, str(HERE / "vllm_jobs.py"), "worker", json.dumps(dict(base, rank=r))],
                env=env, stdout=open(tmp_path / f"w{r}.log", "w"), stderr=subprocess.STDOUT))
        codes = wait_all(procs, timeout_s=550)
        logs = "".join((tmp_path / n).read_text()[-2500:] for n in ("t.log", "w0.log", "w1.log"))
        assert codes == [0] * (tp + 1), logs + "".join(c.stderr for c in coordinators.values())
    for r in range(tp):
        reports = json.loads((tmp_path / f"worker{r}.json").read_text())
        for model in MODELS:
            check_model(tmp_path, r, model, reports[model], versions)


def check_model(out: Path, r: int, model: str, report: dict, versions: int) -> None:
    # The names and shapes the worker derived from vLLM's model config (no hf_shapes given) are
    # exactly those the trainer published.
    assert report["hf_shapes"] == json.loads((out / f"hf_shapes_{model}.json").read_text())
    if model == "qwen2_draft":
        assert "model.layers.0.self_attn.qkv_proj.weight" in report["registered"]
    if model == "gpt2":  # vLLM's loader transposes HF's Conv1D weights: received whole
        assert report["fallback"] == [f"transformer.h.{i}.{m}.weight" for i in range(2)
                                      for m in ("attn.c_attn", "attn.c_proj", "mlp.c_fc",
                                                "mlp.c_proj")], report["fallback"]
        assert "transformer.h.0.attn.c_attn.bias" in report["registered"]
    else:  # every loader copies plain boxes
        assert report["fallback"] == [], report["fallback"]
        assert any("qkv_proj" in n for n in report["registered"])
    if model == "qwen2_moe":
        assert "model.layers.1.mlp.experts.routed_experts.w13_weight" in report["registered"]
    for name, n in report["box_elements"].items():  # this rank's own bytes, nothing more
        assert 0 < n <= report["param_elements"][name], (model, name)
    for v in range(1, versions + 1):
        saved = torch.load(out / f"worker{r}_{model}_v{v}.pt")
        assert saved["version"] == v
        for name, want in saved["want"].items():
            got = saved["got"][name]
            if any(k in name for k in ("embed_tokens", "lm_head", "wte")):  # padding rows:
                real = max(0, min(250 - r * want.shape[0], want.shape[0]))  # vLLM zeroes them,
                got, want = got[:real], want[:real]  # wsync never writes them
            assert torch.equal(got, want), f"{model} rank {r} v{v}: {name}"
