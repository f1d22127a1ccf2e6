"""One OpenCL device's state for the OpenCL backend: context, profiling queue, compiled programs
(built once per source), pooled buffers, and the array model (a buffer, an element offset and a
leading dimension per operand) that the shared launch path (``kernels.launch.Adapter``) runs
with: layouts, strided copies, aligned scratch copies, GEMM and split-K reduction enqueues.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tiledmm.util.lru import LRUCache

from .. import kernels as K
from ..kernels import launch
from .mma import MmaState

__all__ = ["OpenCLState", "SharedSourceState", "cl_modules"]

_COPY2D = """
#if REAL_BYTES == 8
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
typedef double real;
#else
typedef float real;
#endif
__kernel void copy2d(const int rows, const int cols,
                     __global const real *src, const long soff, const long s0, const long s1,
                     __global real *dst, const long doff, const long d0, const long d1)
{
  const int j = get_global_id(0), i = get_global_id(1);
  if (i < rows && j < cols)
    dst[doff + i * d0 + j * d1] = src[soff + i * s0 + j * s1];
}
"""


def cl_modules():
    """``pyopencl`` and ``pyopencl.array``, imported on first use (never at import time)."""
    import pyopencl as cl
    import pyopencl.array as cla

    return cl, cla


class SharedSourceState:
    """Context, queue and compiled programs for one device; also the array model that the
    shared launch path (``kernels.launch.Adapter``) runs with on this device (the shared-source
    families; :class:`OpenCLState` adds mma)."""

    def __init__(self, dev) -> None:
        cl, _ = cl_modules()
        self.dev = dev
        self.ctx = cl.Context([dev])
        profiling = cl.command_queue_properties.PROFILING_ENABLE
        self.queue = cl.CommandQueue(self.ctx, properties=profiling)
        self.events: list[Any] | None = None  # commands enqueued while timings() records
        self.scratch: dict[str, Any] = {}  # aligned copies of A and B, reused across calls
        self.fp64 = "cl_khr_fp64" in dev.extensions
        self.pocl = "portable computing language" in dev.platform.name.lower()
        self.kernels: LRUCache[Any] = LRUCache(256)
        self.launches = launch.Launches(self._build)
        # results and temporaries come from a pool: NVIDIA's OpenCL pays ~0.3 ms on the first
        # write of every fresh 64 MB buffer (GPU.md), a pooled one is reused
        from pyopencl.tools import ImmediateAllocator, MemoryPool

        self.pool = MemoryPool(ImmediateAllocator(self.queue))

    def spin(self):
        """The spin kernel ahead of timed calls (NVIDIA GPUs: it reads the global timer
        through inline PTX, which NVIDIA's OpenCL compiler accepts); None elsewhere."""
        if not (self.dev.type & cl_modules()[0].device_type.GPU) or "NVIDIA" not in self.dev.vendor:
            return None
        try:
            return self.kernel("spin", K.spin_source())
        except Exception:  # noqa: BLE001 - a driver without inline PTX: time without it
            return None

    def kernel(self, name: str, src: str):
        """Build ``src`` once (pyopencl also caches the binary on disk) and keep the kernel."""
        return self.kernels.get_or_make((name, src), lambda: self._program(name, src))

    def _program(self, name: str, src: str):
        cl, _ = cl_modules()
        return getattr(cl.Program(self.ctx, src).build(options=["-cl-mad-enable"]), name)

    def _build(self, plan, aligned: bool, single: bool = False):
        defs = K.defines(plan, aligned, single)
        if self.pocl and defs.get("STAGES", 1) > 1:  # see docs/kernels.md, "not reached"
            raise ValueError(
                "stages=2 (double-buffered register tiles) is miscompiled by PoCL: wrong "
                "results for some tiles, exact without optimization; use stages=1 on PoCL"
            )
        (gx, gy), (lx, ly) = K.launch_shape(plan)
        kern = self.kernel("gemm", K.source(plan.kernel, defs))
        return kern, (gx * lx, gy * ly), (lx, ly), (gx * lx, gy * ly, 1), (lx, ly, 1)

    # ------------------------------------------------------------------ the adapter

    def layout(self, x) -> launch.Layout:
        s0, s1 = x.strides[-2:]  # an N-D array: its first matrix (launch.run_batched)
        base, off = x.base_data, x.offset
        return (base, id(base), off, s0, s1, off // x.dtype.itemsize)  # type: ignore[return-value]

    def empty(self, shape, dtype):
        _, cla = cl_modules()
        return cla.empty(self.queue, shape, dtype, allocator=self.pool)

    def contiguous(self, x):
        if x.flags.c_contiguous or x.ndim != 2:
            return x
        y = self.empty(x.shape, x.dtype)
        self.copy(x, y)
        return y

    def aligned_copy(self, x, ld: int, role: str):
        """``x`` copied into rows of ``ld`` elements of a scratch buffer per ``role`` (reused
        by the next call of the same shape: the queue is in order)."""
        rows, cols = x.shape
        y = self.scratch.get(role)
        if y is None or y.shape != (rows, ld) or y.dtype != x.dtype:
            y = self.scratch[role] = self.empty((rows, ld), x.dtype)
        self.copy(x, y[:, :cols])
        return y[:, :cols]

    def copy(self, src, dst) -> None:
        """``dst[...] = src`` for strided 2-D arrays of one dtype (one small kernel)."""
        rows, cols = src.shape
        if not rows or not cols:
            return
        dt = src.dtype
        k = self.kernel("copy2d", f"#define REAL_BYTES {dt.itemsize}\n" + _COPY2D)
        so, s0, s1 = _strided(src)
        do, d0, d1 = _strided(dst)
        i32, i64 = np.int32, np.int64
        self.enqueue_kernel(k, ((cols + 15) // 16 * 16, (rows + 15) // 16 * 16), (16, 16),
          i32(rows), i32(cols), src.base_data, i64(so), i64(s0), i64(s1),
          dst.base_data, i64(do), i64(d0), i64(d1))  # fmt: skip

    def device_id(self) -> int:
        return id(self)

    def enqueue(self, call, m, n, k, a, oa, lda, b, ob, ldb, c, oc, ldc, bt=launch.NOBATCH,
                tail=()):  # fmt: skip
        kern, gsize, lsize, g3, l3 = call
        i32 = np.int32
        if tail:
            self.enqueue_kernel(kern, (g3[0], g3[1], bt[0]), l3, i32(m), i32(n), i32(k), a,
                                i32(oa), i32(lda), b, i32(ob), i32(ldb), c, i32(oc), i32(ldc),
                                *(i32(v) for v in bt[1:]),
                                *(i32(v) if isinstance(v, int) else v for v in tail))  # fmt: skip
            return
        if bt is launch.NOBATCH:
            self.enqueue_kernel(kern, gsize, lsize, i32(m), i32(n), i32(k), a, i32(oa),
                                i32(lda), b, i32(ob), i32(ldb), c, i32(oc), i32(ldc),
                                *_NOBATCH)  # fmt: skip
            return
        self.enqueue_kernel(kern, (g3[0], g3[1], bt[0]), l3, i32(m), i32(n), i32(k), a,
                            i32(oa), i32(lda), b, i32(ob), i32(ldb), c, i32(oc), i32(ldc),
                            *(i32(v) for v in bt[1:]))  # fmt: skip

    def reduce(self, m, n, s, w, sw, c, oc, ldc, z, nb1, sc0, sc1) -> None:
        """The split-K reduction (``reduce.cl``) of workspace ``w`` into ``c``."""
        kern = self.kernel("splitk_reduce", K.reduce_source(str(w.dtype)))
        t = K.REDUCE_THREADS
        i32 = np.int32
        self.enqueue_kernel(kern, (-(-m * n // t) * t, 1, z), (t, 1, 1), i32(m), i32(n),
                            i32(s), w.base_data, i32(sw), c, i32(oc), i32(ldc), i32(nb1),
                            i32(sc0), i32(sc1))  # fmt: skip

    def counters(self, size: int):
        """Zeroed uint32 counters for the one-pass gemv on this queue (grown when a launch
        needs more; the kernels leave them zero)."""
        buf = self.scratch.get("counters")
        if buf is None or buf.size < size:
            _, cla = cl_modules()
            buf = self.scratch["counters"] = cla.zeros(self.queue, max(size, 1024), np.uint32)
        return buf.data

    def enqueue_kernel(self, kern, *args) -> None:
        """Launch ``kern`` on the queue, keeping its event while ``timings`` records."""
        event = kern(self.queue, *args)
        if self.events is not None:
            self.events.append(event)


_NOBATCH = tuple(np.int32(v) for v in launch.NOBATCH[1:])


def _strided(x) -> tuple[int, int, int]:
    """(offset, row stride, column stride) of a 2-D pyopencl array, in elements."""
    s = x.dtype.itemsize
    return x.offset // s, x.strides[0] // s, x.strides[1] // s


class OpenCLState(MmaState, SharedSourceState):
    """One device's state: the shared-source families, and the mma family (:mod:`.mma`:
    NVIDIA cc 8.0+ through inline PTX)."""
