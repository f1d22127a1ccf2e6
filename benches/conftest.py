"""pytest-benchmark setup for ``pytest benches/``: options, machine info, parametrization.

    pytest benches/ --benchmark-json=out.json               # full sweep
    TILEDMM_BENCH_QUICK=1 pytest benches/ --benchmark-disable  # CI: tiny shapes, correctness

Environment (or the matching ``--tiledmm-*`` options): TILEDMM_BENCH_QUICK=1,
TILEDMM_BENCH_BACKENDS=numpy,opencl, TILEDMM_BENCH_SIZES=256,1000x3000x777,
TILEDMM_BENCH_DTYPES=float32,float64.
"""

from __future__ import annotations

import os

import pytest

import tiledmm
from tiledmm.bench import Settings, default_shapes, parse_shapes
from tiledmm.results import bench_name, tiledmm_machine_info

# Tiny shapes for the CI mode: a square, and primes so every edge tile is partial.
QUICK_SHAPES = [(64, 64, 64), (67, 71, 73)]


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("tiledmm benchmarks")
    g.addoption("--tiledmm-quick", action="store_true", help="tiny shapes, few rounds (CI)")
    g.addoption("--tiledmm-backends", help="comma list; default: every available backend")
    g.addoption("--tiledmm-sizes", help="comma list of N or MxNxK")
    g.addoption("--tiledmm-dtypes", help="comma list; default float32")


def _opt(config: pytest.Config, name: str) -> str | None:
    return config.getoption(f"--tiledmm-{name}") or os.environ.get(f"TILEDMM_BENCH_{name.upper()}")


def is_quick(config: pytest.Config) -> bool:
    value = _opt(config, "quick")
    return bool(value) and value not in ("0", "false", "no")


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


@pytest.fixture(scope="session")
def settings(request: pytest.FixtureRequest) -> Settings:
    quick = is_quick(request.config)
    s = Settings.for_mode(quick)
    if quick:
        s.budget, s.min_rounds, s.max_rounds = 0.02, 2, 3
    return s


def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict) -> None:
    """Add the devices, GPUs (nvidia-smi) and OpenCL platforms to ``machine_info``."""
    bes = []
    for r in tiledmm.backends():
        if r.available:
            bes.append(tiledmm.get_backend(r.name))
    machine_info["tiledmm"] = tiledmm_machine_info(bes)
