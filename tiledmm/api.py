"""``tiledmm.matmul``: NumPy's matmul semantics on any registered backend.

Shapes, 1-D promotion, batch broadcasting, result dtype, ``out=`` and error messages follow
``numpy.matmul``. float32 and float64 run in the backend's kernels; every other dtype NumPy
accepts (bool, integers, float16, complex, object) is delegated to the array library
(``numpy.matmul`` on the host, the backend's ``vendor_matmul`` on a device), so the result is
NumPy's exactly. Errors are NumPy's own: on a mismatch the same call is replayed on zero-size
stand-ins of the operands, so the exception type and wording are exactly numpy's.

NumPy's ufunc keywords (``axes=``, ``casting=``, ``order=``, ``dtype=``, ``signature=``,
``subok=``; ``axis=`` and ``keepdims=`` raise numpy's error) are numpy's on every array kind and
backend (:mod:`tiledmm.interop.keyword_matmul`): the axes are moved as views of the caller's arrays
and
the product runs in the backend's kernels, on the device the arrays live on. By design,
ndarray subclasses other than ``np.memmap`` (``np.matrix``, masked arrays) are handed to
``numpy.matmul``, so they keep their own semantics.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .core import engine, registry
from .core.semantics import check_kernel, check_precision, unwrap_out
from .dask import product as dask
from .interop import bridge, keyword_matmul, kinds, torchpath
from .interop.kinds import lib_by_type, lib_of
from .tune import first_calibration

__all__ = ["matmul"]

# first-use calibration, then first-use tuning, run inside the engine's path
engine.set_untuned_hook(first_calibration.before_plan)

#: HOST_LIBS: array kinds (``tiledmm.interop.kinds``) whose objects with ``__array__`` are host data
HOST_LIBS = frozenset({"host", "numpy", "dask"})
_host_types: dict[tuple[type, int], bool] = {}


def _host_like(x: Any) -> bool:
    """A host array-like that is not an ndarray (a wrapper with ``shape``, ``dtype`` and
    ``__array__``, such as dask's test class EncapsulateNDArray) and no registered backend's
    native array: it is taken as NumPy, so every CPU backend returns NumPy for it (the
    caller's-kind rule, docs/interop.md). Cached per type and registry generation."""
    t = type(x)
    if t is np.ndarray or not (hasattr(x, "shape") and hasattr(x, "dtype")):
        return False
    if dask.is_dask_array(x):  # lazy arrays take the Dask route
        return False
    key = (t, registry.generation())
    hit = _host_types.get(key)
    if hit is None:
        lib = lib_by_type.get(t) or lib_of(t)
        hit = hasattr(t, "__array__") and lib in HOST_LIBS and not registry.candidates(x)
        if len(_host_types) > 256:
            _host_types.clear()
        _host_types[key] = hit
    return hit


def matmul(
    a: Any,
    b: Any,
    /,
    *,
    backend: str = "auto",
    kernel: str = "auto",
    out: Any = None,
    precision: str | None = None,
    **ufunc_kwargs: Any,
):
    """Matrix product with NumPy's ``matmul`` semantics, computed by a tiledmm backend.

    Args:
        a, b: array-likes (NumPy arrays, device arrays of the chosen backend, nested lists).
        backend: a backend name, an alias (``"cuda"``, ``"cpu"``), or ``"auto"`` (where the
            inputs live, then the planner's fastest prediction).
        kernel: ``"naive"``, ``"tiled"``, ``"register"`` or ``"auto"`` (the highest rung the
            backend implements, which is the fastest measured).
        out: optional output array (or a 1-tuple holding one); returned itself, as numpy does.
        precision: ``None`` (IEEE: float32 never runs on tensor cores) or ``"tf32"`` (float32
            inputs rounded to TF32 on tensor cores, the ``mma`` family; asked for, never implied).
            float16/bfloat16 run on tensor cores where the backend has ``mma`` for them
            (float32 accumulation, the 16-bit result numpy defines), else in the array library.
        ufunc_kwargs: numpy's ufunc keywords (``axes``, ``casting``, ``order``, ``dtype``,
            ``signature``, ``subok``), with numpy's meaning and errors on every array kind;
            the product still runs in the backend (see :mod:`tiledmm.interop.keyword_matmul`).

    Returns an array of the caller's kind: NumPy in, NumPy out; device arrays stay on the device;
    Dask arrays in, a lazy Dask array out (see :mod:`tiledmm.dask`).
    """
    if ufunc_kwargs:  # numpy's keywords: views with the core axes last, then the plain call

        def inner(x: Any, y: Any, out: Any = None) -> Any:
            return matmul(x, y, backend=backend, kernel=kernel, out=out, precision=precision)

        return keyword_matmul.matmul(a, b, out, ufunc_kwargs, inner)
    if precision is None:  # first: 2-D products seen before
        if type(a) in torchpath.TYPES:
            hit = torchpath.matmul(a, b, backend, kernel, out)
        elif out is None:
            hit = engine.hot_path(backend, kernel, a, b)
        else:
            hit = engine.hot_path_out(backend, kernel, a, b, out)
        if hit is not None:
            return hit
    if _host_like(a) or _host_like(b):  # host wrappers are NumPy data: NumPy comes back
        a = np.asarray(a) if _host_like(a) else a
        b = np.asarray(b) if _host_like(b) else b
    way, kind, be = kinds.route(a, b, out, backend)  # the one decision on the operands' kinds
    if way == "foreign":
        res = bridge.matmul_foreign(kind, a, b, out, be, backend=backend, kernel=kernel,
                                    precision=precision)  # fmt: skip
        if precision is None and kind.lib == "torch":
            torchpath.learn(a, b, backend, kernel)  # the next such call: torchpath.matmul
        return res
    if way == "dask":
        check_kernel(kernel)
        check_precision(precision)
        return dask.matmul(a, b, backend=backend, kernel=kernel, out=unwrap_out(out))
    return engine.matmul(a, b, backend=backend, kernel=kernel, out=out, precision=precision)
