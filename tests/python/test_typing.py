"""The package's annotations hold: mypy over python/wsync with pyproject.toml's [tool.mypy]
settings (torch and the engines are not analysed: their types are Any there)."""
from __future__ import annotations

import pytest

from conftest import HERE


def test_package_is_mypy_clean(tmp_path):
    api = pytest.importorskip("mypy.api")
    repo = HERE.parent.parent
    out, err, rc = api.run(["--config-file", str(repo / "pyproject.toml"), "--cache-dir",
                            str(tmp_path), str(repo / "python" / "wsync")])
    assert rc == 0, out + err
    assert "Success" in out
