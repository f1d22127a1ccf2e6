"""The engine: one product of operands the backends take as they are, from the chosen backend's
plan to its launch. NumPy's rules for shapes, dtypes, 1-D promotion, batches and ``out=``; the
hot path for products seen before (a dict lookup, no planning).

:func:`tiledmm.api.matmul` is the front door: it routes Dask and foreign operands (torch, JAX,
DLPack) elsewhere once, and sends everything else here. The engine imports neither the array
bridge nor Dask.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import numpy as np

from ..planner.plans import Plan
from . import registry
from .backend import Backend
from .dispatch import decide
from .semantics import (
    check_kernel,
    check_like_numpy,
    check_precision,
    matmul_shapes,
    result_shape_of,
    unwrap_out,
)

__all__ = ["matmul", "hot_path", "hot_path_out", "hot_path_entries", "bound", "run_batch"]

# The hot path: plain 2-D products of arrays without out=, keyed by everything that decides the
# launch; entries hold the device key they were planned for, and the backend's pre-bound launch
# (``bind(plan)``, an optional backend method: the CuPy backend's ``Bound``; through
# ``bound`` below, as the torch fast path holds it too) or None.
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


#: Called as ``hook(backend, m, n, k, dtype, family, batch)`` before a product is planned: the
#: front door (:mod:`tiledmm.api`) installs first-use calibration and tuning here
#: (``tiledmm.tune.first_calibration.before_plan``), which live above the engine; None runs
#: nothing.
_untuned_hook: Callable[..., None] | None = None


def set_untuned_hook(hook: Callable[..., None] | None) -> None:
    """Install (or remove, with None) the hook run before a product is planned."""
    global _untuned_hook
    _untuned_hook = hook


def _raise_like_numpy(a: Any, b: Any, out: Any = None) -> None:
    check_like_numpy(a, b, out)
    raise ValueError(f"matmul: operands with shapes {a.shape} and {b.shape} cannot be multiplied")


def _as_array(x: Any) -> Any:
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return np.asarray(x) if isinstance(x, np.memmap) else x
    return np.asarray(x)


def _numpy_subclass(x: Any) -> bool:
    """An ndarray subclass with semantics of its own (np.matrix, masked arrays)."""
    return isinstance(x, np.ndarray) and type(x) is not np.ndarray and not isinstance(x, np.memmap)


def matmul(a: Any, b: Any, /, *, backend: str | Backend = "auto", kernel: str = "auto",
           out: Any = None, precision: str | None = None):  # fmt: skip
    """The product of operands the backends take as they are (NumPy, the backend's own device
    arrays, lists): the hot path, else the full one. ``backend`` is a name, an alias, "auto",
    or a Backend the caller already resolved (the bridge passes the one it asked)."""
    if out is None and precision is None:
        hit = hot_path(backend, kernel, a, b)
        if hit is not None:
            return hit
    return _matmul(a, b, backend=backend, kernel=kernel, out=out, precision=precision)


def hot_path(backend: str, kernel: str, a: Any, b: Any) -> Any:
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


def hot_path_out(backend: str, kernel: str, a: Any, b: Any, out: Any) -> Any:
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
    """The full path: numpy's rules, backend and plan choice, batches, out= (Dask and foreign
    operands never reach it: :func:`tiledmm.api.matmul` routes them first). ``kernel`` and
    ``precision`` are validated here, once; dispatch is entered once (:func:`decide`)."""
    check_kernel(kernel)
    check_precision(precision)
    out = unwrap_out(out)
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
    into = None  # an out= of another shape or dtype: the product is computed, then stored there
    if out is not None:
        if not hasattr(out, "shape") or not hasattr(out, "dtype"):
            check_like_numpy(a, b, out)  # numpy's TypeError for a non-array out
        if isinstance(out, np.ndarray) and not out.flags.writeable:
            raise ValueError("output array is read-only")
        if tuple(out.shape) != rshape or not _castable(rdt, out.dtype):
            check_like_numpy(a, b, out)  # numpy's error, or numpy broadcasts into a larger out
            into, out = out, None
    hook = _untuned_hook if precision is None else None  # first use (wired by tiledmm.api)
    # (the hot path is keyed by the kernel the caller asked for: "auto" stays "auto" where
    # decide answers "mma", for a dtype the backend runs only on tensor cores)
    be, _, plan = decide(backend, kernel, a, b, m, n, k, rname, math.prod(batch), precision,
                         hook)  # fmt: skip
    if into is not None:
        backend = be  # (a product stored into out= is remembered under its Backend)
        return _store(be, into, _finish(be, plan, a, b, backend, kernel, precision, None, host,
                                        rdt, shapes, rshape))  # fmt: skip
    return _finish(be, plan, a, b, backend, kernel, precision, out, host, rdt, shapes, rshape)


def _finish(be: Backend, plan: Plan | None, a: Any, b: Any, backend: str | Backend, kernel: str,
            precision: str | None, out: Any, host: bool, rdt: np.dtype, shapes: tuple,
            rshape: tuple) -> Any:  # fmt: skip
    """The launch of what :func:`decide` chose (``plan`` None: the array library computes a
    dtype the backend does not run), into ``out`` when given; remembered for the hot path."""
    batch, m, n, k, a1, b1, pa, pb = shapes
    if plan is None:  # delegated: the array library's own result
        if host:
            return np.matmul(a, b) if out is None else np.matmul(a, b, out=out)
        res = be.vendor_matmul(be.asarray(a, a.dtype), be.asarray(b, b.dtype))
        return res if out is None else _store(be, out, res)
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
            go = bound(be, plan) if plain or vector else None
            entry = (be, plan, rdt, host, be.device_key(), go, be.accepts(a), shaped)
            _remember(_fast_key(backend, kernel, a, b), entry)
        elif precision is None and not batch and not (a1 or b1):  # out= given: 2-D entries
            entry = (be, plan, rdt, host, be.device_key(), bound(be, plan),
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


def run_batch(be: Backend, plan: Plan, A, B, R, batch, pa, pb) -> None:
    """``R = A @ B`` over ``batch`` (:func:`tiledmm.core.semantics.matmul_shapes`' batch and the
    operands' padded batch shapes ``pa``, ``pb``; 1 = broadcast): the backend's
    ``run_batched`` (one launch on the GPU backends), else ``run`` per matrix."""
    if not batch:
        be.run(plan, A, B, R)
        return
    if be.run_batched(plan, A, B, R):
        return
    off_a, off_b = len(batch) - (A.ndim - 2), len(batch) - (B.ndim - 2)
    for idx in np.ndindex(*batch):
        ia = tuple(0 if pa[d] == 1 else i for d, i in enumerate(idx))[off_a:]
        ib = tuple(0 if pb[d] == 1 else i for d, i in enumerate(idx))[off_b:]
        be.run(plan, A[ia], B[ib], R[idx])


def hot_path_entries() -> int:
    """How many 2-D launches the hot path remembers (at most ``HOT_PATH_MAX``)."""
    return len(_fast)


def _fast_key(backend: str, kernel: str, a: Any, b: Any) -> tuple | None:
    """The hot path's key: arrays only (objects without ``.shape``, such as lists, get none);
    the registry's generation expires it (``dispatch.clear_caches`` starts a new one)."""
    if not isinstance(backend, str):  # a resolved Backend (the bridge's): keyed by identity
        backend = ("backend", id(backend))
    try:
        return (backend, kernel, type(a), type(b), a.shape, b.shape, a.dtype, b.dtype,
                registry.generation())  # fmt: skip
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


def bound(be: Backend, plan: Plan) -> Any:
    """The backend's pre-bound launch of ``plan`` (``Backend.bind``), or None (also when
    binding fails): the hot path holds it, for CuPy inputs and torch tensors alike."""
    try:
        return be.bind(plan)
    except Exception:  # noqa: BLE001 - an optional shortcut must not fail a correct call
        return None
