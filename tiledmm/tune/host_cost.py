"""A backend's per-call host cost, measured (``tiledmm calibrate`` and first-use calibration):
what one call costs beyond its kernel, which the planner adds to every prediction
(``DeviceSpec.host_cost``), so that small and skinny products are predicted too.

A tiny product (:data:`SHAPE`) is called as users call it: the backend's own arrays
(``asarray``: device arrays where it has them), its default path (``kernel="auto"``), through
the engine (the front door's path for native arrays: the hot path after the first call), each
call waited for (``synchronize``). The host cost is the median wall time less the kernel's
time: its device time where the backend times the device (a ``timings`` of its own: CUDA
events, OpenCL profiling events), else the model's time for that plan (the default
``timings`` is wall time; a tiny product's kernel is a small part of it). So it holds the
launch path, argument packing, OpenCL's enqueue and buffer allocation, numba's dispatcher,
the result's allocation and the engine's lookup. Where the backend does not take NumPy
arrays, the same product from NumPy operands to a NumPy result (upload and download too) is
recorded beside it as ``host_arrays``. Only the Backend interface and the engine are used.
"""

from __future__ import annotations

import datetime as _dt
import statistics
import threading
import time
from typing import Any

import numpy as np

from ..core import dispatch, engine
from ..core.backend import Backend

__all__ = ["SHAPE", "CALLS", "measure_host_cost", "calibrating", "device_timed"]

#: The tiny product (M, N, K): its kernel's work is negligible on every device.
SHAPE = (4, 4, 4)
#: Timed calls (full run, ``--quick``) after :data:`WARMUP` untimed ones.
CALLS, WARMUP = {False: 200, True: 40}, 3
#: Calls timed at least, however late (a median of fewer says little).
MIN_CALLS = 5
#: A first call this many times the median compiled (or loaded) a kernel: compiles take
#: 10^2-10^4 times a tiny product's call.
COMPILED = 10

_local = threading.local()


def calibrating() -> bool:
    """Whether this thread is measuring now (the engine's first-use hook then does nothing:
    the tiny product must not start first use again)."""
    return bool(getattr(_local, "on", False))


def device_timed(be: Backend) -> bool:
    """Whether ``be.timings`` times the device (the backend overrides the wall-clock default)."""
    return type(be).timings is not Backend.timings


def measure_host_cost(be: Backend, quick: bool = False, dtype: str = "float32",
                      deadline: float | None = None,
                      family: str = "auto") -> dict[str, Any]:  # fmt: skip
    """The host cost entry of ``be`` (a calibration record's ``host_cost[be.name]``):
    ``seconds`` (median wall less the kernel), ``wall``, ``kernel`` and how it was known,
    ``host_arrays`` where relevant. Calls stop at ``deadline`` (``time.monotonic``), after
    :data:`MIN_CALLS` at least. ``family``: the kernel family the tiny product runs ("auto":
    the one dispatch picks for it)."""
    dtype = dtype if dtype in be.dtypes else be.dtypes[0]
    dt = np.dtype(dtype)
    m, n, k = SHAPE
    rng = np.random.default_rng(0)
    a, b = (rng.random((m, k)) * 2 - 1).astype(dt), (rng.random((k, n)) * 2 - 1).astype(dt)
    A, B = be.asarray(a, dt), be.asarray(b, dt)
    calls = CALLS[bool(quick)]
    _local.on, was = True, calibrating()
    try:
        entry, compiled = _entry(be, family, dtype, A, B, calls, deadline)
        own = dispatch.plan_for(be, m, n, k, dtype, "auto").kernel
        if not compiled and not device_timed(be) and own != entry["family"]:
            # the family asked for compiled nothing here (its first call ran as fast as the
            # rest), so the tiny product's own family costs nothing to run too; the lighter
            # one is kept: a family that pads the tiny product to a large block puts that
            # block's work in the wall, where the model's kernel time misses it (NumPy's
            # register family on the 2-core EPYC: 1.16 ms a call, 0.32 ms of it the model's
            # kernel, where its naive family's call takes 19 us)
            light, _ = _entry(be, "auto", dtype, A, B, calls, deadline)
            if light["seconds"] < entry["seconds"]:
                entry = dict(light, heavier={entry["family"]: entry["seconds"]})
        if not be.accepts(a):  # host operands in, a host result out: the copies as well
            fam = entry["family"]
            _, host = _walls(be, lambda: engine.matmul(a, b, backend=be, kernel=fam), calls,
                             deadline)  # fmt: skip
            entry["host_arrays"] = max(0.0, statistics.median(host) - entry["kernel"])
    finally:
        _local.on = was
    return entry


def _entry(be: Backend, family: str, dtype: str, A: Any, B: Any, calls: int,
           deadline: float | None) -> tuple[dict[str, Any], bool]:  # fmt: skip
    """The host cost entry of the tiny product on ``family``, and whether its first call took
    :data:`COMPILED` times the median or more (it compiled or loaded something)."""
    m, n, k = SHAPE
    call = lambda: engine.matmul(A, B, backend=be, kernel=family)  # noqa: E731
    first, wall = _walls(be, call, calls, deadline)
    plan = dispatch.plan_for(be, m, n, k, dtype, family)
    if device_timed(be):
        repeat = max(MIN_CALLS, min(calls, len(wall)))
        kernel = statistics.median(be.timings(call, repeat=repeat, warmup=1))
        how = "device time (the backend's timings)"
    else:
        kernel = plan.predicted_seconds - plan.device.host_cost(be.name)
        how = "the model's kernel time (timings are wall time)"
    entry = {
        "seconds": max(0.0, statistics.median(wall) - kernel),
        "wall": statistics.median(wall),
        "kernel": kernel,
        "kernel_from": how,
        "calls": len(wall),
        "shape": [m, n, k],
        "dtype": dtype,
        "family": plan.kernel,
        "date": _dt.date.today().isoformat(),
    }
    return entry, first >= COMPILED * statistics.median(wall)


def _walls(be: Backend, call, calls: int, deadline: float | None) -> tuple[float, list[float]]:
    """The first warm-up call's wall seconds, and those of each of up to ``calls`` calls after
    the warm-up, each waited for."""
    first = 0.0
    for i in range(WARMUP):
        t0 = time.perf_counter()
        call()
        be.synchronize()
        first = first if i else time.perf_counter() - t0
    out: list[float] = []
    while len(out) < calls and (len(out) < MIN_CALLS or deadline is None
                                or time.monotonic() < deadline):  # fmt: skip
        t0 = time.perf_counter()
        call()
        be.synchronize()
        out.append(time.perf_counter() - t0)
    return first, out
