"""Small helpers shared by the tests."""

from __future__ import annotations

import numpy as np


def rel_error(c, ref) -> float:
    """||C - C_ref|| / ||C_ref|| (Frobenius), with C_ref taken in float64."""
    ref = np.asarray(ref, dtype=np.float64)
    denom = np.linalg.norm(ref)
    return float(np.linalg.norm(np.asarray(c, dtype=np.float64) - ref) / (denom or 1.0))


def matmul_error(c, a, b) -> float:
    """||C - A@B|| / || |A| @ |B| || (Frobenius, float64): the error relative to the size of
    the products summed, which a correct fp32 kernel keeps near sqrt(K) * eps however much the
    sum cancels (||A@B|| alone flags a 9-term dot product that cancels to 0.003 as 5e-5)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    scale = np.linalg.norm(np.matmul(np.abs(a), np.abs(b)))
    diff = np.asarray(c, np.float64) - np.matmul(a, b)
    return float(np.linalg.norm(diff) / (scale or 1.0))


def available_backends() -> list[str]:
    """Names of the backends that can run here."""
    import tiledmm

    return sorted(b.name for b in tiledmm.backends() if b.available)
