"""Which numba-cuda works with which NumPy: the known clash as a sentence naming the fix.
Imports no numba (the backend asks before importing it; the engine when choosing one)."""

from __future__ import annotations

__all__ = ["numpy_incompatibility"]


def _version(text: str) -> tuple[int, ...]:
    out = []
    for part in text.split(".")[:3]:
        digits = "".join(ch for ch in part if ch.isdigit())
        out.append(int(digits or 0))
    return tuple(out)


def numpy_incompatibility(numpy_version: str, numba_cuda_version: str | None) -> str | None:
    """The known numba-cuda/NumPy clash, as a sentence naming the fix, or None."""
    if numba_cuda_version is None or _version(numpy_version) < (2, 5):
        return None
    if _version(numba_cuda_version) <= (0, 30, 4):
        return (
            f"numba-cuda {numba_cuda_version} cannot compile kernels with numpy "
            f"{numpy_version} (np.row_stack was removed; NVIDIA/numba-cuda#907, not fixed "
            "upstream): pip install 'numpy<2.5'"
        )
    return None
