"""NumPy's matmul rules as data-free checks, shared by the API and the Dask engine."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["check_like_numpy"]


def check_like_numpy(a: Any, b: Any, out: Any = None) -> None:
    """Replay ``matmul(a, b, out=out)`` on zero-byte stand-ins of the operands, so numpy raises
    its own error (type and wording) if it would; returns quietly if numpy would not."""
    sa = np.broadcast_to(np.zeros((), a.dtype), a.shape)
    sb = np.broadcast_to(np.zeros((), b.dtype), b.shape)
    if out is None:
        np.matmul(sa, sb)
    elif hasattr(out, "shape") and hasattr(out, "dtype"):
        np.matmul(sa, sb, out=np.empty(out.shape, out.dtype))
    else:
        np.matmul(sa, sb, out=out)  # numpy's TypeError for a non-array out
