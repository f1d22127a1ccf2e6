"""pytest-benchmark setup for ``pytest benches/``: options, machine info, parametrization,
progress, and the rules ``tiledmm bench`` follows.

    pytest benches/ --benchmark-json=out.json               # the default sweep
    TILEDMM_BENCH_QUICK=1 pytest benches/ --benchmark-disable  # CI: tiny shapes, correctness

As ``tiledmm bench`` does (one rule, :class:`tiledmm.bench.pace.Pace`), a case whose single call is
predicted from the same family's rate on the shape before it to take over 5 s (0.5 s quick) is
skipped with its reason; ``--tiledmm-all`` runs every case. Each case is one line as it runs
(its time when it passes), and the summary ends with the load average and, on a busy machine,
the same warnings as ``tiledmm bench`` (:mod:`tiledmm.bench.busy`).

Environment (or the matching ``--tiledmm-*`` options): TILEDMM_BENCH_QUICK=1,
TILEDMM_BENCH_BACKENDS=numpy,opencl, TILEDMM_BENCH_SIZES=256,1000x3000x777,
TILEDMM_BENCH_DTYPES=float32,float64, TILEDMM_BENCH_ALL=1.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import pytest

import tiledmm
from tiledmm.bench.busy import busy_reasons, cpus, load_average, load_text
from tiledmm.bench.machine import tiledmm_machine_info
from tiledmm.bench.pace import Pace
from tiledmm.bench.results import bench_name
from tiledmm.bench.sweep import Settings, default_shapes
from tiledmm.util.args import parse_shapes

# Tiny shapes for the CI mode: a square, and primes so every edge tile is partial.
QUICK_SHAPES = [(64, 64, 64), (67, 71, 73)]


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("tiledmm benchmarks")
    g.addoption("--tiledmm-quick", action="store_true", help="tiny shapes, few rounds (CI)")
    g.addoption("--tiledmm-backends", help="comma list; default: every available backend")
    g.addoption("--tiledmm-sizes", help="comma list of N or MxNxK")
    g.addoption("--tiledmm-dtypes", help="comma list; default float32")
    g.addoption(
        "--tiledmm-all", action="store_true", help="also the cases predicted over 5 s a call"
    )


@dataclass
class Suite:
    """One session's state: the skip rule's rates, the results' extra_info, the start load."""

    pace: Pace = field(default_factory=Pace)
    rows: list[dict] = field(default_factory=list)
    loadavg: list[float] = field(default_factory=load_average)


SUITE = pytest.StashKey[Suite]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[SUITE] = Suite()
    if config.option.verbose == 0:  # progress: one line per case as it starts (-q: dots)
        config.option.verbose = 1


def pytest_report_header(config: pytest.Config) -> list[str]:
    cap = _settings(config).max_call_seconds
    lines = [
        load_text(config.stash[SUITE].loadavg, ncpus=cpus()),
        f"tiledmm: cases predicted over {cap:g} s a call are skipped, as by `tiledmm bench`"
        if math.isfinite(cap) else "tiledmm: every case runs (--tiledmm-all)",
    ]  # fmt: skip
    if not config.getoption("benchmark_json", None):
        lines.append("tiledmm: no --benchmark-json=FILE: the results are shown, not saved")
    return lines


def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config):
    """A passed case says how long it took (the progress line)."""
    if report.when == "call" and report.passed and config.option.verbose > 0:
        return "passed", ".", f"PASSED ({report.duration:.1f} s)"
    return None


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """After pytest-benchmark's table: the load beside it, and the busy-machine warnings."""
    suite = config.stash.get(SUITE, None)
    if suite is None or not suite.rows:
        return
    terminalreporter.write_line(load_text(suite.loadavg, load_average()))
    for text in busy_reasons(suite.loadavg, cpus(), suite.rows):
        terminalreporter.write_line(f"tiledmm: warning: {text}", yellow=True)


def _opt(config: pytest.Config, name: str) -> str | None:
    return config.getoption(f"--tiledmm-{name}") or os.environ.get(f"TILEDMM_BENCH_{name.upper()}")


def _flag(config: pytest.Config, name: str) -> bool:
    value = _opt(config, name)
    return bool(value) and value not in ("0", "false", "no")


def is_quick(config: pytest.Config) -> bool:
    return _flag(config, "quick")


def _backend_names(config: pytest.Config) -> list[str]:
    chosen = _opt(config, "backends")
    if chosen:
        return [s.strip() for s in chosen.split(",") if s.strip()]
    return sorted(r.name for r in tiledmm.backends())  # unavailable ones are skipped visibly


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "spec" not in metafunc.fixturenames:
        return
    config = metafunc.config
    quick = is_quick(config)
    sizes = _opt(config, "sizes")
    dtypes = [d.strip() for d in (_opt(config, "dtypes") or "float32").split(",") if d.strip()]
    avail = {r.name: r for r in tiledmm.backends()}
    specs = []
    for name in _backend_names(config):
        entry = avail.get(name)
        gpu = bool(entry and entry.available and tiledmm.get_backend(name).device().is_gpu)
        if sizes:
            shapes = parse_shapes(sizes)
        else:
            shapes = QUICK_SHAPES if quick else default_shapes(False, gpu)
        kernels = tiledmm.get_backend(name).kernels if entry and entry.available else ("naive",)
        for kernel in kernels:
            for dtype in dtypes:
                if kernel == "mma" and dtype == "float32":  # TF32 only when asked for
                    continue
                for m, n, k in shapes:
                    specs.append((name, kernel, dtype, (m, n, k)))
    ids = [bench_name(b, kern, dt, *shape)[1] for b, kern, dt, shape in specs]
    metafunc.parametrize("spec", specs, ids=ids)


def _settings(config: pytest.Config) -> Settings:
    quick = is_quick(config)
    s = Settings.for_mode(quick)  # the per-call cap of `tiledmm bench` (--quick or not)
    if quick:
        s.budget, s.min_rounds, s.max_rounds = 0.02, 2, 3
    if _flag(config, "all"):
        s.max_call_seconds = math.inf
    return s


@pytest.fixture(scope="session")
def settings(request: pytest.FixtureRequest) -> Settings:
    return _settings(request.config)


@pytest.fixture(scope="session")
def suite(request: pytest.FixtureRequest) -> Suite:
    return request.config.stash[SUITE]


def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict) -> None:
    """Add the devices, GPUs (nvidia-smi), OpenCL platforms and the start load."""
    bes = []
    for r in tiledmm.backends():
        if r.available:
            bes.append(tiledmm.get_backend(r.name))
    start = config.stash[SUITE].loadavg if SUITE in config.stash else None
    machine_info["tiledmm"] = tiledmm_machine_info(bes, start)
