"""CuPy's array model for the shared launch path (:mod:`tiledmm_backends.kernels.launch`), and
the cupy module and kernel compiler the backend and its mma family share."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import kernels as K
from ..kernels import launch

__all__ = ["ARRAYS", "CupyArrays", "compile_kernel", "cupy_module"]

_CP: Any = None


def cupy_module():
    """The cupy module, imported on first use (never at tiledmm import time)."""
    global _CP
    if _CP is None:
        import cupy

        _CP = cupy
    return _CP


def compile_kernel(src: str, name: str = "gemm"):
    return cupy_module().RawModule(code=src).get_function(name)


class CupyArrays:
    """CuPy's array model for the shared launch path: a kernel takes the array itself (its
    pointer: offset 0), whose address gives the alignment."""

    def __init__(self) -> None:
        self.reducers: dict[tuple, Any] = {}
        self.counts: dict[tuple[int, int], Any] = {}  # (device, stream) -> zeroed counters

    def layout(self, x) -> launch.Layout:
        s0, s1 = x.strides[-2:]  # an N-D array: its first matrix (launch.run_batched)
        return (x, 0, x.data.ptr, s0, s1, 0)  # type: ignore[return-value]  # a plain tuple: hot

    def contiguous(self, x):
        return cupy_module().ascontiguousarray(x)

    def empty(self, shape, dtype):
        return cupy_module().empty(shape, dtype)

    def aligned_copy(self, x, ld: int, role: str):
        rows, cols = x.shape
        y = cupy_module().empty((rows, ld), x.dtype)[:, :cols]
        y[...] = x
        return y

    def copy(self, src, dst) -> None:
        dst[...] = src

    def device_id(self) -> int:
        return cupy_module().cuda.runtime.getDevice()

    def enqueue(self, call, m, n, k, a, oa, lda, b, ob, ldb, c, oc, ldc, bt=launch.NOBATCH,
                tail=()):  # fmt: skip
        fn, grid, block = call
        i32, z = np.int32, _ZERO  # offsets: 0 for one matrix (the pointers carry them)
        if bt is launch.NOBATCH and not tail:
            fn(grid, block, (i32(m), i32(n), i32(k), a, z, i32(lda), b, z, i32(ldb), c, z,
                             i32(ldc)) + _NOBATCH)  # fmt: skip
            return
        fn((grid[0], grid[1], bt[0]), block,
           (i32(m), i32(n), i32(k), a, i32(oa), i32(lda), b, i32(ob), i32(ldb), c, i32(oc),
            i32(ldc)) + tuple(i32(v) for v in bt[1:])
           + tuple(i32(v) if isinstance(v, int) else v for v in tail))  # fmt: skip

    def counters(self, size: int):
        """Zeroed uint32 counters for the one-pass gemv on the current device and stream
        (grown when a launch needs more; the kernels leave them zero)."""
        cp = cupy_module()
        key = (cp.cuda.runtime.getDevice(), cp.cuda.get_current_stream().ptr)
        buf = self.counts.get(key)
        if buf is None or buf.size < size:
            buf = self.counts[key] = cp.zeros(max(size, 1024), np.uint32)
        return buf

    def reduce(self, m, n, s, w, sw, c, oc, ldc, z, nb1, sc0, sc1) -> None:
        """The split-K reduction (``reduce.cl``) of workspace ``w`` into ``c``."""
        dt = str(w.dtype)
        key = (dt, self.device_id())
        fn = self.reducers.get(key)
        if fn is None:
            fn = self.reducers[key] = compile_kernel(K.reduce_source(dt), "splitk_reduce")
        t = K.REDUCE_THREADS
        i32 = np.int32
        fn((-(-m * n // t), 1, z), (t, 1, 1),
           (i32(m), i32(n), i32(s), w, i32(sw), c, i32(oc), i32(ldc), i32(nb1), i32(sc0),
            i32(sc1)))  # fmt: skip


ARRAYS = CupyArrays()
_ZERO = np.int32(0)
_NOBATCH = tuple(np.int32(v) for v in launch.NOBATCH[1:])
