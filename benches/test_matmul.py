"""Every available backend x kernel family x shape: correct first, then timed beside the vendor.

The pytest-benchmark stats are host wall time around a synchronized call (pedantic mode, so
queued GPU work is inside each round); ``extra_info["gflops"]`` is the median of the backend's
own ``timings`` (device events on a GPU), the figure the report uses. On a host-timed backend
the two are the same calls: pytest-benchmark's rounds are the timed rounds after the probe.
Slow cases are skipped by the rule of ``tiledmm bench`` (``conftest.py``).
"""

from __future__ import annotations

import statistics
import time

import pytest

import tiledmm
from tiledmm.bench.pace import time_fn
from tiledmm.bench.sweep import (
    Case,
    Inputs,
    check_case,
    extra_info,
    tolerance,
    vendor_result,
)

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


def test_matmul(benchmark, spec, settings, suite) -> None:
    name, kernel, dtype, (m, n, k) = spec
    entry = {r.name: r for r in tiledmm.backends()}.get(name)
    if entry is None or not entry.available:
        pytest.skip(f"backend {name!r} unavailable: {entry.reason if entry else 'not installed'}")
    be = tiledmm.get_backend(name)
    if kernel not in be.kernels or dtype not in be.dtypes:
        pytest.skip(f"{name} has no {kernel} kernel for {dtype}")
    flops = 2 * m * n * k
    why = suite.pace.skip_reason(name, kernel, dtype, flops, settings.max_call_seconds)
    if why:  # the rule of `tiledmm bench`: predicted from this family's last shape
        pytest.skip(why)
    case = _case(be, dtype, (m, n, k))
    plan = tiledmm.plan(m, n, k, dtype=dtype, backend=name, kernel=kernel)

    err = check_case(case, plan)  # NaN-poisoned output, float64 reference
    assert err <= tolerance(dtype, k), f"relative error {err:.3g} over {tolerance(dtype, k):.3g}"
    why = suite.pace.after_check(
        name, kernel, dtype, flops, case.checked, settings.max_call_seconds
    )
    if why:  # correct, but its check alone outlasted the cap (as in `tiledmm bench`)
        pytest.skip(why)

    def target() -> None:
        be.run(plan, case.A, case.B, case.out)
        be.synchronize()

    def run() -> None:
        be.run(plan, case.A, case.B, case.out)

    if type(be).timings is tiledmm.Backend.timings and not benchmark.disabled:
        # Host-timed: the backend's timings are pytest-benchmark's rounds (nothing runs twice).
        recorded: list[float] = []

        def timed() -> None:
            t0 = time.perf_counter()
            target()
            recorded.append(time.perf_counter() - t0)

        def rest(rounds: int) -> list[float]:
            benchmark.pedantic(timed, rounds=rounds, warmup_rounds=0, iterations=1)
            return list(recorded)

        times = time_fn(be, run, settings, case.checked, rest)
        if not recorded:  # one round was enough: pytest-benchmark still needs its own
            benchmark.pedantic(target, rounds=1, warmup_rounds=0, iterations=1)
    else:
        times = time_fn(be, run, settings, case.checked)
        benchmark.pedantic(target, rounds=len(times), warmup_rounds=1, iterations=1)
    vendor = vendor_result(case, settings)
    seconds = statistics.median(times)
    suite.pace.record(name, kernel, dtype, flops, seconds)
    benchmark.group = f"{dtype} {m}x{n}x{k}"
    benchmark.extra_info.update(extra_info(case, plan, err, seconds, vendor))
    suite.rows.append(benchmark.extra_info)
