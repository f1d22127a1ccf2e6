"""Benchmark sweep: correctness first, then timing, beside the vendor library, in one run.

For every available backend x kernel family x shape x dtype: fresh random inputs in [-1, 1),
a NaN-poisoned output, the relative error against a float64 NumPy reference, then the median of
``backend.timings`` (device events on a GPU backend) after warm-up, the vendor GEMM
(``backend.vendor_matmul``) timed on the same shape and arrays, and the plan's intensity and
predicted time. Results are written as pytest-benchmark JSON (``pytest --benchmark-json``
schema); ``benches/`` reuses the helpers below.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core.backend import Backend
from ..core.tuning import shape_class
from ..model.tensorcore import roof
from ..planner.plans import PlanError
from ..tune.provenance import origin
from ..util.accuracy import reference, rel_error
from .busy import load_average, spread
from .pace import Pace, time_fn
from .results import benchmark_entry

__all__ = [
    "Settings",
    "Inputs",
    "Case",
    "default_shapes",
    "tolerance",
    "check_case",
    "measure_case",
    "run_sweep",
    "check_request",
]

_SQUARES_CPU = (256, 512, 1024, 2048)
_IRREGULAR_CPU = ((1000, 3000, 777), (1009, 1013, 1019))
_QUICK_CPU = ((128, 128, 128), (256, 256, 256), (384, 384, 384), (200, 300, 77), (97, 131, 61))
_SQUARES_GPU = (1024, 2048, 4096, 8192)
_IRREGULAR_GPU = ((4095, 4095, 4095), (1000, 3000, 777), (4096, 4096, 64), (1009, 1013, 1019))
_QUICK_GPU = ((512, 512, 512), (1024, 1024, 1024), (1000, 3000, 777), (1023, 1023, 1023))


@dataclass
class Settings:
    """How hard to measure: seconds of timing per case, rounds, warm-up, per-call cap."""

    budget: float = 1.0  # seconds of timed calls per case
    min_rounds: int = 5
    max_rounds: int = 30
    warmup: int = 2
    max_call_seconds: float = 5.0  # skip a case whose single call is predicted slower

    @classmethod
    def for_mode(cls, quick: bool, gpu: bool = False) -> Settings:
        if quick:
            return cls(budget=0.1, min_rounds=3, max_rounds=10, warmup=1, max_call_seconds=0.5)
        return cls(max_rounds=100 if gpu else 30)


def default_shapes(quick: bool, gpu: bool) -> list[tuple[int, int, int]]:
    """Square sweep plus irregular shapes (primes, thin K), sized for the device class."""
    if quick:
        return list(_QUICK_GPU if gpu else _QUICK_CPU)
    squares = [(n, n, n) for n in (_SQUARES_GPU if gpu else _SQUARES_CPU)]
    return squares + list(_IRREGULAR_GPU if gpu else _IRREGULAR_CPU)


def tolerance(dtype: str, k: int) -> float:
    """Accepted relative error: rounding that grows like sqrt(K), with headroom."""
    return 64 * float(np.finfo(dtype).eps) * math.sqrt(max(k, 1))


class Inputs:
    """Fresh random operands for one shape and dtype, and their float64 reference product."""

    def __init__(self, m: int, n: int, k: int, dtype: str, seed: int = 0) -> None:
        rng = np.random.default_rng([seed, m, n, k])
        dt = np.dtype(dtype)
        self.m, self.n, self.k, self.dtype = m, n, k, dt.name
        self.a = (rng.random((m, k), dtype=np.float64) * 2 - 1).astype(dt)
        self.b = (rng.random((k, n), dtype=np.float64) * 2 - 1).astype(dt)
        self._ref: np.ndarray | None = None

    @property
    def ref(self) -> np.ndarray:
        return self.reference()

    def reference(self, one_thread: bool = False) -> np.ndarray:
        """The float64 product, computed once (``one_thread``: on one BLAS thread, when a CPU
        kernel is timed next: ``tiledmm.util.accuracy.reference``)."""
        if self._ref is None:
            self._ref = reference(self.a, self.b, one_thread)
        return self._ref


@dataclass
class Case:
    """One backend's device arrays for one :class:`Inputs` (shared by its kernel families)."""

    backend: Backend
    inputs: Inputs
    A: Any = None
    B: Any = None
    out: Any = None
    vendor: dict = field(default_factory=dict)
    checked: float | None = None  # seconds of the last check_case call

    def __post_init__(self) -> None:
        dt = np.dtype(self.inputs.dtype)
        self.A = self.backend.asarray(self.inputs.a, dt)
        self.B = self.backend.asarray(self.inputs.b, dt)
        self.out = self.backend.empty((self.inputs.m, self.inputs.n), dt)


def _poison(be: Backend, out: Any) -> None:
    """Fill ``out`` with NaN so unwritten elements show (slices, not ``...``: Numba's device
    arrays do not index with an Ellipsis)."""
    try:
        out.fill(np.nan)
    except (AttributeError, TypeError):
        out[:, :] = be.asarray(np.full(out.shape, np.nan, out.dtype), np.dtype(out.dtype))


def check_case(case: Case, plan: Any) -> float:
    """Run the kernel once into a NaN-poisoned output; return the relative error (the call's
    seconds go to ``case.checked``)."""
    be = case.backend
    _poison(be, case.out)
    t0 = time.perf_counter()
    be.run(plan, case.A, case.B, case.out)
    be.synchronize()
    case.checked = time.perf_counter() - t0
    ref = case.inputs.reference(one_thread=plan.device.kind == "cpu")
    return rel_error(be.to_numpy(case.out), ref)


def timer_name(be: Backend) -> str:
    if type(be).timings is Backend.timings:
        return "host perf_counter around a synchronized call"
    return f"{type(be).__name__}.timings (device events)"


def vendor_call(case: Case) -> tuple[Backend, Callable[[], Any]]:
    """The vendor backend and one vendor GEMM on the case's arrays (its own copies of the
    inputs when the vendor is another backend)."""
    be = case.backend.vendor_backend()
    dt = np.dtype(case.inputs.dtype)
    A, B = (
        (case.A, case.B)
        if be is case.backend
        else (be.asarray(case.inputs.a, dt), be.asarray(case.inputs.b, dt))
    )
    return be, lambda: be.vendor_matmul(A, B)


def vendor_result(case: Case, settings: Settings) -> dict:
    """The vendor GEMM on the same arrays: error and median time (cached on the case)."""
    if not case.vendor:
        be, fn = vendor_call(case)
        t0 = time.perf_counter()
        c = fn()
        be.synchronize()
        first = time.perf_counter() - t0  # a slow first call was the warm-up (pace.time_fn)
        err = rel_error(be.to_numpy(c), case.inputs.ref)
        times = time_fn(be, fn, settings, first)
        case.vendor = {"seconds": statistics.median(times), "rel_error": err, "backend": be.name,
                       **spread(times)}  # fmt: skip
    return case.vendor


def measure_case(case: Case, plan: Any, settings: Settings,
                 tol: float | None = None) -> tuple[float, list[float]]:  # fmt: skip
    """(rel_error, seconds per call); times are empty when the result is wrong (error over
    ``tol``, by default :func:`tolerance` of the inputs' dtype)."""
    err = check_case(case, plan)
    if not err <= (tolerance(case.inputs.dtype, case.inputs.k) if tol is None else tol):
        return err, []
    be = case.backend
    return err, time_fn(be, lambda: be.run(plan, case.A, case.B, case.out), settings, case.checked)


def extra_info(case: Case, plan: Any, err: float, seconds: float, vendor: dict) -> dict:
    """The ``extra_info`` every result carries (DESIGN.md, "Results format")."""
    inp, dev = case.inputs, plan.device
    flops = 2 * inp.m * inp.n * inp.k
    return {
        "backend": case.backend.name,
        "kernel": plan.kernel,
        "device": dev.name,
        "device_kind": dev.kind,
        "dtype": inp.dtype,
        "shape_class": shape_class(inp.m, inp.n, inp.k),
        "m": inp.m,
        "n": inp.n,
        "k": inp.k,
        "gflops": flops / seconds / 1e9,
        "seconds": seconds,
        "vendor_gflops": flops / vendor["seconds"] / 1e9,
        "vendor_seconds": vendor["seconds"],
        "vendor_rel_error": vendor["rel_error"],
        "vendor_backend": vendor["backend"],
        "vendor_spread": vendor.get("spread", 0.0),  # IQR / median: busy.py reads these two
        "vendor_tick": vendor.get("tick"),
        "intensity": plan.intensity,
        "predicted_seconds": plan.predicted_seconds,
        "bound": plan.bound,
        "block_tile": list(plan.block_tile),
        "thread_tile": list(plan.thread_tile),
        "padding_waste": plan.padding_waste,
        "geometry_source": plan.geometry_source,
        "tiles_from": origin(plan.geometry_source),  # (tuned_from marks tuner experiments)
        "peak_flops": peak_of(plan, inp.dtype),
        "bandwidth": dev.bandwidth,
        "ceilings_source": dev.ceilings_source,
        "rel_error": err,
        "tolerance": tolerance(inp.dtype, inp.k),
        "timer": timer_name(case.backend),
    }


def peak_of(plan: Any, dtype: str) -> float:
    """The compute roof a result of ``plan`` is held to: the tensor cores' for the mma family
    (per dtype, TF32 when asked for), else the device's peak for ``dtype``."""
    if plan.kernel == "mma":
        return roof(plan.device, dtype, plan.options.get("precision"))[0]
    return plan.device.peak(dtype)


# --------------------------------------------------------------------------- the sweep


def progress_bar(total: int, enabled: bool | None = None) -> Any:
    """A tqdm bar on stderr (``enabled=None``: only when stderr is a terminal); a no-op bar
    without tqdm (the ``bench`` extra)."""
    try:
        from tqdm import tqdm
    except ImportError:
        return _NoBar()
    return tqdm(
        total=total, disable=None if enabled is None else not enabled, unit="case", leave=False
    )


class _NoBar:
    def set_description_str(self, text: str) -> None: ...

    def update(self, n: int = 1) -> None: ...

    def close(self) -> None: ...


@dataclass
class SweepResult:
    backends: list[Backend]
    benchmarks: list[dict] = field(default_factory=list)
    skipped: list[dict] = field(default_factory=list)
    failures: list[dict] = field(default_factory=list)
    loadavg: list[float] = field(default_factory=load_average)  # when the run started
    busy: list[str] = field(default_factory=list)  # busy.busy_reasons, once measured


def run_sweep(
    backends: list[Backend],
    *,
    kernels: list[str] | None = None,
    dtypes: Iterable[str] = ("float32",),
    shapes: list[tuple[int, int, int]] | None = None,
    quick: bool = False,
    seed: int = 0,
    progress: bool | None = None,
) -> SweepResult:
    """Measure every backend x family x dtype x shape; wrong results are recorded, not timed."""
    from ..core.dispatch import plan as make  # the public tiledmm.plan

    res = SweepResult(list(backends))
    todo = []
    for be in backends:
        gpu = be.device().is_gpu
        settings = Settings.for_mode(quick, gpu)
        for dtype in dtypes:
            if dtype not in be.dtypes:
                res.skipped.append({"backend": be.name, "dtype": dtype, "reason": "dtype"})
                continue
            for shape in shapes or default_shapes(quick, gpu):
                fams = [f for f in be.kernels if kernels is None or f in kernels]
                todo.append((be, settings, dtype, shape, fams))
    bar = progress_bar(sum(len(t[4]) for t in todo), progress)
    speed = Pace()  # the rule that skips slow cases, shared with benches/
    inputs: dict[tuple, Inputs] = {}
    for be, settings, dtype, (m, n, k), fams in todo:
        key = (m, n, k, dtype)
        if key not in inputs:
            inputs.clear()  # keep one shape's operands alive at a time
            inputs[key] = Inputs(m, n, k, dtype, seed)
        case = Case(be, inputs[key])
        for fam in fams:
            bar.set_description_str(f"{be.name} {fam} {dtype} {m}x{n}x{k}")
            where = {"backend": be.name, "kernel": fam, "dtype": dtype, "m": m, "n": n, "k": k}
            try:
                _run_case(res, case, fam, where, settings, speed, make)
            finally:
                bar.update()
        del case
    bar.close()
    return res


def _run_case(res, case, fam, where, settings, speed, make) -> None:
    """Plan, check and time one family on one case; record a result, skip or failure."""
    be, (m, n, k, dtype) = case.backend, (where[x] for x in ("m", "n", "k", "dtype"))
    reason = speed.skip_reason(be.name, fam, dtype, 2 * m * n * k, settings.max_call_seconds)
    if reason:
        res.skipped.append(where | {"reason": reason})
        return
    try:
        p = make(m, n, k, dtype=dtype, backend=be.name, kernel=fam)
    except PlanError as exc:  # the family does not take this dtype (mma: float32 without TF32)
        res.skipped.append(where | {"reason": str(exc)})
        return
    try:
        err = check_case(case, p)
        if not err <= tolerance(dtype, k):
            res.failures.append(where | {"rel_error": err, "tolerance": tolerance(dtype, k)})
            return
        cap = settings.max_call_seconds
        reason = speed.after_check(be.name, fam, dtype, 2 * m * n * k, case.checked, cap)
        if reason:  # correct, but too slow to time
            res.skipped.append(where | {"reason": reason, "rel_error": err})
            return
        times = time_fn(be, lambda: be.run(p, case.A, case.B, case.out), settings, case.checked)
        vendor = vendor_result(case, settings)
    except Exception as exc:  # noqa: BLE001 - one broken case must not end the sweep
        res.failures.append(where | {"error": f"{type(exc).__name__}: {exc}"})
        return
    seconds = statistics.median(times)
    speed.record(be.name, fam, dtype, 2 * m * n * k, seconds)
    info = extra_info(case, p, err, seconds, vendor)
    res.benchmarks.append(benchmark_entry(info, times, settings))


def check_request(
    backends: list[Backend], kernels: list[str] | None, dtypes: list[str]
) -> list[str]:
    """Refuse a sweep that would measure nothing; returns the dtypes' canonical names."""
    names = ", ".join(be.name for be in backends)
    offered = list(dict.fromkeys(k for be in backends for k in be.kernels))
    for kern in kernels or ():
        if kern not in offered:
            raise ValueError(f"no kernel {kern!r} in {names}; choose from {', '.join(offered)}")
    dtypes = [d.strip() for d in dtypes if d.strip()]
    if not dtypes:
        raise ValueError("no dtype given; use float32, float64 or both (comma list)")
    runs = list(dict.fromkeys(d for be in backends for d in be.dtypes))
    out = []
    for text in dtypes:
        try:
            dt = np.dtype(text).name
        except TypeError:
            raise ValueError(f"{text!r} is not a dtype; use one of {', '.join(runs)}") from None
        if dt not in runs:
            raise ValueError(f"no selected backend ({names}) runs {dt}; they run {', '.join(runs)}")
        out.append(dt)
    return list(dict.fromkeys(out))
