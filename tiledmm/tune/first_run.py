"""One first-use run (:mod:`tiledmm.tune.first_use` decides when, and saves what it chose): the
short list of one shape class (:mod:`tiledmm.tune.shortlist`) checked and timed on one shape
before a deadline.

Every second from the start counts against the deadline: ranking, the operands, the current
tiles' first run and every candidate's compile, checks and timing. Before, the current tiles'
first run was added to the deadline (the untuned call compiles them anyway) and a candidate was
begun whenever the median cost of the others fitted; with CuPy's compiles each run took 2.0-3.2
s of a 2 s budget on the H200 (benches/results/logs/h200-first-contact-cupy-s18.txt). Now a
candidate is begun only when the time left holds the costliest evaluation so far (the current
tiles' included, whose cost holds a compile): a run overruns by at most a compile slower than
every one before it. "Before" spans the process (:data:`costliest`, per backend): on an H100
(session 21) the classes whose current tiles another class had compiled began their next
candidate on that cheap first evaluation, and its compile took them to 2.4-3.0 s of 2. Where
that costliest evaluation alone fills the class's budget (numba-cuda: one compile of a register
kernel took 5-6 s on an H100, session 19, each class then 5-13 s of its 2), no candidate could
begin after the first evaluation, so the run is not started at all.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any, NamedTuple

from ..core import tuning
from ..core.backend import Backend
from ..planner import shapefit
from ..planner.geometry import Geometry
from ..planner.make import default_geometry, make_plan
from ..planner.plans import PlanError
from .shortlist import Shortlist, smaller_shape, timing_shape

__all__ = ["Choice", "run", "gain", "current_tiles", "CALLS_IN_BUDGET", "CALLS_PER_CANDIDATE",
           "REPEAT_SHARE", "KEEP_MARGIN"]  # fmt: skip

#: calls of the current tiles the budget must hold for the model to time a shape as it is
CALLS_IN_BUDGET = 12
#: calls one candidate costs (the check, three timed): the list must fit, else a smaller shape
CALLS_PER_CANDIDATE = 4
#: of the time left, what each candidate's timed repeats may take
REPEAT_SHARE = 0.1
#: a candidate replaces the tiles before only where it ran this many times faster: a short
#: list timed in seconds is noisy (on an H100, session 19, first use saved skinny_k tiles
#: timed 1.02x faster on 4096x4096x64 that then ran 8192x8192x64 at 0.79 of cuBLAS, the tiles
#: before at 0.97)
KEEP_MARGIN = 1.05

log = logging.getLogger("tiledmm")

#: backend name -> the costliest evaluation (compile included) any run of this process timed
#: (runs of two classes may race on it: a lost update only leaves the smaller of two costs)
costliest: dict[str, float] = {}


class Choice(NamedTuple):
    """What a run chose: the winner's key, seconds per call of each geometry timed (raced where
    the budget left time), the tiles that ran before (their key), and the short list (its
    shape, results and ``entry``)."""

    win: str
    times: dict[str, float]
    base: str
    task: Shortlist


def current_tiles(be: Backend, family: str, dtype: str, dev: Any, cls: str) -> Geometry:
    """The tiles dispatch runs now for this class (as ``dispatch`` chooses them)."""
    geo = tuning.select(be, family, dtype, dev, cls)
    if geo is None:
        geo = default_geometry(family, dtype, dev)
    return Geometry(geo.block_tile, geo.thread_tile, geo.options, None, geo.source)


def _predictor(be: Backend, family: str, dtype: str, cls: str, current: Geometry):
    """Seconds the model predicts for one call of ``current`` on a shape (the whole batch, as
    dispatch plans it: one matrix's plan, times the batch)."""
    dev = be.device()

    def predict(shape) -> float | None:
        b, m, n, k = shape
        geo = shapefit.for_product(current, family, m, n, k, dev, cls, b, dtype, be.name)
        try:
            plan = make_plan(m, n, k, dtype=dtype, kernel=family, device=dev, geometry=geo,
                             backend=be.name)  # fmt: skip
        except PlanError:
            return None
        return plan.predicted_seconds * b

    return predict


def run(be: Backend, family: str, dtype: str, cls: str, shape, size: int, budget: float,
        clock: Callable[[], float], what: str) -> tuple[Choice | None, bool]:  # fmt: skip
    """Check and time the short list (at most ``size``) of ``cls`` on ``shape`` (``(batch, m,
    n, k)``) within ``budget`` seconds from now; (the choice or None, whether to remember a
    failure). ``what`` names the class in the log lines."""
    dev = be.device()
    start = clock()
    deadline = start + budget
    dear = costliest.get(be.name, 0.0)
    if dear >= budget:  # no candidate could begin after the first evaluation: nothing to choose
        log.info("first use: %s: one evaluation on %s took %.2f s, the class has %.3g s; "
                 "untuned (in %.2f s; TILEDMM_FIRST_USE_BUDGET raises the budget)", what,
                 be.name, dear, budget, clock() - start)  # fmt: skip
        return None, True
    current = current_tiles(be, family, dtype, dev, cls)
    b, m, n, k = shape
    peak = dev.peak(dtype) or dev.peak("float32")
    at_peak = 2.0 * b * m * n * k / peak if peak else math.inf  # any tiles' kernel, at best
    if at_peak < dev.launch_overhead:
        return None, False  # launch-bound even at the device's peak: tiles cannot show
    predict = _predictor(be, family, dtype, cls, current)
    host = dev.host_cost(be.name)
    if at_peak < host and (predict(shape) or 0.0) - b * host < host:
        # host-bound: the call's measured host cost outweighs the current tiles' kernel (and
        # any tiles' at the peak); a larger call of the class tunes it (PoCL on the EPYC,
        # session 23: 3.84 s of the class's 5 went to 64^3, 12 us of kernel beside 257 us)
        return None, False
    timed = timing_shape(predict, shape, cls, budget / CALLS_IN_BUDGET)
    if timed is None:
        log.info("first use: %s: %s is too large to time within %.3g s; untuned (in %.2f s)",
                 what, "x".join(map(str, shape)), budget, clock() - start)  # fmt: skip
        return None, True
    task = Shortlist(be, family, dtype, cls, timed, current, size, deadline, clock)
    if len(task.candidates) < 2:
        log.info("first use: %s: nothing to choose from (one candidate plans; in %.2f s)", what,
                 clock() - start)  # fmt: skip
        return None, True
    task.operands()
    base, (first, *rest) = current.key(), task.candidates
    need = CALLS_PER_CANDIDATE * max(1, len(rest))
    own = 0.0  # this run's costliest evaluation, compiles included (kept should another
    # class's run overwrite ``costliest`` with a smaller cost)

    def evaluate(g: Geometry, calls: int, skip_edges: bool = False) -> dict:
        nonlocal own
        t0 = clock()
        left = deadline - t0
        rec = task.evaluate(g, REPEAT_SHARE * left, skip_edges, max_call=left / calls)
        took = clock() - t0
        own = max(own, took)
        costliest[be.name] = max(costliest.get(be.name, 0.0), took)
        return rec

    rec = evaluate(first, need)
    while rec["status"] == "slow" or (
        rec["status"] == "ok" and rec["seconds"] * need > deadline - clock()
    ):
        smaller = smaller_shape(task.shape, cls)  # measured too slow for the list: a smaller shape
        if smaller is None or clock() > deadline:
            log.info("first use: %s: %s is too large to time within %.3g s; untuned (in %.2f s)",
                     what, "x".join(map(str, task.shape)), budget, clock() - start)  # fmt: skip
            return None, True
        task.resize(smaller)
        task.operands()
        rec = evaluate(first, need, skip_edges=True)
    for g in rest:  # one that would overrun (the costliest evaluation so far) is not begun
        if deadline - clock() < max(own, costliest.get(be.name, 0.0)):
            break
        rec = evaluate(g, CALLS_PER_CANDIDATE)
        if rec["status"] != "ok":
            log.debug("first use: %s: %s: %s %s", what, rec["tiles"], rec["status"],
                      rec.get("error", ""))  # fmt: skip
    ok = sorted(task.ok(), key=lambda r: r["seconds"])
    tried, listed = len(task.results), len(task.candidates)
    if not ok or (len(ok) == 1 and tried < listed and ok[0]["geometry"] == base):
        log.info("first use: %s: no choice within %.3g s (%d of %d candidates tried, %d failed);"
                 " untuned for this process (in %.2f s)", what, budget, tried, listed,
                 tried - len(ok), clock() - start)  # fmt: skip
        return None, True
    times = {r["geometry"]: r["seconds"] for r in ok}
    racers = [r["geometry"] for r in ok[:2]]
    if base in times and base not in racers:
        racers.append(base)
    race = sum(times[gk] for gk in racers) * 12  # Tuner.rounds: 3 rounds of 1 + 3 calls
    if len(racers) > 1 and deadline - clock() > race:
        times.update(task.race(racers))
    win = min(times, key=lambda gk: (times[gk], gk != base))
    if base in times and times[base] < KEEP_MARGIN * times[win]:
        win = base  # within the noise of a short list: the tiles before stay
    return Choice(win, times, base, task), False


def gain(choice: Choice) -> float:
    """How many times faster the winner ran than the tiles before (NaN: they were not timed)."""
    t = choice.times
    return t[choice.base] / t[choice.win] if choice.base in t else math.nan
