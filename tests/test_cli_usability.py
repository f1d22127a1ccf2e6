"""A new user's first commands (issue 39): ``--version``, what ``info`` says an alias runs,
``bench``'s exit statuses and its warning on a busy machine."""

from __future__ import annotations

import importlib.metadata
import json
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


class _SlowCPU(tiledmm.Backend):
    """Shares the "cpu" alias, ranked after numpy (a lower priority)."""

    name, kernels, aliases, priority = "slowcpu-test", ("naive",), ("cpu", "slow-test"), -100

    def run(self, plan, a, b, out):
        out[...] = a @ b


def test_info_shows_what_each_alias_runs(capsys: pytest.CaptureFixture) -> None:
    from tiledmm import registry

    try:
        tiledmm.register_backend(_SlowCPU())
        assert cli.main(["info"]) == 0
        lines = [ln for ln in capsys.readouterr().out.splitlines() if not ln.startswith(" ")]
        [mine] = [ln for ln in lines if ln.startswith("slowcpu-test ")]
        assert mine.startswith("slowcpu-test (aliases: cpu -> numpy, slow-test) [")
        for line in lines[1:]:  # every bare alias runs the backend it is listed beside
            name, _, rest = line.partition(" (aliases: ")
            for word in rest.partition(")")[0].split(", ") if rest else ():
                alias, arrow, target = word.partition(" -> ")
                if arrow and target != "no available backend":
                    assert tiledmm.get_backend(alias).name == target != name
                elif not arrow:
                    assert tiledmm.get_backend(alias).name == name
        assert cli.main(["info", "--json"]) == 0
        rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
        assert rows["slowcpu-test"]["alias_targets"] == {
            "cpu": "numpy",
            "slow-test": "slowcpu-test",
        }
        assert registry.alias_target("cpu") == tiledmm.get_backend("cpu").name == "numpy"
        assert registry.alias_target("no-such-alias") is None
    finally:
        registry.reload()
    assert (
        cli._aliases_text("cupy", ("cuda",), {}.get) == " (aliases: cuda -> no available backend)"
    )
