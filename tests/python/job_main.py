"""The entry point shared by the test's worker scripts (jobs.py, fsdp_jobs.py, vllm_jobs.py, ...):
run one role, print the traceback of a failure, exit non-zero (the test then shows the log)."""
from __future__ import annotations

import sys
import traceback
from typing import Callable


def run(role: Callable[[], object]) -> None:
    """Exits 0 when `role()` returns, 1 when it raises (after printing the traceback)."""
    try:
        role()
    except Exception:
        traceback.print_exc()
        sys.exit(1)
    sys.exit(0)
