"""PyOpenCL backend: the shared GEMM kernel sources compiled as OpenCL C.

Runs on any OpenCL device: GPUs, and CPUs through PoCL (which is how CI exercises the kernels
that the CuPy backend runs as CUDA). ``TILEDMM_OPENCL_DEVICE`` picks the device by index into
``devices()`` or by a case-insensitive piece of its name (default: the first GPU, else the
first device). Native arrays are ``pyopencl.array.Array`` on this backend's queue.

Tiles come from the geometry database (``kernels/geometry.json``) by device name, else by kind:
on GPUs the register family stages tiles in local memory; on CPUs it is a local-memory-free
vector micro-kernel. ``run`` is the shared launch path (``kernels.launch``) with this backend's
array model (a buffer, an element offset and a leading dimension per operand) as the adapter.
``vendor_matmul`` is ``numpy.matmul`` through the host (OpenCL has no vendor BLAS here), which
is the honest yardstick on CPU devices. ``timings`` reads OpenCL profiling events: from the
start of the first command a call enqueues to the end of its last, queued behind a spin kernel
on NVIDIA GPUs (device time, as the CUDA backends measure it); calls that enqueue no tiledmm
command fall back to wall time.
"""

from __future__ import annotations

import math
import os
import time
from functools import cache
from typing import Any

import numpy as np

from tiledmm import Backend, DeviceSpec, Geometry, get_backend, hookimpl
from tiledmm.cache import LRUCache

from .. import kernels as K
from ..kernels import launch
from ..kernels.probe import probe_source
from .device import device_spec

__all__ = ["OpenCLBackend", "OpenCLState", "register_backends"]

ENV = "TILEDMM_OPENCL_DEVICE"

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


def _cl():
    import pyopencl as cl
    import pyopencl.array as cla

    return cl, cla


@cache
def _all_devices() -> tuple:
    cl, _ = _cl()
    return tuple(d for p in cl.get_platforms() for d in p.get_devices())


def _pick(choice: str):
    devs = _all_devices()
    if not devs:
        raise RuntimeError("no OpenCL device found")
    if choice:
        if choice.isdigit():
            if int(choice) >= len(devs):
                raise RuntimeError(f"{ENV}={choice}: only {len(devs)} OpenCL device(s) found")
            return devs[int(choice)]
        for d in devs:
            if choice.lower() in f"{d.platform.name} {d.name}".lower():
                return d
        names = ", ".join(d.name.strip() for d in devs)
        raise RuntimeError(f"{ENV}={choice!r} matches no OpenCL device (found: {names})")
    cl, _ = _cl()
    gpus = [d for d in devs if d.type & cl.device_type.GPU]
    return (gpus or list(devs))[0]


#: how long the spin kernel ahead of each timed call keeps an NVIDIA GPU busy (ns): longer than
#: the host side of any call timed here (pyopencl's: 160 us for one GEMM, 300-450 us with a
#: split-K reduction or aligned copies on the H200, benches/results/logs/h200-opencl-gaps.txt;
#: behind a 200 us spin those calls still showed the host's gaps)
SPIN_NS = 1_000_000


class OpenCLState:
    """Context, queue and compiled programs for one device; also the array model that the
    shared launch path (``kernels.launch.Adapter``) runs with on this device."""

    def __init__(self, dev) -> None:
        cl, _ = _cl()
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
        if not (self.dev.type & _cl()[0].device_type.GPU) or "NVIDIA" not in self.dev.vendor:
            return None
        try:
            return self.kernel("spin", K.spin_source())
        except Exception:  # noqa: BLE001 - a driver without inline PTX: time without it
            return None

    def kernel(self, name: str, src: str):
        """Build ``src`` once (pyopencl also caches the binary on disk) and keep the kernel."""
        return self.kernels.get_or_make((name, src), lambda: self._program(name, src))

    def _program(self, name: str, src: str):
        cl, _ = _cl()
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
        _, cla = _cl()
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

    def enqueue(self, call, m, n, k, a, oa, lda, b, ob, ldb, c, oc, ldc, bt=launch.NOBATCH):
        kern, gsize, lsize, g3, l3 = call
        i32 = np.int32
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


class OpenCLBackend(K.SharedSourceTables, Backend):
    name = "opencl"
    aliases = ("cl",)
    kernels = K.FAMILIES
    priority = 5

    def __init__(self) -> None:
        self._states: dict[str, OpenCLState] = {}

    # ------------------------------------------------------------------ device

    def state(self) -> OpenCLState:
        """The device chosen by ``TILEDMM_OPENCL_DEVICE`` now: context, queue, programs."""
        choice = os.environ.get(ENV, "")
        st = self._states.get(choice)
        if st is None:
            st = self._states[choice] = OpenCLState(_pick(choice))
        return st

    def unavailable_reason(self) -> str | None:
        try:
            import pyopencl  # noqa: F401
        except ImportError:
            return "pyopencl is not installed (pip install 'tiledmm[opencl]')"
        try:
            self.state()
        except Exception as exc:  # noqa: BLE001 - no platform, bad selection, ICD trouble
            return (
                f"no usable OpenCL device: {exc} (install a driver or PoCL: "
                "pip install pocl-binary-distribution)"
            )
        return None

    @property
    def dtypes(self) -> tuple[str, ...]:  # float64 only where the device has cl_khr_fp64
        try:
            return ("float32", "float64") if self.state().fp64 else ("float32",)
        except Exception:  # noqa: BLE001
            return ("float32",)

    def device(self) -> DeviceSpec:
        return _spec_cached(self.state().dev)

    def device_key(self) -> str:
        """The device choice (``TILEDMM_OPENCL_DEVICE``) the next call runs on."""
        return os.environ.get(ENV, "")

    def devices(self) -> list[DeviceSpec]:
        return [_spec_cached(d) for d in _all_devices()]

    def search_space(self, kernel: str, dtype: str, device: DeviceSpec) -> list[Geometry]:
        """The geometries ``tiledmm tune`` tries (backends/kernels/space.py)."""
        from ..kernels.space import space

        return space(kernel, dtype, device, stages=not self.state().pocl)

    def compile_probe(self, source: str, kernel: str, defines: dict[str, int]):
        """A calibration probe (``kernels/probes.cl``) built once for this device; its
        ``launch(groups, args)`` enqueues ``groups`` groups of ``THREADS`` work-items on the
        queue (so ``timings`` sees its event), arrays passed as their buffers."""
        st = self.state()
        kern = st.kernel(kernel, probe_source(source, defines))
        threads = int(defines["THREADS"])

        def launch(groups: int, args: tuple) -> None:
            bufs = tuple(a.data if hasattr(a, "base_data") else a for a in args)
            st.enqueue_kernel(kern, (groups * threads,), (threads,), *bufs)

        return launch

    # ------------------------------------------------------------------ arrays

    def accepts(self, x: Any) -> bool:
        try:
            import pyopencl.array as cla
        except ImportError:
            return False
        return isinstance(x, cla.Array)

    def asarray(self, x: Any, dtype: np.dtype) -> Any:
        _, cla = _cl()
        q = self.state().queue
        _check_size(np.shape(x))  # before the host copy and the buffer
        if isinstance(x, cla.Array):
            if x.dtype != dtype:
                x = self.state().contiguous(x).astype(dtype)
            return x
        return cla.to_device(q, np.ascontiguousarray(x, dtype=dtype), allocator=self.state().pool)

    def empty(self, shape: tuple[int, ...], dtype: np.dtype, like: Any = None) -> Any:
        _check_size(tuple(shape))
        return self.state().empty(shape, dtype)

    def to_numpy(self, x: Any) -> np.ndarray:
        return self.state().contiguous(x).get() if hasattr(x, "get") else np.asarray(x)

    def vendor_matmul(self, a: Any, b: Any) -> Any:
        """numpy.matmul through the host: OpenCL ships no BLAS; on CPU devices this is the
        OpenBLAS yardstick the kernels are compared against."""
        _, cla = _cl()
        return cla.to_device(self.state().queue, np.matmul(self.to_numpy(a), self.to_numpy(b)))

    def vendor_backend(self) -> Backend:
        """The yardstick's backend: cuBLAS through CuPy on an NVIDIA GPU (when available);
        numpy.matmul on host arrays on a CPU device, so the BLAS is timed without the
        OpenCL buffer copies that ``vendor_matmul`` pays; else this backend."""
        dev = self.device()
        name = "numpy" if not dev.is_gpu else "cupy" if "NVIDIA" in dev.vendor.upper() else ""
        if name:
            try:
                return get_backend(name)
            except (RuntimeError, ValueError):
                pass
        return self

    def synchronize(self) -> None:
        self.state().queue.finish()

    def timings(self, fn, *, repeat: int = 10, warmup: int = 2) -> list[float]:
        """Seconds per call from profiling events (first command's start to last one's end).
        On NVIDIA GPUs each timed call is queued behind a 1 ms spin kernel (as on CUDA), so a
        call of several commands (split-K's GEMM and reduction) is timed without the host's
        enqueue gaps between them: device time, as the CUDA backends measure it."""
        st = self.state()
        for _ in range(warmup):
            fn()
        st.queue.finish()
        spin = st.spin()
        times = []
        for _ in range(repeat):
            if spin is not None:
                spin(st.queue, (1,), (1,), np.uint64(SPIN_NS))
            st.events = []
            t0 = time.perf_counter()
            try:
                fn()
                st.queue.finish()
            finally:
                events, st.events = st.events, None
            wall = time.perf_counter() - t0
            span = events[-1].profile.end - events[0].profile.start if events else None
            times.append(span * 1e-9 if span is not None else wall)
        return times

    # ------------------------------------------------------------------ the kernel

    def run(self, plan, a, b, out) -> None:
        st = self.state()
        launch.run(st, st.launches, plan, a, b, out)

    def run_batched(self, plan, a, b, out) -> bool:
        """The whole broadcast batch in one launch (see ``kernels.launch.run_batched``)."""
        st = self.state()
        return launch.run_batched(st, st.launches, plan, a, b, out)


def _check_size(shape: tuple[int, ...]) -> None:
    """Buffers are indexed with 32-bit element offsets: refuse a larger operand up front."""
    if math.prod(shape) > K.INT_MAX:
        shape = "x".join(map(str, shape))
        raise ValueError(
            f"an operand of {shape} elements is too large for the OpenCL backend's 32-bit "
            "indexing (more than 2**31-1 elements): use backend='numpy', or split the product "
            "into blocks"
        )


@cache
def _spec_cached(dev) -> DeviceSpec:
    return device_spec(dev)


from .mma import install as _install_mma  # noqa: E402 - the class must exist first

_install_mma(OpenCLBackend, OpenCLState, ENV, _pick)  # mma on NVIDIA cc 8.0+ (see mma.py)


@hookimpl
def register_backends(register):
    register(OpenCLBackend())
