"""Small helpers shared by the tests."""

from __future__ import annotations

import numpy as np


def rel_error(c, ref) -> float:
    """||C - C_ref|| / ||C_ref|| (Frobenius), with C_ref taken in float64."""
    ref = np.asarray(ref, dtype=np.float64)
    denom = np.linalg.norm(ref)
    return float(np.linalg.norm(np.asarray(c, dtype=np.float64) - ref) / (denom or 1.0))


def available_backends() -> list[str]:
    """Names of the backends that can run here."""
    import tiledmm

    return sorted(b.name for b in tiledmm.backends() if b.available)
