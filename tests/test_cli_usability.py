"""A new user's first commands (issue 39): ``--version``, what ``info`` says an alias runs,
``bench``'s exit statuses and its warning on a busy machine."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import tiledmm
from tiledmm import cli

ROOT = Path(__file__).resolve().parent.parent


def test_version_has_one_source(capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"tiledmm {tiledmm.__version__}"
    proc = subprocess.run(
        [sys.executable, "-m", "tiledmm", "--version"], capture_output=True, text=True, timeout=60
    )
    assert (proc.returncode, proc.stdout.strip()) == (0, f"tiledmm {tiledmm.__version__}")
    # pyproject.toml names no version of its own: the package metadata is tiledmm.__version__
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    dynamic = project["tool"]["setuptools"]["dynamic"]["version"]
    assert dynamic == {"attr": "tiledmm.__version__"}
    assert importlib.metadata.version("tiledmm") == tiledmm.__version__
