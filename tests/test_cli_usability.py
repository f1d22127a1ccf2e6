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
from tiledmm.report import info

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
    from tiledmm.core import registry

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
        info.aliases_text("cupy", ("cuda",), {}.get) == " (aliases: cuda -> no available backend)"
    )


class _Wrong(tiledmm.Backend):
    """Writes its result off by one: the check before the timing must fail it."""

    name, kernels = "wrong-test", ("naive",)

    def run(self, plan, a, b, out):
        out[...] = a @ b + 1


def test_bench_tells_a_wrong_result_from_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tiledmm.core import registry
    from tiledmm.report import render as report
    from tiledmm.util import exits

    assert len({exits.OK, exits.ERROR, exits.USAGE, exits.WRONG_RESULT, exits.INTERRUPTED}) == 5
    base = ["bench", "--quick", "--sizes", "8", "--no-figures", "--kernel", "naive"]
    try:
        tiledmm.register_backend(_Wrong())
        argv = [*base, "--backend", "numpy", "--backend", "wrong-test", "-o", str(tmp_path / "a")]
        assert cli.main(argv) == exits.WRONG_RESULT == 3  # everything written, one wrong
        out, err = capsys.readouterr()
        assert "| numpy | naive |" in out and "FAILED: " in err and "wrong-test" in err
        assert list((tmp_path / "a").glob("*.json"))
        only = [*base, "--backend", "wrong-test", "-o", str(tmp_path / "b")]
        assert cli.main(only) == exits.WRONG_RESULT  # none right: still a wrong result
        assert "0 results" in capsys.readouterr().err
    finally:
        registry.reload()

    def crash(*args, **kwargs):
        raise ZeroDivisionError("the report crashed")

    monkeypatch.setattr(report, "render", crash)  # correct results, then a crash
    argv = [*base, "--backend", "numpy", "-o", str(tmp_path / "c")]
    assert cli.main(argv) == exits.ERROR == 1
    done, line = capsys.readouterr().err.splitlines()
    assert done.startswith("1 results") and "ZeroDivisionError: the report crashed" in line
    assert cli.main(["bench", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    docs = (ROOT / "docs" / "benchmarks.md").read_text()
    for code, words in [(0, "every result correct"), (3, "a result was wrong"),
                        (1, "an error stopped the run")]:  # fmt: skip
        assert f"{code} {words}" in text, text
        assert f"| {code} |" in docs


def test_busy_signs() -> None:
    from tiledmm.bench import busy

    sliced = [0.004, 0.008, 0.0121, 0.008, 0.0039, 0.016, 0.008]  # one core shared: 4 ms slices
    assert busy.tick_of(sliced) == 0.004 and busy.spread(sliced)["spread"] > busy.MAX_SPREAD
    quiet = [0.0201, 0.0203, 0.0199, 0.0202, 0.0200, 0.0204]  # on a multiple, but one tick
    assert busy.spread(quiet)["spread"] < 0.05 and busy.spread(quiet)["tick"] is None
    assert busy.tick_of([0.0011, 0.0023, 0.0035, 0.0047, 0.0059]) is None  # off every lattice
    row = {"backend": "numpy", "dtype": "float32", "m": 64, "n": 64, "k": 64, "device_kind": "cpu"}
    assert busy.busy_reasons([0.2, 0.1, 0.1], 2, [row]) == []
    assert busy.busy_reasons([0.2], 64, [row | {"vendor_spread": 0.1}]) == []
    [load] = busy.busy_reasons([1.02, 0.9, 0.5], 2, [row])  # one core of two taken
    assert "1.02 on 2 CPUs" in load
    assert busy.busy_reasons([1.02], 2, [row | {"device_kind": "gpu"}]) == []  # host load: GPU
    [times] = busy.busy_reasons([0.1], 2, [row | {"vendor_spread": 0.8, "vendor_tick": 0.004}])
    assert "multiples of 4 ms" in times and "up to 80%: numpy float32 64x64x64" in times


@pytest.mark.parametrize("busy_machine", [True, False])
def test_bench_shows_the_load_and_warns_on_a_busy_machine(
    busy_machine: bool,
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The load and the vendor's times are injected: the outcome never depends on this host."""
    from tiledmm.bench import busy
    from tiledmm.bench import sweep as bench

    load = [1.05, 0.97, 0.61] if busy_machine else [0.03, 0.02, 0.0]
    times = [0.004, 0.008, 0.012, 0.008, 0.004] if busy_machine else [0.0040, 0.0041, 0.0040] * 2
    monkeypatch.setattr(busy, "load_average", lambda: list(load))
    monkeypatch.setattr(busy, "cpus", lambda: 2)
    monkeypatch.setattr(bench, "time_fn", lambda *args, **kwargs: list(times))
    argv = ["bench", "--backend", "numpy", "--quick", "--sizes", "16", "--no-figures"]
    assert cli.main([*argv, "-o", str(tmp_path), "--name", "t"]) == 0
    out, err = capsys.readouterr()
    table, line = out.rstrip().rsplit("\n", 1)
    assert "| numpy | register |" in table
    assert line == ("load average 1.05 / 0.97 / 0.61" if busy_machine else
                    "load average 0.03 / 0.02 / 0.00") + " (1, 5, 15 min) when the run started, " \
        f"on 2 CPUs; {load[0]:.2f} (1 min) when it ended"  # fmt: skip
    warned = [w for w in err.splitlines() if w.startswith("tiledmm: warning:")]
    doc = json.loads((tmp_path / "t.json").read_text())
    assert doc["machine_info"]["tiledmm"]["loadavg_1_5_15min"] == load
    if not busy_machine:
        assert warned == [] and doc["tiledmm"]["busy"] == []
        return
    assert len(warned) == 2 == len(doc["tiledmm"]["busy"])
    assert "load average was 1.05 on 2 CPUs" in warned[0]
    assert "multiples of 4 ms" in warned[1] and "'of vendor'" in warned[1]
