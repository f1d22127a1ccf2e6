"""Every CLI error is one line on stderr and a non-zero exit, never a traceback (unless
--debug); a request that would measure nothing is an error, not "0 results"."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tiledmm import cli
from tiledmm.bench import sweep as bench

ROW = {
    "backend": "numpy",
    "kernel": "tiled",
    "device": "Test CPU",
    "dtype": "float32",
    "m": 64,
    "n": 64,
    "k": 64,
    "gflops": 12.5,
    "vendor_gflops": 50.0,
    "intensity": 8.0,
    "predicted_seconds": 1e-4,
    "rel_error": 1e-7,
}


def _results(path: Path, *infos: dict) -> Path:
    benches = [
        {"name": f"b{i}", "stats": {"median": 1e-4}, "extra_info": e} for i, e in enumerate(infos)
    ]
    path.write_text(json.dumps({"machine_info": {}, "benchmarks": benches}))
    return path


def fails(capsys: pytest.CaptureFixture, argv: list[str], match: str = "", code: int = 0) -> str:
    """Run ``tiledmm argv``; it must fail with one line on stderr matching ``match``."""
    rc = cli.main(argv)
    err = capsys.readouterr().err
    assert rc != 0 and (not code or rc == code), (rc, err)
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("tiledmm"), lines[0]
    assert re.search(match, lines[0]), lines[0]
    return lines[0]


@pytest.fixture
def good(tmp_path: Path) -> Path:
    return _results(tmp_path / "good.json", ROW)


def test_usage_errors_are_one_line(capsys: pytest.CaptureFixture) -> None:
    fails(capsys, [], "required: command", code=2)
    fails(capsys, ["plan", "5", "5"], "required: k", code=2)
    fails(capsys, ["plan", "5", "5", "x"], "argument k: must be an integer", code=2)
    fails(capsys, ["plan", "5", "5", "5", "--kernel", "bogus"], "invalid choice", code=2)
    fails(capsys, ["plan", "5", "5", "5", "--block-tile", "ax"], "expected sizes", code=2)
    fails(capsys, ["nosuchcommand"], "invalid choice", code=2)
    assert cli.main(["--help"]) == 0 and "calibrate" in capsys.readouterr().out


def test_plan_errors(capsys: pytest.CaptureFixture) -> None:
    fails(capsys, ["plan", "5", "5", "5", "--dtype", "garbage"], "garbage")
    fails(capsys, ["plan", "5", "5", "5", "--backend", "nope"], "nope")
    fails(capsys, ["plan", "-5", "5", "5"], "-5")


def test_report_input_errors(tmp_path: Path, good: Path, capsys: pytest.CaptureFixture) -> None:
    out = ["-o", str(tmp_path / "out"), "--no-figures"]
    fails(capsys, ["report", str(tmp_path / "nonexistent.json"), *out], "No such file")
    fails(capsys, ["report", str(tmp_path), *out], "directory")
    for name, text, why in [
        ("list.json", "[]", "JSON list"),
        ("null.json", "null", "JSON NoneType"),
        ("broken.json", '{"benchmarks": [', "not valid JSON"),
        ("binary.json", "\udcff", "not valid JSON"),
    ]:
        bad = tmp_path / name
        bad.write_bytes(text.encode("utf-8", "surrogateescape"))
        fails(capsys, ["report", str(good), str(bad), *out], re.escape(str(bad)) + ".*" + why)
    empty = _results(tmp_path / "empty.json")
    fails(capsys, ["report", str(empty), *out], "no tiledmm results")
    other = tmp_path / "other.json"  # another tool's JSON object in the folder: skipped, said
    other.write_text('{"rows": [1, 2]}')
    assert cli.main(["report", str(good), str(other), *out]) == 0
    [line] = capsys.readouterr().err.splitlines()
    assert line == f"tiledmm: warning: {other} ignored, because it has no 'benchmarks' list " + (
        "(not pytest-benchmark JSON)"
    )


def test_report_malformed_rows_warn_on_one_line(
    tmp_path: Path, good: Path, capsys: pytest.CaptureFixture
) -> None:
    bad = _results(tmp_path / "bad.json", dict(ROW, gflops="fast"), dict(ROW, m=True, k=32))
    assert cli.main(["report", str(good), str(bad), "-o", str(tmp_path / "o"), "--no-figures"]) == 0
    out, err = capsys.readouterr()
    assert "| Test CPU | numpy | tiled | float32 | 64^3 |" in out
    [line] = err.splitlines()
    assert "2 benchmark(s) ignored, because" in line and "gflops is 'fast'" in line
    # the warning, then the error: each one line
    assert cli.main(["report", str(bad), "--no-figures", "-o", str(tmp_path / "o")]) == 1
    warn, error = capsys.readouterr().err.splitlines()
    assert "ignored, because" in warn and error.endswith("error: no tiledmm results in " + str(bad))


def test_report_output_errors(tmp_path: Path, good: Path, capsys: pytest.CaptureFixture) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    fails(capsys, ["report", str(good), "-o", str(blocker / "out")], "Not a directory|exists")
    out = str(tmp_path / "out")
    fails(capsys, ["report", str(good), "-o", out, "--readme", str(tmp_path / "missing.md")])
    readme = tmp_path / "README.md"
    readme.write_text("# no markers here\n")
    fails(capsys, ["report", str(good), "-o", out, "--readme", str(readme)], "no <!-- tiledmm")
    assert readme.read_text() == "# no markers here\n"


@pytest.mark.parametrize(
    "args,match",
    [
        (["--kernel", "bogus"], "no kernel 'bogus' in numpy"),
        (["--dtype", "garbage"], "'garbage' is not a dtype"),
        (["--dtype", "int32"], "runs int32"),
        (["--dtype", ","], "no dtype"),
        (["--backend", "nope"], "nope"),
        (["--sizes", "3x4"], "MxNxK"),
        (["--sizes", "abc"], "'abc'"),
        (["--sizes", ","], "no sizes"),
    ],
)
def test_bench_refuses_requests_that_measure_nothing(
    args: list[str], match: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    base = ["bench", "--backend", "numpy", "--quick", "--sizes", "8", "-o", str(tmp_path)]
    fails(capsys, base + args, match)
    assert not list(tmp_path.iterdir())  # refused before writing anything


def test_bench_output_folder_errors(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    base = ["bench", "--backend", "numpy", "--quick", "--sizes", "8", "--no-figures"]
    fails(capsys, [*base, "-o", str(blocker / "x")], "cannot create the output folder")
    if Path("/proc/self").exists():
        fails(capsys, [*base, "-o", "/proc/x"], "cannot create the output folder /proc/x")


def test_bench_with_zero_results_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bench, "run_sweep", lambda backends, **kw: bench.SweepResult(backends))
    argv = ["bench", "--backend", "numpy", "--quick", "--sizes", "8", "-o", str(tmp_path)]
    fails(capsys, argv, "0 results")


def test_calibrate_with_cache_dir_below_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv("TILEDMM_CACHE_DIR", str(blocker / "cache"))
    fails(capsys, ["calibrate", "--quick"], "TILEDMM_CACHE_DIR")
    monkeypatch.setenv("TILEDMM_CACHE_DIR", str(tmp_path))
    (tmp_path / "calibration.json").mkdir()
    fails(capsys, ["calibrate", "--quick"], "is a folder")


def test_unexpected_errors_interrupts_and_debug(
    capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    def boom(args):
        raise ZeroDivisionError("float division by zero\nsecond line")

    monkeypatch.setattr(cli, "cmd_info", boom)
    line = fails(capsys, ["info"], "ZeroDivisionError: float division by zero second line")
    assert "--debug" in line
    with pytest.raises(ZeroDivisionError):
        cli.main(["--debug", "info"])
    with pytest.raises(ZeroDivisionError):
        cli.main(["info", "--debug"])

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "cmd_info", interrupted)
    fails(capsys, ["info"], "interrupted", code=130)


def test_warnings_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TILEDMM_CACHE_DIR", str(tmp_path))
    (tmp_path / "calibration.json").write_text("[]")
    assert cli.main(["plan", "64", "64", "64", "--backend", "numpy"]) == 0
    out, err = capsys.readouterr()
    assert "64" in out
    [line] = err.splitlines()
    assert line.startswith("tiledmm: warning: calibration cache") and "ignored, because" in line
