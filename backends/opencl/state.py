"""One OpenCL queue's state for the OpenCL backend: its context's compiled programs (built once
per source and context, shared by every queue of the context), pooled buffers, and the array
model (a buffer, an element offset and a leading dimension per operand) that the shared launch
path (``kernels.launch.Adapter``) runs with: layouts, strided copies, aligned scratch copies,
GEMM and split-K reduction enqueues.

Host cost per call (issue 37): kernels are :class:`Kernel` objects whose scalar argument types
are declared once, so pyopencl packs the scalars itself (its generic per-argument path took
15-20 us per NumPy scalar: 200-300 us for a GEMM's 20 arguments, on PoCL and NVIDIA's OpenCL
alike); results and temporaries come from this queue's buffer pool through pyopencl's light
array constructor (``cla.empty`` validates its arguments in Python: 20-25 us); a call waits for
its operands' pending events and leaves its last event on the result (:meth:`begin`,
:attr:`last`), all on the device: nothing here waits on the host.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tiledmm.util.lru import LRUCache

from .. import kernels as K
from ..kernels import launch
from .mma import MmaState

__all__ = ["OpenCLState", "SharedSourceState", "Kernel", "Recorder", "cl_modules", "check_size"]

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
_COPY_SOURCES = {n: f"#define REAL_BYTES {n}\n" + _COPY2D for n in (4, 8)}


def cl_modules():
    """``pyopencl`` and ``pyopencl.array``, imported on first use (never at import time)."""
    import pyopencl as cl
    import pyopencl.array as cla

    return cl, cla


def check_size(shape: tuple[int, ...]) -> None:
    """Buffers are indexed with 32-bit element offsets: refuse a larger operand up front."""
    if math.prod(shape) > K.INT_MAX:
        shape = "x".join(map(str, shape))
        raise ValueError(
            f"an operand of {shape} elements is too large for the OpenCL backend's 32-bit "
            "indexing (more than 2**31-1 elements): use backend='numpy', or split the product "
            "into blocks"
        )


class Recorder:
    """The events ``timings`` collects (None: not recording), shared by a backend's states."""

    __slots__ = ("events",)

    def __init__(self) -> None:
        self.events: list[Any] | None = None


class Kernel:
    """A built kernel, launched as ``kernel(queue, global, local, *args, wait_for=None)``: on
    its first launch the NumPy scalars among ``args`` declare the scalar argument types
    (``set_scalar_arg_dtypes``), so every launch packs them in one call; a first launch with a
    plain Python number leaves pyopencl's generic (slow) path in place."""

    __slots__ = ("kern", "program", "typed")

    def __init__(self, kern, program) -> None:
        self.kern, self.program, self.typed = kern, program, False

    def __call__(self, queue, gsize, lsize, *args, wait_for=None):
        if not self.typed:
            if not any(isinstance(a, (int, float, complex)) for a in args):
                self.kern.set_scalar_arg_dtypes(
                    [a.dtype if isinstance(a, np.generic) else None for a in args]
                )
            self.typed = True
        return self.kern(queue, gsize, lsize, *args, wait_for=wait_for)

    def instance(self, args: tuple):
        """A kernel object of its own (the same program and function) with the int arguments
        of ``args`` set; None marks a buffer the caller sets per launch (``bound.py``)."""
        cl, _ = cl_modules()
        kern = cl.Kernel(self.program, self.kern.function_name)
        for i, v in enumerate(args):
            if v is not None:
                kern.set_arg(i, np.int32(v))
        return kern


class SharedSourceState:
    """Context, queue and compiled programs for one device; also the array model that the
    shared launch path (``kernels.launch.Adapter``) runs with on this device (the shared-source
    families; :class:`OpenCLState` adds mma)."""

    def __init__(self, dev, queue=None, peer: SharedSourceState | None = None,
                 recorder: Recorder | None = None) -> None:  # fmt: skip
        """The device's own context and profiling queue (``queue`` None), or a caller's
        ``queue``; ``peer``: a state of the same context, whose programs and launches are
        shared; ``recorder``: the backend's (``timings``)."""
        cl, _ = cl_modules()
        self.dev = dev
        if queue is None:
            self.ctx = cl.Context([dev])
            profiling = cl.command_queue_properties.PROFILING_ENABLE
            self.queue = cl.CommandQueue(self.ctx, properties=profiling)
        else:
            self.ctx, self.queue = queue.context, queue
        self.rec = recorder or Recorder()
        self.enqueue_nd = cl.enqueue_nd_range_kernel  # (bound.py's launches)
        self.Array = cl_modules()[1].Array
        self.shapes: dict[tuple, tuple] = {}  # (shape, dtype) -> what empty() passes
        self.scratch: dict[str, Any] = {}  # aligned copies of A and B, reused across calls
        self.wait: list | None = None  # events the next command waits for (``begin``)
        self.last: Any = None  # the event of the last command enqueued
        if peer is not None:
            self.fp64, self.pocl = peer.fp64, peer.pocl
            self.kernels, self.launches = peer.kernels, peer.launches
        else:
            self.fp64 = "cl_khr_fp64" in dev.extensions
            self.pocl = "portable computing language" in dev.platform.name.lower()
            self.kernels: LRUCache[Any] = LRUCache(256)
            self.launches = launch.Launches(self._build)
        # results and temporaries come from this queue's pool (a block freed here is reused
        # by a later command of this in-order queue only): NVIDIA's OpenCL pays ~0.3 ms on the
        # first write of every fresh 64 MB buffer (GPU.md), a pooled one is reused
        from pyopencl.tools import ImmediateAllocator, MemoryPool

        self.pool = MemoryPool(ImmediateAllocator(self.queue))

    @property
    def events(self) -> list[Any] | None:
        """The commands enqueued while ``timings`` records (the backend's recorder)."""
        return self.rec.events

    @events.setter
    def events(self, value: list[Any] | None) -> None:
        self.rec.events = value

    def begin(self, wait: list | None) -> None:
        """A call starts: its first command waits for ``wait`` (events, or None)."""
        self.wait, self.last = wait or None, None

    def spin(self):
        """The spin kernel ahead of timed calls (NVIDIA GPUs: it reads the global timer
        through inline PTX, which NVIDIA's OpenCL compiler accepts); None elsewhere."""
        if not (self.dev.type & cl_modules()[0].device_type.GPU) or "NVIDIA" not in self.dev.vendor:
            return None
        try:
            return self.kernel("spin", K.spin_source())
        except Exception:  # noqa: BLE001 - a driver without inline PTX: time without it
            return None

    def kernel(self, name: str, src: str) -> Kernel:
        """Build ``src`` once per context (pyopencl also caches the binary on disk) and keep
        the kernel."""
        return self.kernels.get_or_make((name, src), lambda: self._program(name, src))

    def _program(self, name: str, src: str) -> Kernel:
        cl, _ = cl_modules()
        prg = cl.Program(self.ctx, src).build(options=["-cl-mad-enable"])
        return Kernel(cl.Kernel(prg, name), prg)

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
        """A C-contiguous array on this queue from its pool, through pyopencl's light
        constructor where it has one (shape, strides and size cached per shape and dtype;
        ValueError past 32-bit indexing)."""
        try:
            shape, dtype, strides, size = self.shapes[(shape, dtype)]
        except (KeyError, TypeError):  # (a list is no key)
            shape, dtype, strides, size = self._shape(shape, dtype)
        try:
            return self.Array(None, shape, dtype, allocator=self.pool, strides=strides,
                              _fast=True, _size=size, _context=self.ctx, _queue=self.queue)
        except TypeError:  # a pyopencl without it
            return cl_modules()[1].empty(self.queue, shape, dtype, allocator=self.pool)

    def _shape(self, shape, dtype) -> tuple:
        key = (shape, dtype)
        dtype = np.dtype(dtype)
        shape = tuple(int(d) for d in shape)
        check_size(shape)
        strides, step = [], dtype.itemsize
        for d in reversed(shape):
            strides.append(step)
            step *= max(d, 1)
        meta = (shape, dtype, tuple(strides[::-1]), math.prod(shape))
        if len(self.shapes) >= 256:
            self.shapes.clear()
        try:
            self.shapes[key] = meta
        except TypeError:
            pass
        return meta

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
        k = self.kernel("copy2d", _COPY_SOURCES[dt.itemsize])
        so, s0, s1 = _strided(src)
        do, d0, d1 = _strided(dst)
        i32, i64 = np.int32, np.int64
        self.enqueue_kernel(k, ((cols + 15) // 16 * 16, (rows + 15) // 16 * 16), (16, 16),
          i32(rows), i32(cols), src.base_data, i64(so), i64(s0), i64(s1),
          dst.base_data, i64(do), i64(d0), i64(d1))  # fmt: skip

    def device_id(self) -> int:
        return id(self.kernels)  # the context's (launches are shared by its queues)

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
        """Launch ``kern`` on the queue (the first command of a call after the events
        ``begin`` named), keeping its event as :attr:`last` and while ``timings`` records."""
        wait = self.wait
        if wait is not None:
            self.wait = None
            event = kern(self.queue, *args, wait_for=wait)
        else:
            event = kern(self.queue, *args)
        self.last = event
        if self.rec.events is not None:
            self.rec.events.append(event)


_NOBATCH = tuple(np.int32(v) for v in launch.NOBATCH[1:])


def _strided(x) -> tuple[int, int, int]:
    """(offset, row stride, column stride) of a 2-D pyopencl array, in elements."""
    s = x.dtype.itemsize
    return x.offset // s, x.strides[0] // s, x.strides[1] // s


class OpenCLState(MmaState, SharedSourceState):
    """One device's state: the shared-source families, and the mma family (:mod:`.mma`:
    NVIDIA cc 8.0+ through inline PTX)."""
