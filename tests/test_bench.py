"""The benchmark sweep, its JSON, calibration and the benches/ suite (tiny sizes, CPU only)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tiledmm
from tiledmm import cli
from tiledmm.bench import sweep as bench
from tiledmm.bench.results import stats_dict, write_results
from tiledmm.tune import calibrate
from tiledmm.util import args as cli_args

REQUIRED = {
    "backend",
    "kernel",
    "device",
    "dtype",
    "m",
    "n",
    "k",
    "gflops",
    "vendor_gflops",
    "intensity",
    "predicted_seconds",
    "rel_error",
}
ROOT = Path(__file__).resolve().parent.parent


def test_parse_shapes() -> None:
    assert cli_args.parse_shapes("64, 3x5x7") == [(64, 64, 64), (3, 5, 7)]
    with pytest.raises(ValueError):
        cli_args.parse_shapes("3x4")


def test_stats_follow_pytest_benchmark() -> None:
    s = stats_dict([3.0, 1.0, 2.0, 10.0])
    assert (s["min"], s["max"], s["median"], s["rounds"], s["iterations"]) == (1, 10, 2.5, 4, 1)
    assert math.isclose(s["mean"], 4.0) and s["ops"] == 0.25
    from pytest_benchmark.stats import Stats

    assert set(s) == set(Stats.fields) | {"iterations", "data"}
    assert (s["q1"], s["q3"], s["outliers"], s["data"]) == (1.5, 6.5, "1;0", [3.0, 1.0, 2.0, 10.0])


def test_progress_bar_only_on_a_terminal(capsys: pytest.CaptureFixture) -> None:
    for enabled in (None, True):  # None: stderr decides (not a terminal under capsys)
        bar = bench.progress_bar(3, enabled)
        for _ in range(3):
            bar.set_description_str("numpy tiled")
            bar.update()
        bar.close()
        err = capsys.readouterr().err
        assert ("2/3" in err and "numpy tiled" in err) if enabled else err == ""


def test_quick_sweep_writes_valid_json(tmp_path: Path) -> None:
    be = tiledmm.get_backend("numpy")
    res = bench.run_sweep([be], shapes=[(32, 32, 32), (17, 19, 23)], quick=True, progress=False)
    assert not res.failures
    assert len(res.benchmarks) == 2 * len(be.kernels)
    [path] = write_results(res, tmp_path, "cpu-test", "test")
    doc = json.loads(path.read_text())
    assert {"machine_info", "commit_info", "benchmarks", "datetime", "version"} <= set(doc)
    assert doc["machine_info"]["cpu"]["brand_raw"]
    assert "numpy" in doc["machine_info"]["tiledmm"]["devices"]
    for b in doc["benchmarks"]:
        info = b["extra_info"]
        assert REQUIRED <= set(info), REQUIRED - set(info)
        assert info["rel_error"] < 1e-5 and info["gflops"] > 0 and info["vendor_gflops"] > 0
        assert b["stats"]["median"] > 0 and b["stats"]["rounds"] >= 3
        assert b["name"] == f"test_matmul[{b['param']}]"


class _Lazy(tiledmm.Backend):
    """Writes all but the last output row: the NaN poison must catch it."""

    name, kernels = "lazy-test", ("naive",)

    def run(self, plan, a, b, out):
        out[:-1] = a[:-1] @ b


def test_poisoned_output_catches_unwritten_rows() -> None:
    be = _Lazy()
    inp = bench.Inputs(8, 8, 8, "float32")
    p = tiledmm.make_plan(8, 8, 8, dtype="float32", kernel="naive", device=be.device())
    assert bench.check_case(bench.Case(be, inp), p) == math.inf
    assert vars(bench)["rel_error"] is tiledmm.util.accuracy.rel_error  # the one error metric
    assert tiledmm.util.accuracy.rel_error(inp.ref, inp.ref) == 0.0
    assert bench.tolerance("float32", 4096) > bench.tolerance("float64", 4096)


def test_cli_bench_quick(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    argv = [
        "bench",
        "--backend",
        "numpy",
        "--sizes",
        "24,9x10x11",
        "--quick",
        "--no-figures",
        "-o",
        str(tmp_path),
        "--name",
        "tiny",
    ]
    assert cli.main(argv) == 0
    assert (tmp_path / "tiny.json").exists() and (tmp_path / "tiling-table.md").exists()
    assert "| numpy | register | float32 | 24^3 |" in capsys.readouterr().out


def test_calibrate_writes_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TILEDMM_CACHE_DIR", str(tmp_path))
    monkeypatch.setitem(calibrate._SIZES, ("cpu", True), (64, 128))
    monkeypatch.setitem(calibrate._COPY_BYTES, ("cpu", True), 1 << 20)
    [(name, rec, path)] = list(calibrate.calibrate("numpy", quick=True))
    assert path == tmp_path / "calibration.json"
    saved = json.loads(path.read_text())[name]
    assert set(saved["peak_flops"]) == {"float32", "float64"} and saved["bandwidth"] > 0
    dev = tiledmm.host_cpu()
    assert dev.name == name and dev.ceilings_measured
    assert np.isclose(dev.peak("float32"), rec["peak_flops"]["float32"])
    cost = saved["host_cost"]["numpy"]  # the backend's per-call host cost, in its plans
    assert cost["wall"] > 0 and dev.host_cost("numpy") == cost["seconds"]


def test_benches_suite_quick_mode(tmp_path: Path) -> None:
    """CI runs the pytest-benchmark suite at tiny sizes so it cannot rot."""
    out = tmp_path / "b.json"
    env = dict(os.environ, TILEDMM_BENCH_QUICK="1", TILEDMM_BENCH_BACKENDS="numpy")
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        str(ROOT / "benches"),
        "-q",
        "-p",
        "no:cacheprovider",
        f"--benchmark-json={out}",
        "--rootdir",
        str(ROOT),
    ]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert "tiledmm" in doc["machine_info"]
    assert len(doc["benchmarks"]) == 6
    assert all(REQUIRED <= set(b["extra_info"]) for b in doc["benchmarks"])
