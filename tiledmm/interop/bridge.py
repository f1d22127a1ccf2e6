"""Array kinds: any array library in, the same kind out (PyTorch, JAX, Numba, DLPack/array API).

The backends take NumPy, CuPy and Numba arrays (and objects exposing
``__cuda_array_interface__``). This module sits in front of them:

- :func:`~tiledmm.interop.kinds.kind_of` names the caller's array library and device, cached
  per type (:mod:`tiledmm.interop.kinds`, where the route is decided); nothing
  imports torch, jax or cupy unless an operand's type module says it is theirs.
- :func:`to_native` turns a foreign array into one the backends take, zero-copy: host memory
  becomes a NumPy array (``Tensor.numpy()``, ``numpy.from_dlpack``), CUDA memory a CuPy array
  over the same pointer (a Numba device array when CuPy is missing).
- :func:`from_native` gives the result back as the caller's kind, on the caller's device.
- :func:`delegate` hands the dtypes tiledmm does not run (and autograd, traced JAX code, other
  devices) to the caller's own library, so those results are that library's exactly.
- :func:`matmul_foreign` is the whole bridge, one call from ``tiledmm.matmul``.

Mixed kinds follow one rule (:func:`~tiledmm.interop.kinds.result_kind`): ``out``'s kind when
``out=`` is given, else the first operand that is an array (lists and scalars do not count).
tiledmm runs float32 and float64 operands (``RUN_DTYPES``, NumPy's promotion between them), and
CUDA tensors of one 16-bit dtype on a backend's tensor cores (:mod:`tiledmm.interop.halfprec`);
any other operand dtype of a foreign library is delegated. Streams: a CUDA PyTorch operand on a
non-default stream is handled by :class:`~tiledmm.interop.streams.TorchStream` (see there); on
the default stream nothing extra happens. Repeated 2-D products of torch tensors skip this
bridge: :mod:`tiledmm.interop.torchpath` remembers what it decided.
"""

from __future__ import annotations

import sys
import warnings
from typing import Any

import numpy as np

from ..core import engine
from ..core.backend import Backend
from ..core.semantics import unwrap_out
from . import halfprec
from .kinds import RUN_DTYPES, Kind, kind_of, lib_of, optional_module, torch_dtype
from .streams import TorchStream, stream_for
from .torchpath import view

__all__ = ["to_native", "from_native", "delegate", "matmul_foreign"]


# ------------------------------------------------------------------------------- conversion


def _runs(x: Any, k: Kind) -> bool:
    """Whether tiledmm runs this operand itself (else the caller's library does)."""
    if k.lib == "torch":
        return (
            k.device in ("cpu", "cuda")
            and not (x.requires_grad and sys.modules["torch"].is_grad_enabled())  # autograd
            and not x.is_neg()  # a lazily negated view (complex .conj().imag): torch resolves it
            and torch_dtype(sys.modules["torch"], x.dtype) in RUN_DTYPES
        )
    if k.lib in ("jax", "dlpack"):
        return k.device in ("cpu", "cuda") and (k.lib == "dlpack" or x.dtype in RUN_DTYPES)
    return True


def to_native(x: Any, kind: Kind | None = None, *, writable: bool = False) -> Any:
    """``x`` as an array the backends take, sharing its memory (no copy).

    Host memory -> a NumPy array; CUDA memory -> a CuPy array (a Numba device array when CuPy
    is not installed). Native kinds come back unchanged. ``writable`` (for ``out=``) refuses
    read-only memory (JAX arrays are immutable).
    """
    k = kind or kind_of(x)
    if not k.foreign or k.lib == "numba":
        return x
    if k.lib == "torch":
        if k.device == "cpu":
            return (x.detach() if x.requires_grad else x).numpy()  # (under no_grad)
        if k.device == "cuda":
            return _torch_cuda_view(x)
    elif k.device == "cpu":
        r = np.from_dlpack(x)
        if writable and not r.flags.writeable:
            raise TypeError(
                f"out= must be writable; {type(x).__name__} arrays are read-only (JAX arrays "
                "are immutable): leave out= unset and use the result"
            )
        return r
    elif k.device == "cuda":
        cp = optional_module("cupy")
        if cp is None:
            raise TypeError(
                f"{type(x).__name__} on CUDA: reading it needs CuPy (pip install 'tiledmm[cupy]')"
            )
        if writable and k.lib == "jax":
            raise TypeError("out= cannot be a JAX array (JAX arrays are immutable)")
        return cp.from_dlpack(x)
    raise TypeError(f"tiledmm cannot read a {type(x).__name__} on device {k.device!r}")


def _torch_cuda_view(t: Any) -> Any:
    """A CuPy array over a CUDA tensor's memory (owner: the tensor), built from ``data_ptr``
    and strides without going through ``__cuda_array_interface__``'s Python dict."""
    cp = optional_module("cupy")
    if cp is None:
        nb = optional_module("numba.cuda")
        if nb is None:
            raise TypeError("CUDA tensors need CuPy or numba-cuda installed to run in tiledmm")
        return nb.as_cuda_array(t)
    dt = torch_dtype(sys.modules["torch"], t.dtype)
    s, shape, n = dt.itemsize, tuple(t.shape), t.numel()
    if n == 0:
        return cp.empty(shape, dt)
    if t.is_contiguous():  # the usual case: CuPy derives the strides itself
        return view(cp, t.data_ptr(), shape, dt, n * s, t.get_device(), owner=t)
    strides = tuple(st * s for st in t.stride())
    span = sum((d - 1) * st for d, st in zip(shape, strides, strict=True)) + s
    mem = cp.cuda.UnownedMemory(t.data_ptr(), span, t, t.get_device())
    return cp.ndarray(shape, dt, cp.cuda.MemoryPointer(mem, 0), strides=strides)


def _host(r: Any) -> np.ndarray:
    """A result on the host (copied there only when it is a device array)."""
    if isinstance(r, np.ndarray):
        return r
    if isinstance(r, np.generic):
        return np.asarray(r)
    for name in ("get", "copy_to_host"):  # CuPy/PyOpenCL, Numba
        if hasattr(r, name):
            return getattr(r, name)()
    return np.asarray(r)


def from_native(r: Any, kind: Kind, like: Any = None) -> Any:
    """The backend's result ``r`` as an array of ``kind`` (``like``: the operand that set the
    kind, needed for DLPack/array-API libraries). Zero-copy where the memory already is on
    ``kind``'s device; a device copy otherwise."""
    lib = kind.lib
    if lib == "torch":
        torch = sys.modules["torch"]
        if kind.device == "cuda":
            dev = torch.device("cuda", kind.index)
            if hasattr(type(r), "__cuda_array_interface__"):
                return torch.as_tensor(r, device=dev)
            return torch.from_numpy(_host(r)).to(dev)
        return torch.from_numpy(_host(r))
    if lib == "jax":
        from jax import dlpack as jdl

        if kind.device == "cuda":
            cp = optional_module("cupy")
            return jdl.from_dlpack(r if hasattr(r, "__dlpack__") else cp.asarray(r))
        h = _host(r)  # (not np.ascontiguousarray: it turns a 0-d result into shape (1,))
        return jdl.from_dlpack(h if h.flags.c_contiguous else h.copy())
    if lib == "cupy":
        return sys.modules["cupy"].asarray(r)  # (a copy to the device only when r is on the host)
    if lib == "numba":
        if lib_of(type(r)) == "numba":
            return r
        from numba import cuda

        if hasattr(type(r), "__cuda_array_interface__"):
            return cuda.as_cuda_array(r)
        return cuda.to_device(_host(r))
    if lib == "dlpack" and like is not None and hasattr(like, "__array_namespace__"):
        xp = like.__array_namespace__()
        return xp.from_dlpack(_host(r) if kind.device == "cpu" else r)
    return r


def _as_lib(x: Any, kind: Kind) -> Any:
    """``x`` as an operand of ``kind``'s library, for delegation (zero-copy where possible)."""
    if kind_of(x).lib == kind.lib or kind_of(x).lib == "host" and kind.lib != "torch":
        return x
    if kind.lib == "torch":
        torch = sys.modules["torch"]
        dev = torch.device("cuda", kind.index) if kind.device == "cuda" else kind.device
        if hasattr(x, "__dlpack__") and not isinstance(x, np.ndarray):
            return torch.from_dlpack(x).to(dev)
        return torch.as_tensor(x, device=dev)
    if kind.lib == "jax":
        from jax import dlpack as jdl

        return jdl.from_dlpack(x) if hasattr(x, "__dlpack__") else x
    return from_native(to_native(x), kind)


def delegate(a: Any, b: Any, kind: Kind, out: Any = None, like: Any = None) -> Any:
    """The caller's own library multiplies (torch.matmul, jnp.matmul, the array API namespace's
    ``matmul``), so dtypes and semantics tiledmm does not run are that library's exactly."""
    A, B = _as_lib(a, kind), _as_lib(b, kind)
    if kind.lib == "torch":
        torch = sys.modules["torch"]
        return torch.matmul(A, B) if out is None else torch.matmul(A, B, out=out)
    if out is not None and kind.lib in ("jax", "dlpack"):
        raise TypeError(f"out= is not supported for {kind.lib} arrays: use the result")
    if kind.lib == "jax":
        import jax.numpy as jnp

        return jnp.matmul(A, B)
    ns = getattr(like if like is not None else a, "__array_namespace__", None)
    xp = ns() if ns is not None else np
    return xp.matmul(A, B) if out is None else xp.matmul(A, B, out=out)


# ------------------------------------------------------------------------------- the bridge


def matmul_foreign(kind: Kind, a: Any, b: Any, out: Any, be: Backend | None = None,
                   **kwargs: Any) -> Any:  # fmt: skip
    """The engine's product (:func:`tiledmm.core.engine.matmul`, ``kwargs`` its keywords) for
    operands of any kind, with the result as ``kind`` (:func:`tiledmm.interop.kinds.route`'s).
    ``be`` is
    the named backend the route resolved (None for "auto"): the bridge asks it whether it
    reads CUDA memory, and the engine runs on it without resolving the name again."""
    out = unwrap_out(out)
    ka, kb = kind_of(a), kind_of(b)
    like = out if out is not None else (a if ka is kind else b)
    if not (_runs(a, ka) and _runs(b, kb)):
        r = halfprec.matmul(kind, a, b, out, kwargs, _torch_cuda_view)  # (None: not run there)
        return delegate(a, b, kind, out, like) if r is None else r
    A, B = to_native(a, ka), to_native(b, kb)
    if (ka.lib == "dlpack" and A.dtype not in RUN_DTYPES) or (
        kb.lib == "dlpack" and B.dtype not in RUN_DTYPES
    ):
        return delegate(a, b, kind, out, like)
    C = None if out is None else to_native(out, kind, writable=True)
    if (ka.device == "cuda") != (kb.device == "cuda") and "host" not in (ka.lib, kb.lib):
        warnings.warn(
            f"matmul of a {ka.lib} array on {ka.device} and a {kb.lib} array on {kb.device}: "
            "one is copied across devices",
            stacklevel=3,
        )
    run = dict(kwargs, backend=be) if be is not None else kwargs
    on_cuda = [x for x, k in ((A, ka), (B, kb), (C, kind)) if x is not None and k.device == "cuda"]
    if on_cuda and be is not None and not be.accepts(on_cuda[0]):
        r = _through_host(A, B, C, run, kwargs.get("backend"))
        return out if out is not None else from_native(r, kind, like)
    tk = next((k for k in (kind, ka, kb) if k.lib == "torch" and k.device == "cuda"), None)
    h = stream_for(tk) if tk is not None else None
    if h:
        with TorchStream(tk.index, h):
            r = engine.matmul(A, B, out=C, **run)
    else:
        r = engine.matmul(A, B, out=C, **run)
    return out if out is not None else from_native(r, kind, like)


def _through_host(A: Any, B: Any, C: Any, run: dict, name: str | None) -> Any:
    """For a backend that cannot read CUDA memory (OpenCL): operands copied to the host, the
    result (and ``out``, when given) copied back by the caller's library."""
    warnings.warn(
        f"backend {name!r} cannot read CUDA memory: the operands and the "
        "result are copied through the host",
        stacklevel=4,
    )
    r = engine.matmul(_host(A), _host(B), **run)
    if C is not None:
        cp = optional_module("cupy") if lib_of(type(C)) == "cupy" else None
        if cp is not None:
            C[...] = cp.asarray(r)
        else:
            from numba import cuda

            C[(slice(None),) * C.ndim] = cuda.to_device(np.ascontiguousarray(r, C.dtype))
    return r
