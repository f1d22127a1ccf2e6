"""The swap behind this folder: CuPy's ``matmul`` entry points replaced by ``tiledmm.matmul``.

:func:`install` puts ``tiledmm.matmul(..., backend=...)`` in place of ``cupy.matmul``,
``cupy.linalg.matmul`` and ``cupy.ndarray.__matmul__`` and returns a function that puts CuPy's
back. Calls made while tiledmm runs (the CuPy backend's ``vendor_matmul``, cuBLAS through
``cupy.matmul``, for the dtypes tiledmm delegates) reach CuPy's own functions: the swap covers
the callers' calls, not tiledmm's, which would otherwise recurse. ``@`` with an operand that
is not a ``cupy.ndarray`` keeps CuPy's own rules (scalars, NumPy arrays, NotImplemented).

It imports nothing: the caller hands it the ``cupy`` module and ``tiledmm.matmul``, so
``tests/cupy_matmul/test_harness.py`` checks it on CPU with stand-ins.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

__all__ = ["install"]


def install(cupy: Any, matmul: Callable[..., Any], backend: str = "cupy") -> Callable[[], None]:
    """Swap ``cupy``'s matmul entry points for ``matmul(..., backend=backend)``; returns the
    undo."""
    own_matmul, own_linalg, own_dunder = cupy.matmul, cupy.linalg.matmul, cupy.ndarray.__matmul__
    defined = "__matmul__" in vars(cupy.ndarray)  # else inherited (cupy's _ndarray_base)
    inside = threading.local()

    def swapped(x1: Any, x2: Any, /, out: Any = None, **kwargs: Any) -> Any:
        if getattr(inside, "depth", 0):  # tiledmm delegating to CuPy: CuPy's own
            return own_matmul(x1, x2, out=out, **kwargs)
        inside.depth = 1
        try:
            return matmul(x1, x2, backend=backend, out=out, **kwargs)
        finally:
            inside.depth = 0

    def swapped_dunder(self: Any, other: Any) -> Any:
        if getattr(inside, "depth", 0) or not isinstance(other, cupy.ndarray):
            return own_dunder(self, other)
        return swapped(self, other)

    cupy.matmul = cupy.linalg.matmul = swapped
    cupy.ndarray.__matmul__ = swapped_dunder

    def undo() -> None:
        cupy.matmul, cupy.linalg.matmul = own_matmul, own_linalg
        if defined:
            cupy.ndarray.__matmul__ = own_dunder
        else:
            del cupy.ndarray.__matmul__

    return undo
