"""Shared fixtures of the Python tests: launching real worker processes and a coordinator."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional

import pytest

HERE = Path(__file__).resolve().parent
JOBS = HERE / "jobs.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def engine_pythonpath() -> str:
    """PYTHONPATH of an engine venv's worker processes: this folder, then the caller's
    $PYTHONPATH (e.g. a source tree's python/ ahead of the venv's installed wsync)."""
    return os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))


def worker_env() -> Dict[str, str]:
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")  # 2-core machines: no thread oversubscription
    env["PYTHONPATH"] = os.pathsep.join([str(HERE)] + [p for p in sys.path if p])
    return env


class Job:
    """Worker processes of one test; all must exit 0 within the timeout."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.procs: List[tuple] = []

    def start(self, scenario: str, role: str, args: dict, name: Optional[str] = None,
              script: Path = JOBS) -> None:
        """Starts `script scenario role json(args)` (a worker of jobs.py by default)."""
        args = dict(args, out=str(self.out), name=name or role)
        log = open(self.out / f"{name or role}.log", "w")
        p = subprocess.Popen([sys.executable, str(script), scenario, role, json.dumps(args)],
                             stdout=log, stderr=subprocess.STDOUT, env=worker_env())
        self.procs.append((name or role, p, log))

    def wait(self, timeout_s: float = 400, coordinator=None) -> None:
        failed = []
        for name, p, log in self.procs:
            try:
                rc = p.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                p.kill()
                rc = "timeout"
            log.close()
            if rc != 0:
                failed.append((name, rc, (self.out / f"{name}.log").read_text()[-3000:]))
        if failed and coordinator is not None:
            failed.append(("coordinator", coordinator.process.poll(), coordinator.stderr))
        assert not failed, "\n".join(f"--- {n} exited {rc}:\n{text}" for n, rc, text in failed)

    def kill(self) -> None:
        for _, p, log in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
            log.close()


@pytest.fixture
def job(tmp_path: Path):
    j = Job(tmp_path)
    yield j
    j.kill()
