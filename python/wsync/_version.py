"""The package version: the library's (CMakeLists.txt project VERSION), as pip installed it."""
from __future__ import annotations

import re
from pathlib import Path


def _version() -> str:
    try:
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("wsync")
        except PackageNotFoundError:
            pass
    except ImportError:
        pass
    cmake = Path(__file__).resolve().parent.parent.parent / "CMakeLists.txt"
    if cmake.is_file():
        m = re.search(r"project\(wsync VERSION ([0-9.]+)", cmake.read_text())
        if m:
            return m.group(1)
    return "0+unknown"


__version__ = _version()
