"""First-use tuning: the first call of a shape class on a device nobody tuned times a short
list of tiles on the caller's shape and keeps the winner (issue 37).

The engine calls :func:`prepare` before it plans a product (``tiledmm.api`` installs it). Where
the backend ships no table for this device and the user database holds no entry of this device,
backend, dtype, family and shape class, the short list (:mod:`tiledmm.tune.shortlist`: the
current tiles, the shipped default, sibling backends' tiles, the planner's best) is checked
and timed within a budget; the winner goes into the user database as ``tiledmm tune`` writes
it, marked ``measured.first_use`` (a later ``tiledmm tune`` replaces it). One INFO line on the
``tiledmm`` logger says what happened.

- Budget: :data:`GPU_BUDGET` seconds per class on a GPU, :data:`CPU_BUDGET` on a CPU, in all:
  over every run of the class (its entry records the seconds spent so far,
  ``measured.class_seconds``, so across processes too), and within a run every second counts,
  ranking, operands, checks, timing and every compile, the current tiles' included
  (:mod:`tiledmm.tune.first_run`). :data:`SHORTLIST` candidates at most.
- Settings: ``TILEDMM_FIRST_USE_TUNING=0`` turns it off (then nothing is timed or written, and
  dispatch is what it was without this module); ``TILEDMM_FIRST_USE_BUDGET`` (seconds) and
  ``TILEDMM_FIRST_USE_SHORTLIST``; :func:`configure` sets the same from Python and wins.
- A product too small to time (its FLOPs at the device's peak take less than a launch) is
  not tuned, nor one whose measured host cost outweighs its kernel whatever the tiles; one
  too slow to time a few calls within the budget is timed on a smaller shape
  of the same class. A first-use entry is tuned again when a call of its class is
  :data:`REFINE_FLOPS` times larger than the call it was tuned for (the largest products, where
  the time goes, decide the tiles; ``shapefit`` fits them to smaller grids), with what is left
  of the class's budget, and only where that is :data:`REFINE_LEFT` of it or more: on the H200
  (session 18) the class ``square`` was tuned at 512^3, 1024^3, 2048^3 and 4096^3, each run
  2.0-3.2 s, 9.8 s in all for a class of a 2 s budget. A refinement that chooses nothing still
  charges its seconds to the entry; after the budget, ``tiledmm tune`` refines. A call past
  an entry's reach that was not refined (``tuning.FIRST_USE_REACH``, the same factor) is
  planned as if the class had no entry (the shipped table, else the model's default), not on
  tiles timed on a product hundreds of times smaller.
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
import threading
import time
import warnings
from dataclasses import dataclass
from typing import Any

from ..core import dispatch, tuning, tuning_check
from ..core.backend import Backend
from ..planner.geometry import Geometry
from ..util import env
from . import first_run

__all__ = ["configure", "settings", "prepare", "tune_class", "prewarm", "reset", "Settings",
           "class_seconds", "ENABLE", "BUDGET", "SIZE", "GPU_BUDGET", "CPU_BUDGET", "SHORTLIST",
           "REFINE_FLOPS", "REFINE_LEFT"]  # fmt: skip

ENABLE, BUDGET, SIZE = ("TILEDMM_FIRST_USE_TUNING", "TILEDMM_FIRST_USE_BUDGET",
                        "TILEDMM_FIRST_USE_SHORTLIST")  # fmt: skip
GPU_BUDGET, CPU_BUDGET = 2.0, 5.0
SHORTLIST = 6
#: a first-use entry is tuned again for a call this many times its tuning call's FLOPs ...
REFINE_FLOPS = tuning.FIRST_USE_REACH  # (beyond it, dispatch does not use the entry's tiles)
#: ... where at least this share of the class's budget is left
REFINE_LEFT = 0.5

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
        on = env.switch(ENABLE)
    budget = _python.budget
    if budget is None:
        budget = env.seconds(BUDGET, GPU_BUDGET if gpu else CPU_BUDGET)
    size = _python.shortlist
    if size is None:
        try:
            size = max(1, int(os.environ.get(SIZE, "") or SHORTLIST))
        except ValueError:
            size = SHORTLIST
    return Settings(bool(on), budget, size)


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
        first_run.costliest.clear()


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
        spent = 0.0  # by this class's earlier runs
        if not force and mine is not None:
            tuned = tuning.first_use_flops(mine)
            if flops < REFINE_FLOPS * tuned:
                _done[key] = tuned
                return None
            spent = class_seconds(mine)
            if conf.budget - spent < REFINE_LEFT * conf.budget:
                _done[key] = math.inf
                log.info("first use: %s %s %s %r: not tuned again for %s (%.2f s of its %.3g s "
                         "spent; `tiledmm tune` tunes further)", be.name, family, dtype, cls,
                         "x".join(map(str, shape)), spent, conf.budget)  # fmt: skip
                return None
        if (not force and _own_table(be, family, dtype, dev, cls)) or not _database_ok():
            _done[key] = math.inf
            return None
        t0, charged = clock(), None if force else mine
        try:
            entry, remember = _run(be, family, dtype, cls, shape, conf, spent)
        except Exception:
            _done[key] = math.inf  # out of memory, a device error: not again this process
            _charge(charged, spent + clock() - t0)
            raise
        if entry is not None:
            _done[key] = flops
        elif remember:
            _done[key] = math.inf
            _charge(charged, spent + clock() - t0)
        return entry


def class_seconds(e: dict) -> float:
    """Seconds first use spent on an entry's class over all its runs (``measured.class_seconds``;
    an entry from before it was recorded: its one run's)."""
    meas = e["measured"]
    return float(meas.get("class_seconds", meas.get("seconds_spent", 0.0)) or 0.0)


def _charge(mine: dict | None, total: float) -> None:
    """A refinement that saved nothing still spent the class's budget: record it in the entry
    it left in place (so no process spends it again). Never raises."""
    if mine is None or total <= class_seconds(mine):
        return
    try:
        tuning.save_entries([dict(mine, measured=dict(mine["measured"],
                                                      class_seconds=round(total, 3)))])  # fmt: skip
    except (OSError, ValueError):
        return
    dispatch.clear_caches()


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


def _run(be: Backend, family: str, dtype: str, cls: str, shape, conf: Settings,
         spent: float) -> tuple[dict | None, bool]:  # fmt: skip
    """One run within what is left of the class's budget (``spent`` by its earlier runs); (the
    saved entry or None, whether to remember a failure)."""
    dev = be.device()
    start = clock()
    what = f"{be.name} {family} {dtype} {cls!r} on {dev.name}"
    choice, remember = first_run.run(be, family, dtype, cls, shape, conf.shortlist,
                                     conf.budget - spent, clock, what)  # fmt: skip
    if choice is None:
        return None, remember
    win, times, task = choice.win, choice.times, choice.task
    took = clock() - start
    entry = task.entry(win, times, shape, dict(first_use=True, budget=conf.budget,
                                               seconds_spent=round(took, 3),
                                               class_seconds=round(spent + took, 3)))  # fmt: skip
    try:
        path = tuning.save_entries([entry])
    except (OSError, ValueError) as exc:
        _warn_once(str(tuning.database_path()), f"first-use tuning could not save to "
                   f"{tuning.database_path()} ({exc}); dispatch stays untuned")  # fmt: skip
        return None, True
    dispatch.clear_caches()
    tried = len(task.results)
    log.info("first use: %s: %s at %s, %.2fx the tiles before (%s), of %d candidates "
             "(%d failed) timed on %s in %.2f s; saved to %s (%s=0 turns this off)", what,
             Geometry.from_key(win), _rate(task.flops / times[win]), first_run.gain(choice),
             task.current, tried, tried - len(task.ok()), "x".join(map(str, task.shape)),
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
