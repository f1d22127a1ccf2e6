"""The one error metric of tiledmm (tests, benchmarks and the tuner all use it), and the float64
reference product that checks a kernel before it is timed.

Neither may disturb the timing that follows on a CPU: a multi-threaded BLAS call leaves its
worker threads spinning for 0.1-0.5 s, and on a machine with few cores they take the cores
from a CPU kernel timed right after (numba-cpu at 192^3 on 2 cores: 7 ms calls among 0.3 ms
ones, the shipped default measured 13x slow by the tuner). So :func:`rel_error` sums squares
in einsum's loop (no BLAS dot), and :func:`reference` can run on one BLAS thread
(threadpoolctl) where a CPU kernel is measured next.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["rel_error", "matmul_error", "reference", "norm"]


def norm(x: np.ndarray) -> float:
    """Frobenius norm by einsum's own loop (``np.linalg.norm`` is a BLAS dot product; einsum
    without ``optimize`` calls no BLAS and makes no temporary array)."""
    v = np.ravel(x)
    return math.sqrt(float(np.einsum("i,i->", v, v)))


def reference(a: Any, b: Any, one_thread: bool = False) -> np.ndarray:
    """``a @ b`` in float64 (NumPy's matmul rules); ``one_thread``: on one BLAS thread, for a
    check followed by the timing of a CPU kernel (see the module docstring)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # a dependency, but an install without deps still checks correctly
        one_thread = False
    if not one_thread:
        return np.matmul(a, b)
    with threadpool_limits(limits=1, user_api="blas"):
        return np.matmul(a, b)


def rel_error(c: Any, ref: Any) -> float:
    """||C - C_ref|| / ||C_ref|| (Frobenius, in float64); inf when C holds a NaN or inf that
    the reference does not (an element left unwritten in a NaN-poisoned output)."""
    ref = np.asarray(ref, dtype=np.float64)
    c = np.asarray(c, dtype=np.float64)
    if not np.isfinite(c).all():
        return math.inf
    return norm(c - ref) / (norm(ref) or 1.0)


def matmul_error(c: Any, a: Any, b: Any) -> float:
    """||C - A@B|| / || |A| @ |B| || (Frobenius, float64): the error relative to the size of the
    products summed, which a correct kernel keeps near sqrt(K) * eps however much the sum cancels
    (||A@B|| alone flags a 9-term dot product that cancels to 0.003 as 5e-5 in float32)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    scale = norm(np.matmul(np.abs(a), np.abs(b)))
    diff = np.asarray(c, np.float64) - np.matmul(a, b)
    return norm(diff) / (scale or 1.0)
