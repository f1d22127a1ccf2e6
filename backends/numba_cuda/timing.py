"""Device time of calls on the Numba CUDA backend: CUDA events on the default stream, each
timed call queued behind a one-thread spin kernel, so the events time the device work and not
Python's launch path. ``numba.cuda`` comes from :mod:`.engine` (the one module importing it).
"""

from __future__ import annotations

import numpy as np

from .engine import cuda, small_grids_on_purpose

__all__ = ["SPIN_SLEEPS", "event_seconds"]

_U32 = np.uint32


#: sleeps of 1 us (nominal: ``nanosleep`` takes 0-2x) the spin kernel ahead of each timed call
#: makes: longer than the host side of any call timed here (tens of microseconds)
SPIN_SLEEPS = 400


def _spin(sleeps):  # one thread that keeps the GPU busy while the host enqueues the timed call
    for _ in range(sleeps):
        cuda.nanosleep(_U32(1000))


_spins: list = []  # the configured spin launch (None: it could not compile)


def _spin_launch():
    """A launch of :func:`_spin` on the default stream (compiled on first use), or None where
    this engine or device cannot compile it (then the events include the host's launch path)."""
    if not _spins:
        try:
            with small_grids_on_purpose():
                launch = cuda.jit(_spin)[1, 1]
            launch(_U32(1))
        except Exception:  # noqa: BLE001 - an optional refinement of the timings
            launch = None
        _spins.append(launch)
    return _spins[0]


def event_seconds(fn, repeat: int, warmup: int) -> list[float]:
    """Device seconds per call of ``fn()`` between CUDA events on the default stream. Each
    timed call is queued behind a spin kernel (:data:`SPIN_SLEEPS`), so the host has enqueued
    all of ``fn``'s work before the start event fires: the events time the device work, not
    Python's launch path (as the CuPy backend's timings do, and OpenCL's profiling events;
    the per-call host cost is ``benches/studies/numba_overhead.py``'s)."""
    spin = _spin_launch()
    for _ in range(warmup):
        fn()
    cuda.synchronize()
    out = []
    for _ in range(repeat):
        start, end = cuda.event(), cuda.event()
        if spin is not None:
            spin(_U32(SPIN_SLEEPS))
        start.record()
        fn()
        end.record()
        end.synchronize()
        out.append(start.elapsed_time(end) / 1e3)
    return out
