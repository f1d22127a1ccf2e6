"""The rules of a matmul call, shared by the API, the engine, the Dask engine and the torch
half-precision path: NumPy's as data-free checks and shapes, and the checks of tiledmm's two
arguments of its own: :func:`check_kernel` (the one place a ``kernel`` argument is checked: its
name, and a backend's kernels when a name resolves) and :func:`check_precision`."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np

from ..planner.geometry import KERNEL_FAMILIES
from ..planner.plans import PlanError

__all__ = ["accepted_by_numpy", "check_like_numpy", "matmul_shapes", "result_shape_of",
           "result_shape", "unwrap_out", "check_kernel", "check_precision"]  # fmt: skip


def check_kernel(kernel: str, be: Any = None) -> None:
    """A clear error for a ``kernel`` argument: without a backend, a name that is neither
    ``"auto"`` nor a family (a call checks it first, before anything else); with the backend
    a name resolved to, a family it does not have (its kernels are families: plugin_guard)."""
    if kernel == "auto":
        return
    if be is None:
        if kernel not in KERNEL_FAMILIES:
            fams = ", ".join(KERNEL_FAMILIES)
            raise PlanError(f"kernel must be 'auto' or one of {fams}, not {kernel!r}")
    elif kernel not in be.kernels:
        raise PlanError(f"backend {be.name!r} has no {kernel!r} kernel; it has "
                        f"{', '.join(be.kernels)}")  # fmt: skip


def check_precision(precision: str | None) -> None:
    """``matmul``'s ``precision``: None (IEEE) or "tf32"."""
    if precision not in (None, "tf32"):
        raise ValueError(f"precision must be None (IEEE) or 'tf32', not {precision!r}")


@lru_cache(maxsize=1024)
def matmul_shapes(sa: tuple[int, ...], sb: tuple[int, ...]):
    """(batch, M, N, K, a_is_1d, b_is_1d, batch_a, batch_b) of ``matmul`` on operand shapes
    ``sa``, ``sb`` (1-D operands promoted, batches broadcast), or None when numpy would raise."""
    if not sa or not sb:
        return None
    a1, b1 = len(sa) == 1, len(sb) == 1
    m, k = (1, sa[0]) if a1 else sa[-2:]
    k2, n = (sb[0], 1) if b1 else sb[-2:]
    if k != k2:
        return None
    ba, bb = sa[:-2], sb[:-2]
    nd = max(len(ba), len(bb))
    pa, pb = (1,) * (nd - len(ba)) + ba, (1,) * (nd - len(bb)) + bb
    batch = []
    for x, y in zip(pa, pb, strict=True):
        if x != y and 1 not in (x, y):
            return None
        batch.append(y if x == 1 else x)
    return tuple(batch), m, n, k, a1, b1, pa, pb


def result_shape_of(batch, m, n, a1, b1) -> tuple[int, ...]:
    """The result's shape from :func:`matmul_shapes`' parts (1-D operands drop their axis)."""
    return tuple(batch) + (() if a1 else (m,)) + (() if b1 else (n,))


def result_shape(sa: tuple[int, ...], sb: tuple[int, ...]) -> tuple[int, ...] | None:
    """``matmul``'s result shape for operand shapes ``sa``, ``sb``, or None when numpy would
    raise."""
    s = matmul_shapes(tuple(sa), tuple(sb))
    return None if s is None else result_shape_of(*s[:3], *s[4:6])


def check_like_numpy(a: Any, b: Any, out: Any = None) -> None:
    """Replay ``matmul(a, b, out=out)`` on zero-byte stand-ins of the operands, so numpy raises
    its own error (type and wording) if it would; returns quietly if numpy would not (decided
    from shapes and dtypes alone where :func:`accepted_by_numpy` can)."""
    if not accepted_by_numpy(a, b, out):
        _replay(a, b, out)


def _replay(a: Any, b: Any, out: Any) -> None:
    """numpy's matmul on zero-byte stand-ins: raises what numpy raises."""
    sa = np.broadcast_to(np.zeros((), a.dtype), a.shape)
    sb = np.broadcast_to(np.zeros((), b.dtype), b.shape)
    if out is None:
        np.matmul(sa, sb)
    elif hasattr(out, "shape") and hasattr(out, "dtype"):
        np.matmul(sa, sb, out=np.empty(out.shape, out.dtype))
    else:
        np.matmul(sa, sb, out=out)  # numpy's TypeError for a non-array out


def accepted_by_numpy(a: Any, b: Any, out: Any = None) -> bool:
    """True when ``numpy.matmul`` would accept these operands, decided from shapes and dtypes.

    :func:`check_like_numpy` then skips its replay: numpy raises before its loop, but when it
    does not raise the replay computes a product as large as the real one (at 32768^3, ~35 s of
    the caller's CPU). Anything unusual returns False, and the replay decides."""
    if a.ndim < 1 or b.ndim < 1 or a.shape[-1] != b.shape[0 if b.ndim == 1 else -2]:
        return False
    try:
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        rdt = np.matmul.resolve_dtypes((a.dtype, b.dtype, None))[2]
    except (TypeError, ValueError):
        return False
    if out is None:
        return True
    if not (hasattr(out, "shape") and hasattr(out, "dtype")):
        return False
    if isinstance(out, np.ndarray) and not out.flags.writeable:
        return False
    rows = (a.shape[-2],) if a.ndim > 1 else ()
    cols = (b.shape[-1],) if b.ndim > 1 else ()
    return tuple(out.shape) == batch + rows + cols and np.can_cast(rdt, out.dtype, "same_kind")


def unwrap_out(out: Any) -> Any:
    """numpy's ``out=`` forms: an array, or a tuple with exactly one entry (which may be None)."""
    if isinstance(out, tuple):
        if len(out) != 1:
            raise ValueError("The 'out' tuple must have exactly one entry per ufunc output")
        return out[0]
    return out
