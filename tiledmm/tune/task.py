"""A tuning task of `tiledmm tune`: one family on one shape, its candidate geometries (the
shipped default, the model's, the backend's search space, pruned to those that plan, that the
backend's kernels accept (``Backend.plan_problem``) and that run differently on the shape;
what other backends tuned on this device, to try first) and their results, by geometry key
(``Geometry.key``, what the tuner's log stores). :mod:`tiledmm.tune.search` runs the tasks.

A batched task's operands are stacks of matrices, and every candidate runs on them as
``tiledmm.matmul`` runs a batch (:func:`launch`: the engine's ``run_batch``, one batched launch
on the GPU backends), never as separate launches per matrix: a batch of 32 products of 512^3
fills an H200 in one launch where one of them does not, so tiles timed one matrix at a time
(small tiles, for the small grid) ran the batch at 0.6 of cuBLAS where the untuned tiles ran
0.78 (benches/data/h200-first-contact-cupy.json, session 18).
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from ..core import tuning
from ..core.engine import run_batch
from ..planner import shapefit
from ..planner.geometry import Geometry
from ..planner.make import default_geometry, make_plan
from ..planner.plans import PlanError

__all__ = ["Task", "launch", "stacked"]


class Task:
    """One family on one shape: the operands, the reference, the candidates and results
    (``tuner``: the :class:`tiledmm.tune.search.Tuner` running it, above this module)."""

    def __init__(self, tuner: Any, family: str, cls: str, shape: tuple[int, int, int, int]):
        self.tuner, self.family, self.cls, self.shape = tuner, family, cls, shape
        b, m, n, k = shape
        self.flops = 2 * b * m * n * k
        # (a batch's key says it is timed as dispatch runs it: logs of per-matrix launches differ)
        self.key = f"{tuner.dtype}|{family}|{b}x{m}x{n}x{k}" + ("|as-dispatch" if b > 1 else "")
        self.results: dict[str, dict] = {}
        dev, dt = tuner.device, tuner.dtype
        model = replace(default_geometry(family, dt, dev), source="model default")
        shipped = tuning.select(tuner.be, family, dt, dev, cls, user=False)
        self.default = shipped or model
        base = [model] if tuner.cold else [self.default, model]
        space = tuner.be.search_space(family, dt, dev) or []
        seen, self.space = set(), []
        #: the planner's predicted seconds per candidate (the search tries its fastest early)
        self.predicted: dict[str, float] = {}
        for g in [x for x in base if x is not None] + list(space):
            plan = self.plan(g)
            if plan is None or g.key() in seen:
                continue
            runs = _runs_as(plan)  # two stored geometries that run alike on this shape: one
            if runs not in seen:
                seen.update((g.key(), runs))
                self.space.append(g)
                self.predicted[g.key()] = plan.predicted_seconds
        self.pruned = len(space) + len(base) - len(self.space)
        #: what other backends tuned on this device (first guesses, when in this space)
        self.siblings = [Geometry.from_dict(e).key() for e in
                         tuning.sibling_entries(tuner.be.name, dt, family, dev, cls)]  # fmt: skip
        self.choice: dict | None = None
        self.default_gflops: float | None = None
        #: what the closing table says beside the winner (a class geometry slower here)
        self.note = ""
        self.host: Any = None

    def plan(self, g: Geometry, shape: tuple[int, int, int] | None = None):
        """The plan dispatch would run for stored geometry ``g`` on the task's shape (or
        ``shape``): ``shapefit.for_product`` applied, as ``tiledmm.matmul`` applies it."""
        m, n, k = shape or self.shape[1:]
        b = 1 if shape else self.shape[0]
        t = self.tuner
        g = shapefit.for_product(g, self.family, m, n, k, t.device,
                                 tuning.shape_class(m, n, k, b), b, t.dtype, t.be.name)  # fmt: skip
        try:
            plan = make_plan(m, n, k, dtype=t.dtype, kernel=self.family, device=t.device,
                             geometry=g, backend=t.be.name)  # fmt: skip
        except PlanError:
            return None
        return None if _refused(t.be, plan) else plan

    def ok(self) -> list[dict]:
        return [r for r in self.results.values() if r["status"] == "ok"]

    def best(self) -> dict | None:
        return max(self.ok(), key=lambda r: r["gflops"], default=None)


def launch(be: Any, plan: Any, A: Any, B: Any, C: Any) -> None:
    """``C = A @ B`` as ``tiledmm.matmul`` runs it: ``run`` for one matrix, the engine's
    ``run_batch`` for a stack (``(batch, m, k)``: the backend's ``run_batched``, else ``run``
    per matrix)."""
    if len(A.shape) == 2:
        be.run(plan, A, B, C)
    else:
        batch = tuple(C.shape[:-2])
        run_batch(be, plan, A, B, C, batch, batch, batch)


def stacked(be: Any, x: Any, dtype: Any) -> Any:
    """A host stack of matrices (``(batch, rows, cols)``) on ``be``: one matrix as a 2-D
    array, several as one 3-D array (what a caller's batched operand is)."""
    return be.asarray(x[0] if len(x) == 1 else x, dtype)


def _refused(be: Any, plan: Any) -> bool:
    """Whether ``be``'s kernels refuse ``plan`` (``Backend.plan_problem``): such a candidate
    is pruned before anything runs (numba-cpu's register kernel and an 8x8 thread tile)."""
    try:
        return be.plan_problem(plan) is not None
    except Exception:  # noqa: BLE001 - a plugin's check that crashes refuses the candidate
        return True


def _runs_as(plan: Any) -> str:
    """What a plan launches (tiles and options, ``split_k`` 1 as none): candidates that differ
    only before ``shapefit.for_product`` (``split_k="auto"`` resolving to 1, a tile halved to
    one already listed) are one candidate."""
    opts = sorted((k, v) for k, v in plan.options.items() if not (k == "split_k" and v in (1, "1")))
    return json.dumps([list(plan.block_tile), list(plan.thread_tile), opts], default=str)


#: public for first use's short list (``tiledmm.tune.shortlist``), which dedupes by it too
runs_as = _runs_as
