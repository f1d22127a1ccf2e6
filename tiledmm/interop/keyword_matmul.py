"""``tiledmm.matmul`` with NumPy's ufunc keywords, on every array kind and backend (issue 39).

``out``, ``axes``, ``casting``, ``order``, ``dtype``, ``signature`` and ``subok`` mean what they
mean to ``numpy.matmul`` (``axis`` and ``keepdims`` raise numpy's TypeError: matmul has neither),
and the arrays stay where they are. :func:`matmul`:

1. checks the call as numpy would (:func:`tiledmm.interop.ufunc_keywords.check`: numpy's exception
   type and message where numpy raises);
2. moves each operand's core axes last as views (``moveaxis`` of the array's own library) and
   casts them to numpy's loop dtype (``dtype=``/``signature=``; a no-op for most calls);
3. runs the product through tiledmm's plain ``matmul`` (``inner``: the same backend, kernel
   and precision), so float32/float64 products run in the backend's kernels on any kind;
4. writes it where numpy would: into ``out`` (a view with the output's core axes last), or,
   where the product's dtype differs from ``out``'s (``casting=``), into a temporary of
   ``out``'s kind that is then cast into it; without ``out``, into a new array laid out as
   numpy lays it out (``order=``, :func:`tiledmm.interop.ufunc_keywords.layout`), whose core axes
   are
   then moved to ``axes``' place for the result.

Host operands whose loop dtype is not one the kernels run (integers, bool, complex, float16,
object) and ndarray subclasses go to ``numpy.matmul`` with the same keywords: its result is
numpy's exactly. Strided kinds (NumPy, CuPy, PyTorch) get numpy's layout; JAX and Dask arrays
(no strides) get the product with its axes moved. Numba device arrays go through CuPy views.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from .kinds import RUN_DTYPES, lib_of, optional_module, torch_dtype
from .ufunc_keywords import Call, Spec, check, f_contiguous, layout

__all__ = ["matmul"]


def matmul(a: Any, b: Any, out: Any, kw: dict, inner: Callable[..., Any]) -> Any:
    """``numpy.matmul(a, b, out=out, **kw)``'s result, computed by ``inner(A, B, out=None)``
    (tiledmm's matmul without keywords) on views of the operands."""
    a0, b0 = a, b
    a, b = _operand(a), _operand(b)
    o = out[0] if type(out) is tuple and len(out) == 1 else out
    if any(_subclass(x) for x in (a, b, o)):  # np.matrix, masked arrays: numpy's own semantics
        return np.matmul(a, b, out=out, **kw)
    call = check(_spec(a), _spec(b), _spec_out(out), kw)
    if _host(a, b, o) and call.dtype not in RUN_DTYPES:  # numpy's loops, numpy's result
        return np.matmul(a, b, out=out, **kw)
    back = None  # Numba device arrays: CuPy views over them, the result made Numba again
    if "numba" in (lib_of(type(a)), lib_of(type(b)), lib_of(type(o))):
        a, b, o, back = _through_cupy(a, b, o)
    A = _ops(a).astype(_ops(a).move(a, call.axes[0], _last(call.axes[0])), call.dtype)
    B = _ops(b).astype(_ops(b).move(b, call.axes[1], _last(call.axes[1])), call.dtype)
    if o is not None:
        _into(call, A, B, o, inner)
        return out[0] if type(out) is tuple else out
    like = b if _listlike(a0) and not _listlike(b0) else a
    res = _new(call, a, b, A, B, like, inner)
    return back(res) if back is not None else res


def _new(call: Call, a: Any, b: Any, A: Any, B: Any, like: Any, inner: Callable) -> Any:
    """The result without ``out``: a new array of ``like``'s kind in numpy's layout."""
    ops = _ops(like)
    nl, nc = len(call.loop), len(call.core)
    if not (nl or nc):  # a 0-d result: numpy returns a scalar (host) or a 0-d array
        return inner(A, B)
    core = tuple(range(nl, nl + nc))
    if not ops.strided:  # no layout to honour: the product, its core axes put in place
        return ops.move(inner(A, B), core, call.axes[2])
    pa, pb = _ops(a), _ops(b)
    operands = [(tuple(a.shape), pa.strides(a)), (tuple(b.shape), pb.strides(b))]
    perm = layout(call, operands, pa.f_contiguous(a) and pb.f_contiguous(b))
    shape = call.loop + call.core
    T = ops.permute(ops.empty(tuple(shape[p] for p in perm), call.dtype, like), _inverse(perm))
    inner(A, B, out=T)
    return ops.move(T, core, call.axes[2])


def _into(call: Call, A: Any, B: Any, o: Any, inner: Callable) -> None:
    """The product written into ``out`` (``o``) through a view with its core axes last."""
    ops = _ops(o)
    if not ops.strided:
        raise TypeError(
            f"out= with numpy's ufunc keywords needs an array that can be written through a "
            f"view (NumPy, CuPy, PyTorch), not {type(o).__name__}"
        )
    view = ops.move(o, call.axes[2], _last(call.axes[2]))
    if ops.dtype(o) == call.dtype and call.out_loop == call.loop:
        inner(A, B, out=view)
        return
    tmp = ops.empty(call.loop + call.core, call.dtype, o)  # out's kind and device
    inner(A, B, out=tmp)
    ops.assign(view, tmp)  # numpy's cast (checked against casting=), broadcast into out


# ------------------------------------------------------------------------------- operands


def _operand(x: Any) -> Any:
    if isinstance(x, np.memmap):
        return np.asarray(x)
    return x if hasattr(x, "shape") and hasattr(x, "dtype") else np.asarray(x)


def _listlike(x: Any) -> bool:
    """Not an array (a list, a scalar): the other operand sets the result's kind."""
    return not (hasattr(x, "shape") and hasattr(x, "dtype"))


def _subclass(x: Any) -> bool:
    return isinstance(x, np.ndarray) and type(x) is not np.ndarray and not isinstance(x, np.memmap)


def _host(*xs: Any) -> bool:
    return all(x is None or isinstance(x, np.ndarray) for x in xs)


def _spec(x: Any) -> Spec:
    if isinstance(x, np.ndarray):
        return Spec(x.shape, x.dtype, bool(x.flags.writeable))
    return Spec(tuple(x.shape), _ops(x).dtype(x))


def _spec_out(out: Any) -> Any:
    """numpy's ``out=`` forms with every array as a :class:`Spec` (anything else as given)."""
    if isinstance(out, tuple):
        return tuple(_spec_out(x) for x in out)
    if out is None or not (hasattr(out, "shape") and hasattr(out, "dtype")):
        return out
    return _spec(np.asarray(out) if isinstance(out, np.memmap) else out)


def _last(axes: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(range(-len(axes), 0))


def _same(n: int, src: tuple, dst: tuple) -> bool:
    """Whether moving axes ``src`` to ``dst`` leaves an ``n``-d array as it is."""
    return [s % n for s in src] == [d % n for d in dst]


def _inverse(perm: list[int]) -> list[int]:
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return inv


def _through_cupy(a: Any, b: Any, o: Any) -> tuple[Any, Any, Any, Callable | None]:
    """Numba device arrays as CuPy views (same memory); the result converted back when it is
    of Numba's kind."""
    cp = optional_module("cupy")
    if cp is None:
        raise TypeError(
            "numpy's ufunc keywords on Numba device arrays need CuPy (pip install 'tiledmm[cupy]')"
        )
    numba_result = lib_of(type(a)) == "numba" or (
        _listlike(a) and lib_of(type(b)) == "numba"
    )  # fmt: skip
    a, b, o = (cp.asarray(x) if lib_of(type(x)) == "numba" else x for x in (a, b, o))
    if not numba_result:
        return a, b, o, None
    from numba import cuda

    return a, b, o, cuda.as_cuda_array


# ------------------------------------------------------------------------------- namespaces


class _Xp:
    """Array operations with numpy's names in one library's namespace (NumPy, CuPy)."""

    strided = True

    def __init__(self, xp: Any) -> None:
        self.xp = xp

    def move(self, x: Any, src: tuple, dst: tuple) -> Any:
        return x if _same(x.ndim, src, dst) else self.xp.moveaxis(x, src, dst)

    def permute(self, x: Any, perm: list[int]) -> Any:
        return x.transpose(tuple(perm))

    def empty(self, shape: tuple, dtype: np.dtype, like: Any) -> Any:
        return self.xp.empty(shape, dtype=dtype)

    def astype(self, x: Any, dtype: np.dtype) -> Any:
        return x if x.dtype == dtype else x.astype(dtype)

    def assign(self, dst: Any, src: Any) -> None:
        dst[...] = src  # an unsafe cast, as numpy's output cast once casting= allowed it

    def strides(self, x: Any) -> tuple[int, ...] | None:
        return tuple(x.strides)

    def f_contiguous(self, x: Any) -> bool:
        return bool(x.flags.f_contiguous)

    def dtype(self, x: Any) -> np.dtype:
        return np.dtype(x.dtype)


class _Torch(_Xp):
    """PyTorch tensors: ``torch.moveaxis``, ``permute``, ``new_empty`` on the operand's device."""

    def permute(self, x: Any, perm: list[int]) -> Any:
        return x.permute(tuple(perm))

    def empty(self, shape: tuple, dtype: np.dtype, like: Any) -> Any:
        return like.new_empty(shape, dtype=self._torch(dtype))

    def astype(self, x: Any, dtype: np.dtype) -> Any:
        return x if self.dtype(x) == dtype else x.to(self._torch(dtype))

    def assign(self, dst: Any, src: Any) -> None:
        dst.copy_(src)

    def strides(self, x: Any) -> tuple[int, ...] | None:
        return tuple(s * x.element_size() for s in x.stride())

    def f_contiguous(self, x: Any) -> bool:
        return f_contiguous(tuple(x.shape), self.strides(x), x.element_size())

    def dtype(self, x: Any) -> np.dtype:
        dt = torch_dtype(self.xp, x.dtype)
        if dt is None:
            raise TypeError(f"numpy's ufunc keywords need a NumPy dtype; {x.dtype} has none")
        return dt

    def _torch(self, dtype: np.dtype) -> Any:
        t = getattr(self.xp, dtype.name, None)
        if t is None or torch_dtype(self.xp, t) != dtype:
            raise TypeError(f"numpy's loop dtype {dtype} has no torch dtype")
        return t


class _Unstrided(_Xp):
    """Libraries without strides (JAX, Dask, other array-API namespaces): no layout to give."""

    strided = False

    def move(self, x: Any, src: tuple, dst: tuple) -> Any:
        if _same(x.ndim, src, dst):
            return x
        if hasattr(self.xp, "moveaxis"):
            return self.xp.moveaxis(x, src, dst)
        n = x.ndim  # the array API's permute_dims, with numpy's moveaxis order
        src, dst = [s % n for s in src], [d % n for d in dst]
        perm = [i for i in range(n) if i not in src]
        for d, s in sorted(zip(dst, src, strict=True)):
            perm.insert(d, s)
        return self.xp.permute_dims(x, tuple(perm))

    def astype(self, x: Any, dtype: np.dtype) -> Any:
        if np.dtype(x.dtype) == dtype:
            return x
        return x.astype(dtype) if hasattr(x, "astype") else self.xp.astype(x, dtype)

    def strides(self, x: Any) -> None:
        return None

    def f_contiguous(self, x: Any) -> bool:
        return False


def _ops(x: Any) -> _Xp:
    lib = lib_of(type(x))
    if lib in ("numpy", "host"):
        return _NUMPY
    if lib == "cupy":
        return _Xp(sys.modules["cupy"])
    if lib == "torch":
        return _Torch(sys.modules["torch"])
    if lib == "dask":
        return _Unstrided(optional_module("dask.array"))
    if lib == "jax":
        return _Unstrided(optional_module("jax.numpy"))
    ns = getattr(x, "__array_namespace__", None)
    if ns is not None:
        return _Unstrided(ns())
    raise TypeError(f"numpy's ufunc keywords are not supported for {type(x).__name__} operands")


_NUMPY = _Xp(np)
