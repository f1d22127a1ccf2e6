"""The short list first-use tuning times (:mod:`tiledmm.tune.first_use`), and its timing.

Candidates, in order: the tiles dispatch runs now (the user database's fallback, the shipped
table or the model default), the shipped default, what other backends tuned on this device
(``tuning.sibling_entries``: CuPy and OpenCL run one kernel source), then the planner's
fastest predictions over the backend's search space (``Backend.search_space``), one per block
and thread tile (the model ranks tiles, rarely options: ``tune_search.MODEL_FIRST``), and one
more per tile with K slices (``split_k``) where the space has them and they slice this product:
a grid effect the model ranks right (``tiledmm tune`` tries them early for the same reason).
Without that, the current tiles' options (no K slices) chose every tile's options, and the
H200's skinny products never saw a split-K candidate, although the model ranks them first
(4096x32x4096: 128x32 in 16 slices predicted 0.034 ms, the best tile without slices 0.059).
Planning a GPU space costs milliseconds per candidate (3840 candidates for CuPy's register
family), so the model ranks these representatives only and stops planning after
:data:`RANK_SHARE` of the budget.

Each candidate is checked as ``tiledmm tune`` checks (``Tuner.odd_ok``: a NaN-poisoned output
against a float64 reference on a 97x131x67 product, edges in every dimension), then run once on
the caller's shape into a NaN-poisoned output (every element written, sampled rows against
float64), then timed with the backend's ``timings``. A batched product runs as
``tiledmm.matmul`` runs it, the whole batch in one call (``tiledmm.tune.task.launch``). Compile
errors, crashes and wrong results are recorded and never chosen. The fastest two and the
current tiles race in alternating rounds (``Tuner.rounds``) where the budget leaves time; the
current tiles stay on a tie.
"""

from __future__ import annotations

import math
import re
import statistics
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from ..core import tuning
from ..core.backend import Backend
from ..planner import shapefit
from ..planner.geometry import Geometry
from ..planner.make import default_geometry
from ..util.accuracy import rel_error
from .search import TOL, Tuner
from .task import Task, launch, runs_as, stacked

__all__ = ["smaller_shape", "timing_shape", "Shortlist", "RANK_SHARE", "SAMPLE_ROWS",
           "SAMPLE_MATRICES", "OPERAND_CAP"]  # fmt: skip

#: Of the budget, at most this share goes to ranking the search space with the planner.
RANK_SHARE = 0.3
#: Rows of the caller-shape output compared with a float64 reference (every element is
#: checked for being written).
SAMPLE_ROWS = 16
#: Matrices of a batch whose sampled rows are compared (every element is checked for being
#: written).
SAMPLE_MATRICES = 4
#: Elements of one operand or result (the batch included) first use times at most: a larger
#: product is timed on a smaller shape of its class (making 8192^3's random operands and their
#: reference took the H200 run's whole budget before anything was timed).
OPERAND_CAP = 1 << 24


class Shortlist(Task):
    """One family on one shape (``(batch, m, n, k)``) with a short candidate list: a
    :class:`~tiledmm.tune.task.Task` (its ``plan`` applies ``shapefit`` as dispatch does) that
    ranks only a bounded part of the search space."""

    def __init__(self, be: Backend, family: str, dtype: str, cls: str,
                 shape: tuple[int, int, int, int], current: Geometry, size: int,
                 deadline: float, clock: Callable[[], float] = time.monotonic):  # fmt: skip
        tuner = Tuner(be, dtype, budget=max(0.0, deadline - clock()), resume=False)
        self.tuner, self.family, self.cls = tuner, family, cls
        self.resize(shape)
        self.predicted: dict[str, float] = {}
        self.choice, self.default_gflops = None, None
        dev = tuner.device
        self.current = current
        model = replace(default_geometry(family, dtype, dev), source="model default")
        shipped = tuning.select(be, family, dtype, dev, cls, user=False)
        self.default = shipped or model
        self.siblings = [Geometry.from_dict(e).key() for e in
                         tuning.sibling_entries(be.name, dtype, family, dev, cls)]  # fmt: skip
        self.space = be.search_space(family, dtype, dev) or []
        self.candidates = self._pick(size, [current, self.default], model, deadline, clock)

    # ------------------------------------------------------------------ the list

    def _pick(self, size, first, model, deadline, clock) -> list[Geometry]:
        out: list[Geometry] = []
        seen: set[str] = set()

        def add(g: Geometry | None) -> None:
            if g is None or len(out) >= size:
                return
            plan = self.plan(g)
            if plan is None:
                return
            runs = runs_as(plan)
            if g.key() not in seen and runs not in seen:
                seen.update((g.key(), runs))
                out.append(g)
                self.predicted[g.key()] = plan.predicted_seconds

        for g in first:
            add(g)
        by_key = {g.key(): g for g in self.space}
        for gk in self.siblings:
            add(by_key.get(gk))
        for g in self.ranked(deadline, clock) or [model]:
            add(g)
        return out

    def ranked(self, deadline: float, clock) -> list[Geometry]:
        """The search space's tiles, fastest predicted first: one geometry per block and
        thread tile (the current tiles' options where the space has them), planned nearest
        the current tiles first until :data:`RANK_SHARE` of the budget is spent."""
        stop = clock() + RANK_SHARE * max(0.0, deadline - clock())
        mine = dict(self.current.options)
        tiles: dict[tuple, Geometry] = {}
        for g in self.space:  # per tile: its options nearest the current ones, with K slices too
            key = (g.block_tile, g.thread_tile, _sliced(g))
            old = tiles.get(key)
            if old is None or _agree(g, mine) > _agree(old, mine):
                tiles[key] = g
        here = (*self.current.block_tile, *self.current.thread_tile)

        def far(g: Geometry) -> float:  # tiles near the current ones are ranked first
            return sum(abs(math.log2(a / b)) for a, b in zip((*g.block_tile, *g.thread_tile),
                                                              here, strict=True))  # fmt: skip

        scored = []
        b, m, n, k = self.shape
        t = self.tuner
        for g in sorted(tiles.values(), key=far):
            if clock() > stop:
                break
            fit = shapefit.for_product(g, self.family, m, n, k, t.device, self.cls, b, t.dtype,
                                       t.be.name) if _sliced(g) else g  # fmt: skip
            if _sliced(g) and not _sliced(fit):
                continue  # one slice on this product: the same launch as the tile without
            plan = self.plan(g)
            if plan is not None:
                scored.append((plan.predicted_seconds, len(scored), g))
        return [g for _, _, g in sorted(scored)]

    # ------------------------------------------------------------------ measuring

    def resize(self, shape: tuple[int, int, int, int]) -> None:
        """Time on ``shape`` from now on (results so far are dropped; call :meth:`operands`)."""
        b, m, n, k = self.shape = tuple(shape)
        self.batch = b  # the whole batch, in one call, as dispatch runs it
        self.flops = 2 * b * m * n * k
        self.key = f"{self.tuner.dtype}|{self.family}|{b}x{m}x{n}x{k}|first-use"
        self.results: dict[str, dict] = {}
        self.host = None

    def operands(self) -> None:
        """Random operands of the shape on the device (stacks for a batch, as the caller's),
        the float64 rows of a few matrices the check compares."""
        b, m, n, k = self.shape
        be, dt, rng = self.tuner.be, np.dtype(self.tuner.dtype), self.tuner.np_rng
        a, y = _normal(rng, (b, m, k), dt), _normal(rng, (b, k, n), dt)
        rows = np.sort(rng.choice(m, size=min(m, SAMPLE_ROWS), replace=False))
        mats = sorted({0, b - 1, *rng.choice(b, size=min(b, SAMPLE_MATRICES - 2), replace=False)})
        ref = {i: a[i, rows].astype(np.float64) @ y[i].astype(np.float64) for i in mats}
        A, B = stacked(be, a, dt), stacked(be, y, dt)
        self.host = (rows, ref, A, B, be.asarray(np.zeros((*A.shape[:-2], m, n), dt), dt))

    def check(self, plan) -> float:
        """Worst relative error on the shape, run as dispatch runs it: a NaN-poisoned output,
        every element written, sampled rows of a few matrices against float64."""
        be, dt = self.tuner.be, np.dtype(self.tuner.dtype)
        rows, ref, A, B, _ = self.host
        C = be.asarray(np.full((*A.shape[:-2], plan.m, plan.n), np.nan, dt), dt)
        launch(be, plan, A, B, C)
        be.synchronize()
        c = be.to_numpy(C).reshape(-1, plan.m, plan.n)
        if not np.isfinite(c).all():
            return math.inf
        return max(rel_error(c[i, rows], r) for i, r in ref.items())

    def evaluate(self, g: Geometry, reps_time: float, skip_edges: bool = False,
                 max_call: float = math.inf) -> dict:  # fmt: skip
        """Check and time one candidate; the record says what happened (``"slow"``: one warm
        call took over ``max_call`` seconds, so it was not timed further)."""
        be, tuner = self.tuner.be, self.tuner
        rec: dict[str, Any] = dict(geometry=g.key(), tiles=str(g))
        plan = self.plan(g)
        t0 = time.perf_counter()
        try:
            if not skip_edges and not tuner.odd_ok(self, g):
                rec.update(status="wrong result", error="wrong or failed on 97x131x67")
                return self._keep(rec)
            err = self.check(plan)
            rec.update(rel_error=err if math.isfinite(err) else None,
                       first_seconds=time.perf_counter() - t0)  # fmt: skip
            if not err <= TOL.get(tuner.dtype, 1e-4):
                rec.update(status="wrong result")
                return self._keep(rec)
            _, _, A, B, C = self.host
            one = tuner.again(plan, A, B, C)  # warm now: the check compiled it
            if one > max_call:
                rec.update(status="slow", seconds=one)
                return self._keep(rec)

            def fn():
                launch(be, plan, A, B, C)

            reps = int(min(10, max(3, reps_time / max(one, 1e-6))))
            s = statistics.median(be.timings(fn, repeat=reps, warmup=0))
            rec.update(status="ok", seconds=s, gflops=self.flops / s / 1e9)
        except Exception as exc:  # noqa: BLE001 - a broken candidate is a result, never a crash
            name = type(exc).__name__
            kind = "compile error" if re.search(r"compil|build|nvrtc", name + str(exc), re.I) \
                else "launch failure"  # fmt: skip
            rec.update(status=kind, error=f"{name}: {str(exc)[:300]}")
        return self._keep(rec)

    def _keep(self, rec: dict) -> dict:
        self.results[rec["geometry"]] = rec
        return rec

    def entry(self, win: str, times: dict[str, float], call_shape, extra: dict) -> dict:
        """The database entry of geometry ``win`` in ``tiledmm tune``'s schema (its
        ``measured.default``: the tiles that ran before), ``extra`` added to ``measured``."""
        g, dev, dtype = Geometry.from_key(win), self.tuner.device, self.tuner.dtype
        base = times.get(self.current.key())
        date = self.tuner.run_id
        meas = dict(gflops=float(f"{self.flops / times[win] / 1e9:.6g}"), seconds=times[win],
                    shape=list(self.shape), date=date, of_vendor=None,
                    default_gflops=float(f"{self.flops / base / 1e9:.6g}") if base else None,
                    default=str(self.current), candidates=len(self.results),
                    call_shape=list(call_shape), tolerance=TOL.get(dtype, 1e-4),
                    **extra)  # fmt: skip
        e = dict(device=dev.name, vendor=dev.vendor, kind=dev.kind, backend=self.tuner.be.name,
                 dtype=dtype, family=self.family, shape_class=self.cls,
                 **g.to_dict(), measured=meas,
                 source=f"first use on {dev.name}, {date[:10]}")  # fmt: skip
        if tuning.device_arch(dev):
            e["arch"] = tuning.device_arch(dev)
        return e

    def race(self, keys: list[str]) -> dict[str, float]:
        """Seconds per call of ``keys``' geometries timed in alternating rounds."""
        by_key = {g.key(): g for g in self.candidates}
        _, _, A, B, C = self.host
        times = self.tuner.rounds(self, [by_key[k] for k in keys], (None, None, None, A, B, C))
        return dict(zip(keys, times, strict=True))


def _agree(g: Geometry, opts: dict) -> int:
    return sum(opts.get(k) == v for k, v in g.options)


def _sliced(g: Geometry) -> bool:
    """Whether ``g`` runs K slices (``split_k`` "auto" or a count over 1)."""
    return str(dict(g.options).get("split_k", 1)) not in ("1", "None")


def _normal(rng, shape: tuple, dt: np.dtype) -> np.ndarray:
    if dt in (np.float32, np.float64):
        return rng.standard_normal(shape, dtype=dt)
    return rng.standard_normal(shape).astype(dt)


def smaller_shape(shape, cls: str) -> tuple | None:
    """``shape`` made smaller within class ``cls``: a batch of 4 or more halved (each matrix
    as the caller's), else its dimensions over 512 halved; None when neither stays in the
    class."""
    b, m, n, k = shape
    if b >= 4:
        return (b // 2, m, n, k)
    smaller = tuple(d // 2 if d > 2 * tuning.SKINNY_K else d for d in (m, n, k))
    if smaller == (m, n, k) or tuning.shape_class(*smaller, b) != cls:
        return None
    return (b, *smaller)


def timing_shape(predict, shape, cls: str, limit: float) -> tuple | None:
    """``shape``, or the largest :func:`smaller_shape` one whose call of the current tiles the
    model predicts within ``limit`` seconds and whose operands hold at most
    :data:`OPERAND_CAP` elements each; None when there is none."""
    while shape is not None:
        b, m, n, k = shape
        if b * max(m * k, k * n, m * n) <= OPERAND_CAP:
            t = predict(shape)
            if t is None or t <= limit:
                return shape if t is not None else None
        shape = smaller_shape(shape, cls)
    return None
