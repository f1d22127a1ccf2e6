"""Small helpers shared by the tests (the error metric is tiledmm.accuracy's, the one metric)."""

from __future__ import annotations

from tiledmm.accuracy import matmul_error, rel_error

__all__ = ["available_backends", "matmul_error", "rel_error"]


def available_backends() -> list[str]:
    """Names of the backends that can run here."""
    import tiledmm

    return sorted(b.name for b in tiledmm.backends() if b.available)
