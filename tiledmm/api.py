"""``tiledmm.matmul``: NumPy's matmul semantics on any registered backend.

Shapes, 1-D promotion, batch broadcasting, result dtype, ``out=`` and error messages follow
``numpy.matmul``. float32 and float64 run in the backend's kernels; every other dtype NumPy
accepts (bool, integers, float16, complex, object) is delegated to the array library
(``numpy.matmul`` on the host, the backend's ``vendor_matmul`` on a device), so the result is
NumPy's exactly. Errors are NumPy's own: on a mismatch the same call is replayed on zero-size
stand-ins of the operands, so the exception type and wording are exactly numpy's.

NumPy's ufunc keywords (``axes=``, ``casting=``, ``order=``, ``dtype=``, ``signature=``,
``subok=``; ``axis=`` and ``keepdims=`` raise numpy's error) are numpy's on every array kind and
backend (:mod:`tiledmm.keyword_matmul`): the axes are moved as views of the caller's arrays and
the product runs in the backend's kernels, on the device the arrays live on. By design,
ndarray subclasses other than ``np.memmap`` (``np.matrix``, masked arrays) are handed to
``numpy.matmul``, so they keep their own semantics.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

import numpy as np

from . import arrays, first_use, keyword_matmul, registry, torchpath
from . import dask as dask_engine
from .backend import Backend
from .dispatch import (
    cache_token,
    check_kernel_name,
    choose_backend,
    plan_for,
    run_batch,
    tensor_core_family,
)
from .kinds import lib_by_type, lib_of
from .planner import Plan
from .semantics import check_like_numpy, matmul_shapes, result_shape_of

__all__ = ["matmul"]

# The hot path: plain 2-D products of arrays without out=, keyed by everything that decides the
# launch; entries hold the device key they were planned for, and the backend's pre-bound launch
# (``bind(plan)``, an optional backend method: the CuPy backend's ``Bound``; through
# ``torchpath.bound``, as the torch fast path holds it) or None.
# The last field: whether the backend takes ``a``'s type as it is (``accepts``), so an ``out=``
# of that type goes to its ``run`` directly (as the full path's direct case).
_fast: dict[tuple, tuple[Backend, Plan, np.dtype, bool, Any, Any, bool]] = {}
HOT_PATH_MAX = 4096


@lru_cache(maxsize=256)
def _result_dtype(da: np.dtype, db: np.dtype) -> tuple[np.dtype | None, str]:
    """numpy's result dtype for matmul, and its name (a slow property, so cached here)."""
    try:
        rdt = np.matmul.resolve_dtypes((da, db, None))[2]
    except TypeError:  # no matmul loop: let numpy raise its own error later
        return None, ""
    return rdt, rdt.name


def _raise_like_numpy(a: Any, b: Any, out: Any = None) -> None:
    check_like_numpy(a, b, out)
    raise ValueError(f"matmul: operands with shapes {a.shape} and {b.shape} cannot be multiplied")


def _as_array(x: Any) -> Any:
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        if isinstance(x, np.memmap) or (not isinstance(x, np.ndarray) and _host_like(x)):
            return np.asarray(x)
        return x
    return np.asarray(x)


#: HOST_LIBS: array kinds (``tiledmm.kinds``) whose objects with ``__array__`` are host data
HOST_LIBS = frozenset({"host", "numpy", "dask"})
_host_types: dict[tuple[type, int], bool] = {}


def _host_like(x: Any) -> bool:
    """A host array-like that is not an ndarray (a wrapper with ``shape``, ``dtype`` and
    ``__array__``, such as dask's test class EncapsulateNDArray) and no registered backend's
    native array: it is taken as NumPy, so every CPU backend returns NumPy for it (the
    caller's-kind rule, docs/interop.md). Cached per type and registry generation."""
    t = type(x)
    key = (t, registry.generation())
    hit = _host_types.get(key)
    if hit is None:
        lib = lib_by_type.get(t) or lib_of(t)
        hit = hasattr(t, "__array__") and lib in HOST_LIBS and not registry.candidates(x)
        if len(_host_types) > 256:
            _host_types.clear()
        _host_types[key] = hit
    return hit


def _numpy_subclass(x: Any) -> bool:
    """An ndarray subclass with semantics of its own (np.matrix, masked arrays)."""
    return isinstance(x, np.ndarray) and type(x) is not np.ndarray and not isinstance(x, np.memmap)


def _unwrap_out(out: Any) -> Any:
    """numpy's ``out=`` forms: an array, or a tuple with exactly one entry (which may be None)."""
    if isinstance(out, tuple):
        if len(out) != 1:
            raise ValueError("The 'out' tuple must have exactly one entry per ufunc output")
        return out[0]
    return out


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
            the product still runs in the backend (see :mod:`tiledmm.keyword_matmul`).

    Returns an array of the caller's kind: NumPy in, NumPy out; device arrays stay on the device;
    Dask arrays in, a lazy Dask array out (see :mod:`tiledmm.dask`).
    """
    if ufunc_kwargs:  # numpy's keywords: views with the core axes last, then the plain call

        def inner(x: Any, y: Any, out: Any = None) -> Any:
            return matmul(x, y, backend=backend, kernel=kernel, out=out, precision=precision)

        return keyword_matmul.matmul(a, b, out, ufunc_kwargs, inner)
    if precision is not None:  # tensor cores on request: the full path (its plan says so)
        kind = arrays.foreign(a, b, out, backend)
        if kind is not None:
            kw = dict(backend=backend, kernel=kernel, precision=precision)
            return arrays.matmul_foreign(kind, a, b, out, _native, **kw)
        return _matmul(a, b, backend=backend, kernel=kernel, out=out, precision=precision)
    # first: 2-D products seen before (native types, or torch tensors)
    if type(a) in torchpath.TYPES:
        hit = torchpath.matmul(a, b, backend, kernel, out)
    elif out is None:
        hit = _hot_path(backend, kernel, a, b)
    else:
        hit = _hot_path_out(backend, kernel, a, b, out)
    if hit is not None:
        return hit
    kind = arrays.foreign(a, b, out, backend)  # None for NumPy, CuPy, lists, Dask: cheap
    if kind is not None:
        res = arrays.matmul_foreign(kind, a, b, out, _native, backend=backend, kernel=kernel)
        if kind.lib == "torch":  # the next such call: torchpath.matmul
            torchpath.learn(a, b, backend, kernel)
        return res
    return _matmul(a, b, backend=backend, kernel=kernel, out=out)


def _native(a: Any, b: Any, /, *, backend: str, kernel: str, out: Any = None,
            precision: str | None = None):  # fmt: skip
    """``matmul`` for operands the backends take as they are: the hot path, else the full one.
    The array bridge calls this after converting foreign operands (never ``matmul`` itself,
    which would bridge again)."""
    if out is None and precision is None:
        hit = _hot_path(backend, kernel, a, b)
        if hit is not None:
            return hit
    return _matmul(a, b, backend=backend, kernel=kernel, out=out, precision=precision)


def _hot_path(backend: str, kernel: str, a: Any, b: Any) -> Any:
    """The result of a 2-D product seen before (same kinds, shapes, dtypes, registry and
    device), launched without planning; ``None`` on a miss. Only native array types are ever
    stored (foreign kinds reach ``_matmul`` already converted)."""
    key = _fast_key(backend, kernel, a, b)
    hit = _fast.get(key) if key is not None else None
    if hit is None:
        return None
    be, plan, rdt, host, dkey, go, _, shaped = hit
    if be.device_key() != dkey:
        return None
    if shaped is not None:  # batched or 1-D operands: the full path's launch, minus its checks
        if go is not None:  # 1-D, no batch: the bound launch reads (k,) as (1, k) or (k, 1)
            R = be.empty(shaped[-1], rdt, like=a)
            if go.arrays(be.asarray(a, rdt), be.asarray(b, rdt), R):
                return be.to_numpy(R) if host else R
        return _shaped_launch(be, plan, rdt, host, shaped, a, b)
    R = be.empty((plan.m, plan.n), rdt, like=a)
    A, B = be.asarray(a, rdt), be.asarray(b, rdt)
    if go is None or not go.arrays(A, B, R):  # (the bound launch: contiguous operands)
        be.run(plan, A, B, R)
    return be.to_numpy(R) if host else R


def _hot_path_out(backend: str, kernel: str, a: Any, b: Any, out: Any) -> Any:
    """``out=`` on the hot path: a device array of ``a``'s type with the result's shape and
    dtype is handed to the backend's ``run`` (which takes strided and overlapping outputs, as
    the full path's direct case does), and returned; None on a miss (host arrays, other
    shapes, dtypes or types: the full path's rules)."""
    if type(out) is not type(a) or isinstance(out, np.ndarray):
        return None
    key = _fast_key(backend, kernel, a, b)
    hit = _fast.get(key) if key is not None else None
    if hit is None:
        return None
    be, plan, rdt, host, dkey, _, native, shaped = hit
    if host or not native or shaped is not None or out.dtype != rdt:
        return None
    if tuple(out.shape) != (plan.m, plan.n):
        return None
    if be.device_key() != dkey:
        return None
    be.run(plan, be.asarray(a, rdt), be.asarray(b, rdt), out)
    return out


def _matmul(a: Any, b: Any, /, *, backend: str, kernel: str, out: Any = None,
            precision: str | None = None):  # fmt: skip
    """The full path: numpy's rules, backend and plan choice, batches, out=."""
    check_kernel_name(kernel)
    if precision not in (None, "tf32"):
        raise ValueError(f"precision must be None (IEEE) or 'tf32', not {precision!r}")
    if dask_engine.is_dask_array(a) or dask_engine.is_dask_array(b):
        return dask_engine.matmul(a, b, backend=backend, kernel=kernel, out=_unwrap_out(out))
    out = _unwrap_out(out)
    if _numpy_subclass(a) or _numpy_subclass(b):
        return np.matmul(_as_array(a), _as_array(b), out=out)
    a, b = _as_array(a), _as_array(b)
    host = isinstance(a, np.ndarray) and isinstance(b, np.ndarray)
    rdt, rname = _result_dtype(a.dtype, b.dtype)
    shapes = matmul_shapes(a.shape, b.shape)
    if rdt is None or shapes is None:
        if host:
            return np.matmul(a, b) if out is None else np.matmul(a, b, out=out)
        _raise_like_numpy(a, b, out)
    batch, m, n, k, a1, b1, pa, pb = shapes
    rshape = result_shape_of(batch, m, n, a1, b1)
    if out is not None:
        if not hasattr(out, "shape") or not hasattr(out, "dtype"):
            check_like_numpy(a, b, out)  # numpy's TypeError for a non-array out
        if isinstance(out, np.ndarray) and not out.flags.writeable:
            raise ValueError("output array is read-only")
    be = choose_backend(backend, a, b, m, n, k, rname, kernel)
    if out is not None and (tuple(out.shape) != rshape or not _castable(rdt, out.dtype)):
        check_like_numpy(a, b, out)  # numpy's error, or numpy broadcasts into a larger out
        return _store(be, out, _matmul(a, b, backend=be.name, kernel=kernel, precision=precision))

    kernel = tensor_core_family(be, rname, kernel)
    if rname not in be.dtypes and kernel != "mma":  # delegated: the array library's own result
        if host:
            return np.matmul(a, b) if out is None else np.matmul(a, b, out=out)
        res = be.vendor_matmul(be.asarray(a, a.dtype), be.asarray(b, b.dtype))
        return res if out is None else _store(be, out, res)

    if precision is None:  # a shape class nobody tuned on this device: time a short list
        first_use.prepare(be, m, n, k, rname, kernel, math.prod(batch))
    plan = plan_for(be, m, n, k, rname, kernel, batch=math.prod(batch), precision=precision)
    like = a
    A, B = be.asarray(a, rdt), be.asarray(b, rdt)
    if a1:
        A = A.reshape(1, k)
    if b1:
        B = B.reshape(k, 1)
    direct = (
        out is not None
        and out.dtype == rdt
        and be.accepts(out)
        and not (isinstance(out, np.ndarray) and (_overlaps(out, a) or _overlaps(out, b)))
    )
    R = _matrix_view(out, a1, b1) if direct else None
    direct = R is not None
    if R is None:
        R = be.empty(tuple(batch) + (m, n), rdt, like=like)
    if m and n:
        run_batch(be, plan, A, B, R, batch, pa, pb)
        if precision is None and out is None:
            single = not batch and A.ndim == 2 and B.ndim == 2
            plain = single and not (a1 or b1)
            shaped = None if plain else (tuple(batch), m, n, k, a1, b1, pa, pb, rshape)
            vector = single and (a1 or b1) and len(rshape)
            go = torchpath.bound(be, plan) if plain or vector else None
            entry = (be, plan, rdt, host, be.device_key(), go, be.accepts(a), shaped)
            _remember(_fast_key(backend, kernel, a, b), entry)
        elif precision is None and not batch and not (a1 or b1):  # out= given: 2-D entries
            entry = (be, plan, rdt, host, be.device_key(), torchpath.bound(be, plan),
                     be.accepts(a), None)  # fmt: skip
            _remember(_fast_key(backend, kernel, a, b), entry)
    if direct:
        return out
    if out is not None:
        return _store(be, out, R.reshape(rshape))
    R = R.reshape(rshape)
    if host:
        R = be.to_numpy(R)
        return R[()] if R.ndim == 0 else R
    return R


def _matrix_view(out: Any, a1: bool, b1: bool) -> Any:
    """``out`` as the batch of m x n matrices the launch writes: a view with the unit axis a
    1-D operand dropped put back (x @ A: (..., 1, n); A @ x: (..., m, 1); x @ y: (1, 1)), so a
    vector product writes the caller's array without a temporary and a copy. None where the
    array type has no such view (NumPy and CuPy index with None; the others copy)."""
    if not (a1 or b1):
        return out
    if not isinstance(out, np.ndarray) and type(out).__module__.partition(".")[0] != "cupy":
        return None
    if a1 and b1:
        return out[None, None]
    return out[..., None, :] if a1 else out[..., None]


def _shaped_launch(be: Backend, plan: Plan, rdt, host: bool, shaped: tuple, a: Any, b: Any) -> Any:
    """The hot path for a batched or 1-D product seen before: the same launch as the full
    path (one batched launch on the GPU backends), without re-deciding anything."""
    batch, m, n, k, a1, b1, pa, pb, rshape = shaped
    A, B = be.asarray(a, rdt), be.asarray(b, rdt)
    if a1:
        A = A.reshape(1, k)
    if b1:
        B = B.reshape(k, 1)
    R = be.empty(batch + (m, n), rdt, like=a)
    run_batch(be, plan, A, B, R, batch, pa, pb)
    R = R.reshape(rshape)
    if host:
        R = be.to_numpy(R)
        return R[()] if R.ndim == 0 else R
    return R


def hot_path_entries() -> int:
    """How many 2-D launches the hot path remembers (at most ``HOT_PATH_MAX``)."""
    return len(_fast)


def _fast_key(backend: str, kernel: str, a: Any, b: Any) -> tuple | None:
    """The hot path's key: arrays only (objects without ``.shape``, such as lists, get none)."""
    try:
        return (backend, kernel, type(a), type(b), a.shape, b.shape, a.dtype, b.dtype,
                cache_token())  # fmt: skip
    except AttributeError:
        return None


def _remember(key: tuple | None, entry: tuple) -> None:
    """Keep a 2-D call's launch for the hot path (bounded: the oldest half goes when full)."""
    if key is None:
        return
    if len(_fast) >= HOT_PATH_MAX:
        for old in list(_fast)[: HOT_PATH_MAX // 2]:
            _fast.pop(old, None)
    _fast[key] = entry


def _castable(src: np.dtype, dst: Any) -> bool:
    try:
        return np.can_cast(src, np.dtype(dst), casting="same_kind")
    except TypeError:
        return False


def _overlaps(x: np.ndarray, y: Any) -> bool:
    return isinstance(y, np.ndarray) and np.may_share_memory(x, y)


def _store(be: Backend, out: Any, res: Any) -> Any:
    if isinstance(out, np.ndarray):
        np.copyto(out, be.to_numpy(res), casting="same_kind")
    else:  # a device array: index with slices (Numba's device arrays reject an Ellipsis)
        out[(slice(None),) * out.ndim if out.ndim else ...] = res
    return out
