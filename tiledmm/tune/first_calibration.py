"""First-use calibration (issue 37): where the calibration cache holds no host cost for a
backend on its device, the first call that reaches the backend measures it, bounded, and the
device's ceilings with it where none are cached, so the planner's constants are the device's
own from the first call on.

The engine calls :func:`prepare` before it plans a product (``tiledmm.api`` installs it, with
first-use tuning). The measurements are ``tiledmm calibrate --quick``'s
(:func:`tiledmm.tune.calibrate.measure`): the backend's per-call host cost first, then, where no
record holds the device's ceilings, the vendor GEMM's peaks, the copy bandwidth and the level
probes. The record goes to the calibration cache as ``tiledmm calibrate`` writes it, the host cost
(and the record, where first use measured its ceilings) marked ``"first_use": true``; a later
``tiledmm calibrate`` replaces it, and first use never replaces a record's ceilings. One INFO
line on the ``tiledmm`` logger says what was measured.

- Budget: :data:`GPU_BUDGET` seconds on a GPU, :data:`CPU_BUDGET` on a CPU
  (``TILEDMM_FIRST_USE_CALIBRATION_BUDGET``, or :func:`configure`). A step not begun when the
  budget is spent is left out (``cut`` in the record; without a peak the record holds the host
  cost alone and the ceilings stay estimated); a step begun runs to its end (a first compile
  included).
- Settings: first-use tuning's opt-out turns it off too (``TILEDMM_FIRST_USE_TUNING=0``,
  ``tiledmm.tune.first_use.configure(enabled=False)``); ``TILEDMM_FIRST_USE_CALIBRATION=0`` or
  :func:`configure` turns off the calibration alone. The test suite turns both off
  (``tests/conftest.py``).
- The tiny product runs, on a CPU, the family the call that started the calibration will run
  (numba-cpu compiles once per family: the call then finds it compiled); on a GPU its own.
  Where that family compiled nothing (NumPy), the tiny product's own family is timed too and
  the lighter host cost kept (``host_cost.measure_host_cost``).
- Once per process per (device, backend): a failure (an exception, an unwritable cache) is
  remembered, and dispatch runs on the estimates. After a record is saved the plan caches
  are cleared, so the next call is planned on the measurements.
- Once per machine: processes that meet the same (device, backend) at once take a lock of the
  calibration cache's folder (``.first-calibration-<backend>.lock``); the one that holds it
  measures, the others wait for it (at most the budget and :data:`WAIT_MARGIN` seconds) and
  then find its record, so two processes never time the device against each other.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..core import dispatch
from ..core.backend import Backend
from ..device.calibration import (
    calibration_path,
    has_ceilings,
    load_calibration,
    save_calibration,
)
from ..util import env
from ..util.atomicfile import locked
from . import first_use
from .calibrate import measure, writable_cache
from .host_cost import calibrating

__all__ = ["configure", "settings", "prepare", "before_plan", "calibrate_backend", "reset",
           "Settings",
           "ENABLE", "BUDGET", "GPU_BUDGET", "CPU_BUDGET"]  # fmt: skip

ENABLE, BUDGET = "TILEDMM_FIRST_USE_CALIBRATION", "TILEDMM_FIRST_USE_CALIBRATION_BUDGET"
GPU_BUDGET, CPU_BUDGET = 10.0, 3.0
#: seconds past the budget a process waits for another's calibration of the same backend
WAIT_MARGIN = 20.0

log = logging.getLogger("tiledmm")


@dataclass
class Settings:
    """First-use calibration's settings: ``None`` defers to the environment, then the default."""

    enabled: bool | None = None
    budget: float | None = None


_python = Settings()


def configure(*, enabled: bool | None = None, budget: float | None = None) -> None:
    """Set first-use calibration from Python (over the environment variables); ``None`` leaves
    a setting to the environment. ``budget``: seconds per (device, backend). First-use
    tuning's opt-out (``first_use.configure(enabled=False)``) turns it off whatever this says."""
    if budget is not None and not budget >= 0:
        raise ValueError(f"budget must be seconds >= 0, not {budget!r}")
    _python.enabled, _python.budget = enabled, budget


def settings(gpu: bool = True) -> Settings:
    """The settings in force for a GPU (``gpu=True``) or CPU device."""
    on = _python.enabled
    if on is None:
        on = env.switch(ENABLE)
    budget = _python.budget
    if budget is None:
        budget = env.seconds(BUDGET, GPU_BUDGET if gpu else CPU_BUDGET)
    return Settings(bool(on) and bool(first_use.settings(gpu).enabled), budget)


_lock = threading.Lock()
#: (backend name, device key) -> "running" | "done" | "failed": each once per process
_state: dict[tuple, str] = {}


def reset() -> None:
    """Forget what this process calibrated or gave up on (tests)."""
    with _lock:
        _state.clear()


def prepare(be: Backend, dtype: str = "float32",
            family: str | Callable[[], str] = "auto") -> None:  # fmt: skip
    """Before the engine plans a product on ``be``: first-use calibration where it is due (see
    the module docstring), its tiny product on ``family`` (a name, or what gives it: asked
    only when the calibration runs). Never raises; returns at once once it ran for this
    backend and device, and while this thread measures (the tiny product's own calls)."""
    if calibrating():
        return
    try:
        key = (be.name, be.device_key())
    except Exception:  # noqa: BLE001 - a backend that cannot name its device: nothing to do
        return
    if key in _state or not settings().enabled:  # off: nothing remembered, on again later
        return
    with _lock:
        if key in _state:
            return
        _state[key] = "running"  # another thread meanwhile plans on the estimates
    try:
        ok = calibrate_backend(be, dtype, family() if callable(family) else family)
    except Exception as exc:  # noqa: BLE001 - calibration must never break the user's call
        log.info("first use: calibration of %s failed (%s: %s); planning on estimated "
                 "constants for this process", be.name, type(exc).__name__, exc)  # fmt: skip
        ok = False
    _state[key] = "done" if ok else "failed"


def before_plan(be: Backend, m: int, n: int, k: int, dtype: str, kernel: str = "auto",
                batch: int = 1) -> None:  # fmt: skip
    """The engine's hook (``tiledmm.api`` installs it): first-use calibration of ``be``, then
    first-use tuning of the product (:func:`tiledmm.tune.first_use.prepare`); nothing while
    this thread measures."""
    if calibrating():
        return
    prepare(be, dtype, lambda: _compiled_family(be, m, n, k, dtype, kernel, batch))
    first_use.prepare(be, m, n, k, dtype, kernel, batch)


def _compiled_family(be: Backend, m: int, n: int, k: int, dtype: str, kernel: str,
                     batch: int) -> str:  # fmt: skip
    """The family the calibration's tiny product runs: on a CPU the one the caller's product
    will run, else "auto" (the tiny product's own). numba-cpu compiles once per family (its
    tiles are arguments), so the calibration then compiles what the call needs: on a 2-core
    EPYC its first 1024^3 call took 7.7 s, 3.7 s of it compiling the tiled family for the tiny
    product and 3.9 s the register family, after which first use had no time for candidates.
    PoCL compiles per tile either way (its first call cost the same, 8.0-8.9 s); so do the GPU
    backends, where the tiny product keeps its own family."""
    try:
        if be.device().is_gpu:
            return "auto"
        return dispatch.plan_for(be, max(m, 1), max(n, 1), max(k, 1), dtype, kernel,
                                 batch=batch).kernel  # fmt: skip
    except Exception:  # noqa: BLE001 - a product that cannot plan: the engine says why later
        return "auto"


def calibrate_backend(be: Backend, dtype: str = "float32", family: str = "auto") -> bool:
    """Measure and save ``be``'s host cost on its device, and the device's ceilings where no
    record has them, within the budget, if due and enabled; True unless it failed."""
    dev = be.device()
    conf = settings(dev.is_gpu)
    if not conf.enabled or conf.budget <= 0:
        return True
    name = be.vendor_backend().device().name  # the record `tiledmm calibrate` writes
    if be.name in load_calibration().get(name, {}).get("host_cost", {}):
        return True
    writable_cache()  # an OSError saying which folder, before any measuring or waiting
    # one process measures; another meeting the backend now waits for it, then reads its record
    slug = "".join(c if c.isalnum() else "-" for c in be.name)
    with locked(calibration_path().with_name(f"first-calibration-{slug}"),
                timeout=conf.budget + WAIT_MARGIN):  # fmt: skip
        record = load_calibration().get(name, {})
        if be.name in record.get("host_cost", {}):
            dispatch.clear_caches()  # measured by another process meanwhile
            return True
        return _measure_and_save(be, dtype, name, record, conf, family)


def _measure_and_save(be: Backend, dtype: str, name: str, record: dict, conf: Settings,
                      family: str = "auto") -> bool:  # fmt: skip
    ceilings = not has_ceilings(record)
    start = time.monotonic()
    name, new = measure(be, quick=True, deadline=start + conf.budget, ceilings=ceilings,
                        dtype=dtype, family=family)  # fmt: skip
    for entry in new["host_cost"].values():
        entry["first_use"] = True
    if "peak_flops" in new:
        new["first_use"] = True  # the ceilings too (a record of `tiledmm calibrate` has none)
    path = save_calibration(name, new)
    dispatch.clear_caches()
    took = time.monotonic() - start
    cost = new["host_cost"][be.name]
    what = [f"host cost {cost['seconds'] * 1e6:.3g} us per call"]
    if "peak_flops" in new:
        what.append("ceilings " + ", ".join(f"{k} {v / 1e9:.4g} GFLOP/s"
                                             for k, v in new["peak_flops"].items())
                    + f", {new['bandwidth'] / 1e9:.4g} GB/s")  # fmt: skip
    elif ceilings:
        what.append("ceilings not measured (estimated)")
    cut = f"; left out: {new['cut']}" if "cut" in new else ""
    log.info("first use: calibrated %s on %s in %.2f s (budget %.3g s): %s%s; saved to %s "
             "(`tiledmm calibrate` measures fully; %s=0 turns this off)", be.name, name, took,
             conf.budget, "; ".join(what), cut, path, first_use.ENABLE)  # fmt: skip
    return True
