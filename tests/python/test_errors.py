"""Error paths: each failure is a WsyncError subclass carrying wsync's status name and message."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import torch

import wsync
from wsync import layout
from wsync.errors import UnpublishableError
from conftest import HERE, worker_env


def test_core_imports_and_reports_errors_without_torch():
    """The core API needs neither torch nor a GPU; a bad config fails with wsync's own message."""
    code = textwrap.dedent("""
        import sys
        sys.modules["torch"] = None  # any import of torch now fails
        import wsync
        cfg = wsync.ContextConfig(bootstrap=wsync.types.Bootstrap.EXPLICIT, rank=0,
                                  num_trainers=0, num_rollouts=1,
                                  coordinator_address="127.0.0.1:1", secret="s")
        try:
            wsync.Context(cfg)
        except wsync.InvalidArgumentError as e:
            print(e.status_name, "|", e.message)
        else:
            raise SystemExit("no error")
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=worker_env(), timeout=120)
    assert result.returncode == 0, result.stderr
    name, message = result.stdout.strip().split(" | ", 1)
    assert name == "WSYNC_ERR_INVALID_ARGUMENT"
    assert "trainer" in message  # wsync names the bad field


def test_unreachable_coordinator_times_out_with_its_address():
    b = wsync.Bootstrap.explicit(0, 1, 1, "127.0.0.1:9", "secret")
    with pytest.raises(wsync.WsyncTimeoutError) as info:
        wsync.Trainer(b, timeout_ms=300).connect()
    assert info.value.status_name == "WSYNC_ERR_TIMEOUT"
    assert "127.0.0.1:9" in info.value.message
    assert isinstance(info.value, TimeoutError)  # also a builtin TimeoutError


def test_package_and_library_versions_are_one():
    """wsync.__version__ (pip's metadata, from pyproject's regex over CMakeLists.txt) equals the
    loaded library's wsync_get_version (CMake's PROJECT_VERSION): one source."""
    import re
    from importlib.metadata import version

    repo = HERE.parent.parent
    cmake = re.search(r"project\(wsync VERSION ([0-9.]+)", (repo / "CMakeLists.txt").read_text())
    pyproject = (repo / "pyproject.toml").read_text()
    assert 'input = "CMakeLists.txt"' in pyproject and "dynamic = [\"version\"]" in pyproject
    assert wsync.library_version() == cmake.group(1)
    assert wsync.__version__ == version("wsync") == cmake.group(1)


def test_status_names_come_from_the_library():
    assert wsync.status_name(wsync.Status.ERR_MISMATCH) == "WSYNC_ERR_MISMATCH"
    e = wsync.errors.error_for(5, "WSYNC_ERR_TIMEOUT", "m", "wsync_x")
    assert isinstance(e, wsync.WsyncTimeoutError) and str(e) == "wsync_x: WSYNC_ERR_TIMEOUT: m"


def test_mismatched_registrations_fail_commit_on_both_sides(job, tmp_path):
    with wsync.Coordinator(trainers=1, rollouts=1, timeout_ms=300000) as c:
        base = {"address": c.address, "secret": c.secret}
        job.start("mismatch", "any", dict(base, side="trainer"), name="trainer")
        job.start("mismatch", "any", dict(base, side="rollout"), name="rollout")
        job.wait()
    for side in ("trainer", "rollout"):
        r = json.loads((tmp_path / f"mismatch_{side}.json").read_text())
        assert r["status"] == "WSYNC_ERR_MISMATCH", r
        assert r["error"] == "MismatchError"
        # wsync names the tensor, both ranks and both shapes, on every side
        for part in ("'w'", "[4, 4]", "trainer 0", "[4, 5]", "rollout 0"):
            assert part in r["message"], r["message"]


def test_calls_out_of_order_and_timeouts(job, tmp_path):
    with wsync.Coordinator(trainers=1, rollouts=1, timeout_ms=300000) as c:
        base = {"address": c.address, "secret": c.secret}
        job.start("errors", "any", dict(base, side="trainer"), name="trainer")
        job.start("errors", "any", dict(base, side="rollout"), name="rollout")
        job.wait()
    t = json.loads((tmp_path / "errors_trainer.json").read_text())
    r = json.loads((tmp_path / "errors_rollout.json").read_text())
    assert t["publish_before_commit"][:2] == ["InvalidUsageError", "WSYNC_ERR_INVALID_USAGE"]
    assert t["version_not_increasing"][:2] == ["InvalidUsageError", "WSYNC_ERR_INVALID_USAGE"]
    assert r["acquire_before_commit"][:2] == ["InvalidUsageError", "WSYNC_ERR_INVALID_USAGE"]
    assert r["wait_timeout"][:2] == ["WsyncTimeoutError", "WSYNC_ERR_TIMEOUT"]
    assert r["acquire_gone_version"][:2] == ["NotReadyError", "WSYNC_ERR_NOT_READY"]
    # Once the trainers left, waits for newer versions end at once with TRAINERS_DONE.
    assert r["wait_after_trainers_done"][:2] == ["TrainersDoneError", "WSYNC_ERR_TRAINERS_DONE"]
    assert "the trainers finished at version 2" in r["wait_after_trainers_done"][2]
    assert "before commit" in t["publish_before_commit"][2]
    assert "not greater than the last published version 2" in t["version_not_increasing"][2]
    assert "newer than 5" in r["wait_timeout"][2] and "200 ms" in r["wait_timeout"][2]
    assert r["named"]["w"] == torch.arange(12.).view(3, 4).tolist()
    # what wsync measured, through wsync_request_replicas and wsync_version_stats
    assert t["delivered"] == {"ready": [0], "skipped": [], "lost": [], "version": 2, "bytes": 48,
                              "replicas_ready": 1}
    assert r["stats_before"] is None
    assert r["stats"]["version"] == 2 and r["stats"]["lag"] == 0
    assert r["stats"]["newest_started"] == 2 and r["stats"]["age_ms"] >= 0
    assert r["watched"] == [2]  # the on_new_version callback saw the one version


def test_partial_placement_is_refused():
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Partial
    from conftest import free_port

    dist.init_process_group("gloo", rank=0, world_size=1,
                            init_method=f"tcp://127.0.0.1:{free_port()}")
    try:
        mesh = init_device_mesh("cpu", (1,))
        dt = DTensor.from_local(torch.ones(2, 2), mesh, [Partial()])
        with pytest.raises(UnpublishableError, match="Partial"):
            layout.dtensor_boxes("w", dt)
        # Through the trainer's one registration call: refused before any C call, naming the
        # parameter by its HF name (wrapper prefixes stripped).
        module = torch.nn.Module()
        module.register_parameter("ok", torch.nn.Parameter(torch.ones(2)))
        module.register_parameter("grad_sum", torch.nn.Parameter(dt))
        trainer = wsync.Trainer(wsync.Bootstrap.explicit(0, 1, 1, "127.0.0.1:9", "s"))
        with pytest.raises(UnpublishableError,
                           match=r"model\.grad_sum: placement Partial\(sum\) on mesh dim 0"):
            trainer.register_module(module, name_map=lambda n: "model." + n)
        assert trainer.ctx is None and trainer.entries == []
    finally:
        dist.destroy_process_group()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CPU offload next to CUDA shards "
                    "needs a GPU (on a CPU-only world every FSDP2 shard is host memory)")
def test_cpu_offloaded_fsdp2_shards_next_to_device_shards_are_refused():
    """FSDP2 with CPUOffloadPolicy on one layer and device shards elsewhere: one register_module
    call raises UnpublishableError naming the offloaded shard and the way out (offloaded='copy'),
    before any C call."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy, fully_shard
    from conftest import free_port

    dist.init_process_group("gloo", rank=0, world_size=1,
                            init_method=f"tcp://127.0.0.1:{free_port()}")
    try:
        mesh = init_device_mesh("cuda", (1,))
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)).cuda()
        fully_shard(model[0], mesh=mesh, offload_policy=CPUOffloadPolicy())
        fully_shard(model, mesh=mesh)
        assert model[0].weight.device.type == "cpu" and model[1].weight.device.type == "cuda"
        trainer = wsync.Trainer(wsync.Bootstrap.explicit(0, 1, 1, "127.0.0.1:9", "s"))
        with pytest.raises(UnpublishableError, match=r"0\.weight is a CPU-offloaded shard while "
                           r"other tensors are on cuda:0.*offloaded='copy'"):
            trainer.register_module(model)
        assert trainer.ctx is None and trainer.entries == []
    finally:
        dist.destroy_process_group()


def test_unregistrable_tensors_are_refused_before_any_c_call():
    r = wsync.Rollout(wsync.Bootstrap.explicit(0, 1, 1, "127.0.0.1:9", "s"))
    with pytest.raises(UnpublishableError, match="contiguous"):
        r.register_module({"w": torch.empty(4, 3).t()})
    with pytest.raises(UnpublishableError, match="meta"):
        wsync.Trainer(wsync.Bootstrap.explicit(0, 1, 1, "127.0.0.1:9", "s")).register_tensors(
            {"w": torch.empty(2, 2, device="meta")})
    assert r.ctx is None  # nothing reached the library
