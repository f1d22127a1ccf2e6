"""The one error metric of tiledmm (tests, benchmarks and the tuner all use it)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["rel_error", "matmul_error"]


def rel_error(c: Any, ref: Any) -> float:
    """||C - C_ref|| / ||C_ref|| (Frobenius, in float64); inf when C holds a NaN or inf that
    the reference does not (an element left unwritten in a NaN-poisoned output)."""
    ref = np.asarray(ref, dtype=np.float64)
    c = np.asarray(c, dtype=np.float64)
    if not np.isfinite(c).all():
        return math.inf
    diff = c - ref
    denom = float(np.linalg.norm(ref))
    return float(np.linalg.norm(diff) / (denom or 1.0))


def matmul_error(c: Any, a: Any, b: Any) -> float:
    """||C - A@B|| / || |A| @ |B| || (Frobenius, float64): the error relative to the size of the
    products summed, which a correct kernel keeps near sqrt(K) * eps however much the sum cancels
    (||A@B|| alone flags a 9-term dot product that cancels to 0.003 as 5e-5 in float32)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    scale = float(np.linalg.norm(np.matmul(np.abs(a), np.abs(b))))
    diff = np.asarray(c, np.float64) - np.matmul(a, b)
    return float(np.linalg.norm(diff) / (scale or 1.0))
