"""Numba, loaded on the first ``run`` and kept usable: interrupted imports, threads and forks.

- **Interrupts.** Numba is imported on the first call (never when tiledmm loads plugins). A
  ``KeyboardInterrupt`` (or any error) in the middle of that import used to leave numba half
  imported: later calls failed with ``module 'numba' has no attribute 'core'`` or ``KeyError:
  duplicate registration``. :func:`kernels` removes every module the failed attempt added to
  ``sys.modules`` (numba's, llvmlite's, this plugin's kernels), so the next call imports them
  afresh.
- **Forks.** Numba's default threading layer on Linux without TBB is GNU OpenMP, which kills a
  child forked after a parallel kernel ran (``Terminating: fork() called from a process already
  using GNU OpenMP, this is unsafe.``): ``multiprocessing.Pool`` with the default ``fork`` start
  method never finished. Unless the user chose a layer (``NUMBA_THREADING_LAYER``, or
  ``numba.config.THREADING_LAYER`` set before the first parallel call), the plugin asks numba
  for a ``forksafe`` one: TBB where it is installed, else ``workqueue``. ``workqueue`` is not
  thread-safe (two threads launching at once abort the process), so kernel launches go one at
  a time through :data:`LAUNCH` unless the layer is known to be thread-safe (TBB, OpenMP); a
  parallel kernel uses every core anyway. Where the layer is GNU OpenMP all the same (chosen
  by the user, or started before this plugin), a forked child gets a ``RuntimeError`` at once
  saying to use the ``spawn`` start method, instead of dying.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from types import ModuleType

__all__ = ["kernels", "launch_lock", "fork_problem", "threading_layer"]

_KERNELS = __name__.rpartition(".")[0] + ".kernels"
_PURGE = ("numba", "llvmlite", _KERNELS)
_state = {"forked_omp": False}
LAUNCH = threading.Lock()
_LOAD = threading.Lock()


def kernels() -> ModuleType:
    """The plugin's kernels module, numba imported with it; an interrupted or failed first
    import leaves nothing half-imported behind (see the module docstring)."""
    mod = sys.modules.get(_KERNELS)
    if mod is not None and getattr(mod, "kernel", None) is not None:
        return mod
    with _LOAD:
        before = set(sys.modules)
        try:
            _choose_threading_layer()
            import importlib

            return importlib.import_module(_KERNELS)
        except BaseException:
            for name in set(sys.modules) - before:
                if any(name == p or name.startswith(p + ".") for p in _PURGE):
                    sys.modules.pop(name, None)
            raise


def _choose_threading_layer() -> None:
    import numba

    if os.environ.get("NUMBA_THREADING_LAYER") or numba.config.THREADING_LAYER != "default":
        return  # the user's choice
    if threading_layer() is None:  # not started yet: a fork-safe one (TBB, else workqueue)
        numba.config.THREADING_LAYER = "forksafe"


def threading_layer() -> str | None:
    """The threading layer numba runs parallel kernels on, None before the first one."""
    numba = sys.modules.get("numba")
    if numba is None:
        return None
    try:
        return numba.threading_layer()
    except (ValueError, AttributeError):
        return None


@contextlib.contextmanager
def launch_lock():
    """Hold :data:`LAUNCH` unless the running layer is thread-safe (TBB, OpenMP)."""
    if threading_layer() in ("tbb", "omp"):
        yield
        return
    with LAUNCH:
        yield


def fork_problem() -> str | None:
    """Why this (forked) process cannot run the kernels, or None."""
    if not _state["forked_omp"]:
        return None
    return (
        "numba-cpu cannot run in this process: it was forked (os.fork, or multiprocessing's "
        "default 'fork' start method on Linux) after numba's parallel kernels ran on GNU "
        "OpenMP in its parent, and GNU OpenMP aborts a forked child; start the workers with "
        "the 'spawn' or 'forkserver' start method (multiprocessing.get_context('spawn')), or "
        "choose a fork-safe threading layer before the first call (NUMBA_THREADING_LAYER="
        "workqueue or tbb, or leave it unset: the plugin then picks one)"
    )


def _gnu_openmp() -> bool:
    if threading_layer() != "omp":
        return False
    pool = sys.modules.get("numba.np.ufunc.omppool")
    return getattr(pool, "openmp_vendor", "GNU") == "GNU"


def _after_fork_in_child() -> None:
    global LAUNCH, _LOAD
    LAUNCH, _LOAD = threading.Lock(), threading.Lock()  # a thread of the parent may hold them
    if _gnu_openmp():
        _state["forked_omp"] = True


os.register_at_fork(after_in_child=_after_fork_in_child)
