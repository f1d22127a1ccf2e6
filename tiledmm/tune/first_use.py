"""First-use tuning: the first call of a shape class on a device nobody tuned times a short
list of tiles on the caller's shape and keeps the winner (issue 37).

The engine calls :func:`prepare` before it plans a product (``tiledmm.api`` installs it). Where
the backend ships no table for this device and the user database holds no entry of this device,
backend, dtype, family and shape class, the short list (:mod:`tiledmm.tune.shortlist`: the
current tiles, the shipped default, sibling backends' tiles, the planner's best) is checked
and timed within a budget; the winner goes into the user database as ``tiledmm tune`` writes
it, marked ``measured.first_use`` (a later ``tiledmm tune`` replaces it). One INFO line on the
``tiledmm`` logger says what happened.

- Budget: :data:`GPU_BUDGET` seconds per class on a GPU, :data:`CPU_BUDGET` on a CPU, beyond
  the current tiles' first run (their compile), which the untuned call pays anyway; ranking,
  checks, compiles and timing all count. :data:`SHORTLIST` candidates at most.
- Settings: ``TILEDMM_FIRST_USE_TUNING=0`` turns it off (then nothing is timed or written, and
  dispatch is what it was without this module); ``TILEDMM_FIRST_USE_BUDGET`` (seconds) and
  ``TILEDMM_FIRST_USE_SHORTLIST``; :func:`configure` sets the same from Python and wins.
- A product too small to time (its FLOPs at the device's peak take less than a launch) is
  not tuned; one too slow to time a few calls within the budget is timed on a smaller shape
  of the same class. A first-use entry is tuned again when a call of its class is
  :data:`REFINE_FLOPS` times larger than the call it was tuned for (the largest products, where
  the time goes, decide the tiles; ``shapefit`` fits them to smaller grids).
- Once per process and class: a lock per class (threads wait for the one that tunes), the
  database re-read before tuning (another process may have tuned it), and a failed or
  timed-out short list is remembered. A database that is corrupt is left alone (its
  ``TuningWarning`` is the one warning); one that cannot be written gives one warning. Either
  way dispatch stays untuned.
"""

from __future__ import annotations

import logging
import math
import os
import statistics
import threading
import time
import warnings
from dataclasses import dataclass
from typing import Any

from ..core import dispatch, tuning, tuning_check
from ..core.backend import Backend
from ..planner import shapefit
from ..planner.geometry import Geometry
from ..planner.make import default_geometry, make_plan
from ..planner.plans import PlanError
from .shortlist import Shortlist, smaller_shape, timing_shape

__all__ = ["configure", "settings", "prepare", "tune_class", "prewarm", "reset", "Settings",
           "ENABLE", "BUDGET", "SIZE", "GPU_BUDGET", "CPU_BUDGET", "SHORTLIST", "REFINE_FLOPS"]

ENABLE, BUDGET, SIZE = ("TILEDMM_FIRST_USE_TUNING", "TILEDMM_FIRST_USE_BUDGET",
                        "TILEDMM_FIRST_USE_SHORTLIST")  # fmt: skip
GPU_BUDGET, CPU_BUDGET = 2.0, 5.0
SHORTLIST = 6
#: a first-use entry is tuned again for a call this many times its tuning call's FLOPs
REFINE_FLOPS = 8.0
#: calls of the current tiles the budget must hold for the model to time a shape as it is
CALLS_IN_BUDGET = 12
#: calls one candidate costs (the check, three timed): the list must fit, else a smaller shape
CALLS_PER_CANDIDATE = 4
#: of the time left, what each candidate's timed repeats may take
REPEAT_SHARE = 0.1
_FALSE = ("0", "false", "no", "off")

log = logging.getLogger("tiledmm")
clock = time.monotonic  # tests replace it


@dataclass
class Settings:
    """First-use tuning's settings: ``None`` defers to the environment, then the default."""

    enabled: bool | None = None
    budget: float | None = None
    shortlist: int | None = None


_python = Settings()


def configure(*, enabled: bool | None = None, budget: float | None = None,
              shortlist: int | None = None) -> None:  # fmt: skip
    """Set first-use tuning from Python (over the environment variables); ``None`` leaves a
    setting to the environment. ``budget``: seconds per shape class; ``shortlist``: at most
    this many candidates."""
    if budget is not None and not budget >= 0:
        raise ValueError(f"budget must be seconds >= 0, not {budget!r}")
    if shortlist is not None and shortlist < 1:
        raise ValueError(f"shortlist must be 1 or more candidates, not {shortlist!r}")
    _python.enabled, _python.budget, _python.shortlist = enabled, budget, shortlist


def settings(gpu: bool = True) -> Settings:
    """The settings in force for a GPU (``gpu=True``) or CPU device."""
    on = _python.enabled
    if on is None:
        on = os.environ.get(ENABLE, "1").strip().lower() not in _FALSE
    budget = _python.budget
    if budget is None:
        budget = _seconds(os.environ.get(BUDGET, ""), GPU_BUDGET if gpu else CPU_BUDGET)
    size = _python.shortlist
    if size is None:
        try:
            size = max(1, int(os.environ.get(SIZE, "") or SHORTLIST))
        except ValueError:
            size = SHORTLIST
    return Settings(bool(on), budget, size)


def _seconds(text: str, default: float) -> float:
    t = text.strip().lower()
    try:
        return float(t[:-2]) / 1e3 if t.endswith("ms") else float(t.rstrip("s")) if t else default
    except ValueError:
        return default


# --------------------------------------------------------------------------- state

_lock = threading.Lock()
_class_locks: dict[tuple, threading.Lock] = {}
#: class -> FLOPs of the call it was tuned for (math.inf: failed, never again this process)
_done: dict[tuple, float] = {}
_seen: set[tuple] = set()
_warned: set[str] = set()


def reset() -> None:
    """Forget what this process tuned or gave up on (tests)."""
    with _lock:
        _class_locks.clear()
        _done.clear()
        _seen.clear()
        _warned.clear()


def prepare(be: Backend, m: int, n: int, k: int, dtype: str, kernel: str = "auto",
            batch: int = 1) -> None:  # fmt: skip
    """Before ``tiledmm.matmul`` plans a product (``kernel``: "auto" or a family ``be`` has):
    first-use tuning of its class where due. Never raises; at once for a product seen before."""
    call = (be.name, be.device_key(), m, n, k, dtype, kernel, batch)
    if call in _seen or not m or not n or not k:
        return
    with _lock:
        if len(_seen) > 4096:
            _seen.clear()
        _seen.add(call)
    try:
        dev = be.device()
        conf = settings(dev.is_gpu)
        if not conf.enabled or conf.budget <= 0:
            return
        fam = dispatch.auto_kernel(be, m, n, k, dtype, batch) if kernel == "auto" else kernel
        if be.search_space(fam, dtype, dev) is None:
            return  # nothing to choose from: this backend declares no search space
        tune_class(be, fam, dtype, (batch, m, n, k), conf)
    except Exception as exc:  # noqa: BLE001 - tuning must never break the user's call
        log.info("first use: %s %s %dx%dx%d not tuned: %s: %s", be.name, kernel, m, n, k,
                 type(exc).__name__, exc)  # fmt: skip


def tune_class(be: Backend, family: str, dtype: str, shape: tuple[int, int, int, int],
               conf: Settings | None = None, force: bool = False) -> dict | None:  # fmt: skip
    """First-use tuning of ``shape``'s class (``(batch, m, n, k)``) where it is due (``force``:
    also where it was first-use tuned before, as ``tiledmm tune --quick`` does; an entry of
    ``tiledmm tune`` is always kept); the saved entry, or None."""
    dev = be.device()
    conf = conf or settings(dev.is_gpu)
    b, m, n, k = shape
    cls = tuning.shape_class(m, n, k, b)
    key = (dev.name, be.name, dtype, family, cls)
    flops = 2.0 * b * m * n * k
    with _lock:
        lock = _class_locks.setdefault(key, threading.Lock())
    with lock:
        if not force and key in _done and flops < REFINE_FLOPS * _done[key]:
            return None
        mine = _own_entry(be, family, dtype, dev, cls)
        if mine is not None and not tuning.is_first_use(mine):
            _done[key] = math.inf  # `tiledmm tune` chose: first use never overrides it
            return None
        if not force:
            if mine is not None:
                meas = mine["measured"]
                tuned = 2.0 * math.prod(meas.get("call_shape") or meas.get("shape") or (0,))
                if flops < REFINE_FLOPS * tuned:
                    _done[key] = tuned
                    return None
        if (not force and _own_table(be, family, dtype, dev, cls)) or not _database_ok():
            _done[key] = math.inf
            return None
        try:
            entry, remember = _run(be, family, dtype, cls, shape, conf)
        except Exception:
            _done[key] = math.inf  # out of memory, a device error: not again this process
            raise
        if entry is not None:
            _done[key] = flops
        elif remember:
            _done[key] = math.inf
        return entry


def _own_entry(be: Backend, family: str, dtype: str, dev: Any, cls: str) -> dict | None:
    """This device's own user entry for exactly this class (re-read from the file)."""
    e = tuning.lookup(be.name, dtype, family, dev, cls)
    if e is None or e.get("device") != dev.name or e["shape_class"] != cls:
        return None
    return e


def _own_table(be: Backend, family: str, dtype: str, dev: Any, cls: str) -> bool:
    """Whether the backend ships tiles tuned on this very device (a device tiledmm has seen:
    first use leaves its table alone; ``TILEDMM_IGNORE_SHIPPED_TUNING`` hides it)."""
    geo = tuning.select(be, family, dtype, dev, cls, user=False)
    return geo is not None and geo.source.startswith(f"shipped table for {dev.name}")


def _database_ok() -> bool:
    """Whether first use may write the database: it parses (a corrupt one already warned, via
    ``tuning.user_entries``) and can be written (else one warning per process)."""
    path = tuning.database_path()
    if path.exists() and tuning_check.read_database(path)[1]:
        log.info("first use: the tuning database %s has problems; untuned dispatch", path)
        return False
    folder = path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
        ok = os.access(folder, os.W_OK) and (not path.exists() or os.access(path, os.W_OK))
    except OSError:
        ok = False
    if not ok:
        _warn_once(str(path), f"tuning database {path} cannot be written: first-use tuning is "
                   f"off and dispatch stays untuned ({ENABLE}=0 silences this)")  # fmt: skip
    return ok


def _warn_once(what: str, text: str) -> None:
    with _lock:
        if what in _warned:
            return
        _warned.add(what)
    warnings.warn(text, tuning.TuningWarning, stacklevel=4)


# --------------------------------------------------------------------------- one run


def _current(be: Backend, family: str, dtype: str, dev: Any, cls: str) -> Geometry:
    """The tiles dispatch runs now for this class (as ``dispatch`` chooses them)."""
    geo = tuning.select(be, family, dtype, dev, cls)
    if geo is None:
        geo = default_geometry(family, dtype, dev)
    return Geometry(geo.block_tile, geo.thread_tile, geo.options, None, geo.source)


def _predict(be: Backend, family: str, dtype: str, cls: str, current: Geometry):
    """Seconds the model predicts for one timed call of ``current`` on a shape (the whole
    batch, as :class:`~tiledmm.tune.shortlist.Shortlist` times it), as dispatch would plan it."""
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


def _run(be: Backend, family: str, dtype: str, cls: str, shape,
         conf: Settings) -> tuple[dict | None, bool]:  # fmt: skip
    """Time the short list; (the saved entry or None, whether to remember a failure)."""
    dev = be.device()
    start = clock()
    current = _current(be, family, dtype, dev, cls)
    b, m, n, k = shape
    peak = dev.peak(dtype) or dev.peak("float32")
    if peak and 2.0 * b * m * n * k / peak < dev.launch_overhead:
        return None, False  # launch-bound even at the device's peak: tiles cannot show
    predict = _predict(be, family, dtype, cls, current)
    timed = timing_shape(predict, shape, cls, conf.budget / CALLS_IN_BUDGET)
    what = f"{be.name} {family} {dtype} {cls!r} on {dev.name}"
    if timed is None:
        log.info("first use: %s: %s is too large to time within %.3g s; untuned", what,
                 "x".join(map(str, shape)), conf.budget)  # fmt: skip
        return None, True
    task = Shortlist(be, family, dtype, cls, timed, current, conf.shortlist,
                     start + conf.budget, clock)  # fmt: skip
    if len(task.candidates) < 2:
        log.info("first use: %s: nothing to choose from (one candidate plans)", what)
        return None, True
    task.operands()
    base, (first, *rest) = current.key(), task.candidates
    need = CALLS_PER_CANDIDATE * max(1, len(rest))
    rec = task.evaluate(first, REPEAT_SHARE * conf.budget, max_call=conf.budget / need)
    # the current tiles' first run (their compile) is what the untuned call pays anyway
    deadline = start + conf.budget + rec.get("first_seconds", 0.0)
    while rec["status"] == "slow" or (
        rec["status"] == "ok" and rec["seconds"] * need > deadline - clock()
    ):
        smaller = smaller_shape(task.shape, cls)  # measured too slow for the list: a smaller shape
        if smaller is None or clock() > deadline:
            log.info("first use: %s: %s is too large to time within %.3g s; untuned", what,
                     "x".join(map(str, task.shape)), conf.budget)  # fmt: skip
            return None, True
        task.resize(smaller)
        task.operands()
        left = deadline - clock()
        rec = task.evaluate(first, REPEAT_SHARE * left, skip_edges=True, max_call=left / need)
    spent: list[float] = []  # what each candidate took: one that would overrun is not begun
    for g in rest:
        now = clock()
        left = deadline - now
        if left <= 0 or (spent and left < statistics.median(spent)):
            break
        rec = task.evaluate(g, REPEAT_SHARE * left, max_call=left / CALLS_PER_CANDIDATE)
        spent.append(clock() - now)
        if rec["status"] != "ok":
            log.debug("first use: %s: %s: %s %s", what, rec["tiles"], rec["status"],
                      rec.get("error", ""))  # fmt: skip
    ok = sorted(task.ok(), key=lambda r: r["seconds"])
    tried, listed = len(task.results), len(task.candidates)
    if not ok or (len(ok) == 1 and tried < listed and ok[0]["geometry"] == base):
        log.info("first use: %s: no choice within %.3g s (%d of %d candidates tried, %d failed);"
                 " untuned for this process", what, conf.budget, tried, listed,
                 tried - len(ok))  # fmt: skip
        return None, True
    times = {r["geometry"]: r["seconds"] for r in ok}
    racers = [r["geometry"] for r in ok[:2]]
    if base in times and base not in racers:
        racers.append(base)
    cost = sum(times[gk] for gk in racers) * 12  # Tuner.rounds: 3 rounds of 1 + 3 calls
    if len(racers) > 1 and deadline - clock() > cost:
        times.update(task.race(racers))
    win = min(times, key=lambda gk: (times[gk], gk != base))
    entry = task.entry(
        win,
        times,
        shape,
        dict(first_use=True, budget=conf.budget, seconds_spent=round(clock() - start, 3)),
    )
    try:
        path = tuning.save_entries([entry])
    except (OSError, ValueError) as exc:
        _warn_once(str(tuning.database_path()), f"first-use tuning could not save to "
                   f"{tuning.database_path()} ({exc}); dispatch stays untuned")  # fmt: skip
        return None, True
    dispatch.clear_caches()
    gain = times[base] / times[win] if base in times else math.nan
    log.info("first use: %s: %s at %s, %.2fx the tiles before (%s), of %d candidates "
             "(%d failed) timed on %s in %.2f s; saved to %s (%s=0 turns this off)", what,
             Geometry.from_key(win), _rate(task.flops / times[win]), gain,
             current, tried, tried - len(ok), "x".join(map(str, task.shape)),
             clock() - start, path, ENABLE)  # fmt: skip
    return entry, False


def _rate(flops: float) -> str:
    return f"{flops / 1e12:.3g} TFLOP/s" if flops >= 1e12 else f"{flops / 1e9:.4g} GFLOP/s"


def prewarm(be: Backend, dtype: str, families, tasks) -> int:
    """``tiledmm tune --quick``: first-use tuning now, for each family and shape class of
    ``tasks`` (``(class, (batch, m, n, k))``; the largest shape per class), so a deployed
    machine's first calls cost nothing; prints a line per class. 0 when every class has an
    entry (new, or kept from ``tiledmm tune``), else 1."""
    conf = settings(be.device().is_gpu)
    conf.enabled = True
    biggest: dict[str, tuple] = {}
    for cls, shape in tasks:
        if cls not in biggest or math.prod(shape) > math.prod(biggest[cls]):
            biggest[cls] = shape
    dev, missing = be.device(), 0
    print(f"first-use tuning of {be.name} on {dev.name}, {dtype}: a short list of at most "
          f"{conf.shortlist} per class, {conf.budget:.3g} s each")  # fmt: skip
    for fam in families:
        for cls, shape in biggest.items():
            t0 = time.monotonic()
            e = tune_class(be, fam, dtype, shape, conf, force=True)
            text = "x".join(map(str, shape[1:] if shape[0] == 1 else shape))
            if e is None:
                mine = _own_entry(be, fam, dtype, dev, cls)
                why = "kept the `tiledmm tune` entry" if mine else "not tuned (see the log)"
                missing += mine is None
                print(f"  {cls:10} {text:>20} {fam:8} {why}")
                continue
            meas = e["measured"]
            print(f"  {cls:10} {text:>20} {fam:8} {Geometry.from_dict(e)!s:44} "
                  f"{meas['gflops']:9.4g} GFLOP/s (before: {meas['default']}, "
                  f"{meas['default_gflops'] or math.nan:.4g}), {meas['candidates']} timed in "
                  f"{time.monotonic() - t0:.1f} s")  # fmt: skip
    print(f"saved to {tuning.database_path()}; `tiledmm tune` (without --quick) searches further")
    return 1 if missing else 0
