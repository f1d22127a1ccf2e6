"""Every available backend x kernel family x shape: correct first, then timed beside the vendor.

The pytest-benchmark stats are host wall time around a synchronized call (pedantic mode, so
queued GPU work is inside each round); ``extra_info["gflops"]`` is the median of the backend's
own ``timings`` (device events on a GPU), the figure the report uses.
"""

from __future__ import annotations

import statistics
import time

import pytest

import tiledmm
from tiledmm.bench import Case, Inputs, check_case, extra_info, time_fn, tolerance, vendor_result

_inputs: dict[tuple, Inputs] = {}
_cases: dict[tuple, Case] = {}


def _case(be: tiledmm.Backend, dtype: str, shape: tuple[int, int, int]) -> Case:
    key = (*shape, dtype)
    if key not in _inputs:
        _inputs.clear()
        _cases.clear()
        _inputs[key] = Inputs(*shape, dtype)
    if (be.name, key) not in _cases:
        _cases[(be.name, key)] = Case(be, _inputs[key])  # the vendor time is shared per case
    return _cases[(be.name, key)]


def test_matmul(benchmark, spec, settings) -> None:
    name, kernel, dtype, (m, n, k) = spec
    entry = {r.name: r for r in tiledmm.backends()}.get(name)
    if entry is None or not entry.available:
        pytest.skip(f"backend {name!r} unavailable: {entry.reason if entry else 'not installed'}")
    be = tiledmm.get_backend(name)
    if kernel not in be.kernels or dtype not in be.dtypes:
        pytest.skip(f"{name} has no {kernel} kernel for {dtype}")
    case = _case(be, dtype, (m, n, k))
    plan = tiledmm.plan(m, n, k, dtype=dtype, backend=name, kernel=kernel)

    t0 = time.perf_counter()
    err = check_case(case, plan)  # NaN-poisoned output, float64 reference
    first = time.perf_counter() - t0
    assert err <= tolerance(dtype, k), f"relative error {err:.3g} over {tolerance(dtype, k):.3g}"
    if first > 4 * settings.max_call_seconds:
        pytest.skip(f"about {first:.3g} s per call: too slow to time at this size")

    def target() -> None:
        be.run(plan, case.A, case.B, case.out)
        be.synchronize()

    times = time_fn(be, lambda: be.run(plan, case.A, case.B, case.out), settings)
    vendor = vendor_result(case, settings)
    benchmark.group = f"{dtype} {m}x{n}x{k}"
    benchmark.extra_info.update(extra_info(case, plan, err, statistics.median(times), vendor))
    benchmark.pedantic(target, rounds=len(times), warmup_rounds=1, iterations=1)
