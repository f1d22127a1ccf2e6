"""tiledmm as a newcomer gets it (issue 33): everything the library reads at run time comes
from an installed package (its own files, or a backend's through the backend object), never
from the source tree; the committed results and git only where a checkout is there.

The slow test at the end builds the wheel, installs it into a fresh virtual environment and
runs the README's main command and ``tiledmm report`` in an empty folder. It runs where
``TILEDMM_INSTALL_TEST=1`` (``.ci/run`` sets it), and is skipped otherwise.
"""

from __future__ import annotations

import fnmatch
import json
import os
import subprocess
import sys
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

import tiledmm
from tiledmm.bench import machine
from tiledmm.report import modelcheck

ROOT = Path(__file__).resolve().parents[1]
INSTALL_TEST = "TILEDMM_INSTALL_TEST"
#: files the backends open at run time, by suffix (the wheel must carry every one)
DATA_SUFFIXES = (".json", ".cl", ".cu", ".h")


class _TableBackend(tiledmm.Backend):
    name = "table-only"
    kernels = ("naive",)

    def geometry_entries(self):
        return [{"kernels": "table-only", "family": "naive", "block_tile": [3, 5, 7]}]

    def run(self, plan, a, b, out):  # pragma: no cover - never run
        raise NotImplementedError


def test_modelcheck_reads_geometry_through_the_backends(monkeypatch):
    """The shipped geometry entries come from ``Backend.geometry_entries`` of the registered
    backends (available or not), once each: the core opens no backend file itself."""
    from tiledmm.core import registry

    got = modelcheck.shipped_geometry()
    shipped = [e for be in registry.registered() for e in be.geometry_entries()]
    key = lambda e: json.dumps(e, sort_keys=True)  # noqa: E731
    assert {key(e) for e in got} == {key(e) for e in shipped}
    assert len(got) == len({key(e) for e in got})
    names = {be.name for be in registry.registered()}
    if {"cupy", "numba-cuda"} <= names:  # the built-ins' table: every entry of geometry.json
        from tiledmm_backends import kernels as K

        assert {key(e) for e in got} >= {key(e) for e in K.geometry_entries()}
    tiledmm.register_backend(_TableBackend())
    try:
        assert {"kernels": "table-only", "family": "naive", "block_tile": [3, 5, 7]} in (
            modelcheck.shipped_geometry()
        )
    finally:
        registry.reload()


def test_modelcheck_without_files_outside_a_checkout(tmp_path, monkeypatch, capsys):
    """No committed results here: one line saying so, exit 2 (was: a crash on a path inside
    site-packages); a missing file, or --calibration without one: one line."""
    monkeypatch.chdir(tmp_path)
    assert modelcheck.main([]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "pass FILES" in err
    assert modelcheck.main([str(tmp_path / "none.json")]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "none.json" in err
    assert modelcheck.main(["--calibration"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_modelcheck_default_is_the_checkouts_committed_results(monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    assert modelcheck.main([]) == 0
    assert "band (0.8, 1.25)" in capsys.readouterr().out


def test_commit_info_outside_a_checkout(tmp_path, monkeypatch):
    """Installed in site-packages (no git there, or some other project's git work tree
    around it): no commit, and no other project's commit either."""
    pkg = tmp_path / "site-packages" / "tiledmm" / "bench"
    pkg.mkdir(parents=True)
    monkeypatch.setattr(machine, "__file__", str(pkg / "machine.py"))
    assert machine.commit_info()["id"] is None
    git = subprocess.run(["git", "init", "-q", str(tmp_path)], capture_output=True)
    if git.returncode == 0:  # the venv inside another repository
        assert machine.commit_info()["id"] is None
    monkeypatch.setattr(machine, "__file__", str(ROOT / "tiledmm" / "bench" / "machine.py"))
    if (ROOT / ".git").exists():
        assert machine.commit_info()["id"]


def _package_data() -> tuple[dict[str, list[str]], dict[str, str]]:
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return cfg.get("package-data", {}), cfg["package-dir"]


def test_package_data_covers_every_file_the_backends_open():
    """Every kernel source, header and table under backends/ is package data of its package
    (what the wheel carries; the slow test below checks the wheel itself)."""
    data, dirs = _package_data()
    missing = []
    for f in sorted((ROOT / "backends").rglob("*")):
        if f.suffix not in DATA_SUFFIXES or "__pycache__" in f.parts:
            continue
        rel = f.parent.relative_to(ROOT / "backends").parts
        pkg = ".".join(("tiledmm_backends", *rel))
        if not any(fnmatch.fnmatch(f.name, pat) for pat in data.get(pkg, [])):
            missing.append(str(f.relative_to(ROOT)))
    assert dirs["tiledmm_backends"] == "backends"
    assert not missing, f"not package data (pyproject [tool.setuptools.package-data]): {missing}"


def test_ci_enables_the_install_test():
    """``.ci/run`` sets the variable that runs the slow test below (before the README's test
    command, which stays its last line: tests/test_readme.py)."""
    ci = (ROOT / ".ci" / "run").read_text()
    assert f"export {INSTALL_TEST}=1" in ci


def _run(cmd: list[str], cwd: Path, env: dict, timeout: float) -> subprocess.CompletedProcess:
    res = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                         timeout=timeout)  # fmt: skip
    assert res.returncode == 0, f"{' '.join(cmd)} -> {res.returncode}\n{res.stdout}\n{res.stderr}"
    return res


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get(INSTALL_TEST) != "1", reason=f"{INSTALL_TEST}=1 runs it (CI)")
def test_readme_main_job_from_a_wheel_in_a_fresh_venv(tmp_path):
    """The README's main job as a newcomer runs it: the wheel built from this checkout,
    installed with the bench extra into a new virtual environment, then ``tiledmm bench
    --quick`` and ``tiledmm report`` on its JSON in an empty folder, far from the checkout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env["TILEDMM_CACHE_DIR"] = str(tmp_path / "cache")
    wheels = tmp_path / "wheels"
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(ROOT), "-w", str(wheels)],
         tmp_path, env, 300)  # fmt: skip
    (whl,) = wheels.glob("tiledmm-*.whl")
    names = zipfile.ZipFile(whl).namelist()
    for f in (ROOT / "backends").rglob("*"):
        if f.suffix in DATA_SUFFIXES:
            assert f"tiledmm_backends/{f.relative_to(ROOT / 'backends')}" in names, f
    assert not any(n.startswith(("backends/", "benches/", "tests/")) for n in names)
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    bindir = env_dir / "bin"
    env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"
    _run([str(bindir / "python"), "-m", "pip", "install", "-q", f"{whl}[bench]"], tmp_path, env,
         600)  # fmt: skip
    work = tmp_path / "newcomer"
    work.mkdir()
    where = _run([str(bindir / "python"), "-c", "import tiledmm; print(tiledmm.__file__)"],
                 work, env, 60).stdout  # fmt: skip
    assert Path(where.strip()).is_relative_to(env_dir), where  # not the checkout's package
    _run(["tiledmm", "bench", "--quick"], work, env, 600)
    out = work / "tiledmm-results"
    results = sorted(out.glob("*.json"))
    assert results and json.loads(results[0].read_text())["benchmarks"]
    assert list(out.glob("*.png")) and list(out.glob("*.svg"))
    _run(["tiledmm", "report", *map(str, results), "-o", "report"], work, env, 300)
    assert (work / "report" / "tiling-table.md").is_file() and list((work / "report").glob("*.png"))
    committed = sorted(map(str, (ROOT / "benches" / "results").glob("*.json")))
    text = _run(["tiledmm", "report", *committed, "-o", "committed", "--no-figures"], work, env,
                300).stdout  # fmt: skip
    assert "## The planner today" in text and "Not checked" not in text  # modelcheck's rows
    info = _run(["tiledmm", "info"], work, env, 120).stdout
    assert "numpy" in info
    res = subprocess.run([str(bindir / "python"), "-m", "tiledmm.report.modelcheck"],
                         cwd=work, env=env,
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
