"""The Python RL-loop example (rollout_integration/python/rl_loop.py) runs end to end on host
memory: trainers publish every step, the TP-2 rollout generates throughout, sees every version
in order at batch boundaries and ends bit-equal to the trainers' final policy."""
from __future__ import annotations

import json
import subprocess
import sys

from conftest import HERE, worker_env

EXAMPLE = HERE.parent.parent / "rollout_integration" / "python" / "rl_loop.py"


def test_rl_loop_example_on_host_memory() -> None:
    run = subprocess.run([sys.executable, str(EXAMPLE), "--cpu", "--steps", "6"],
                         env=worker_env(), capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["ok"] and result["rollout_equals_trainer"] == [True, True]
    seen = result["versions_seen_rank0"]
    assert seen == sorted(seen) and seen[-1] == 6
    assert all(b > 0 for b in result["batches_per_rank"])
