"""PyOpenCL backend: the shared GEMM kernel sources compiled as OpenCL C.

Runs on any OpenCL device: GPUs, and CPUs through PoCL (which is how CI exercises the kernels
that the CuPy backend runs as CUDA). ``TILEDMM_OPENCL_DEVICE`` picks the device by index into
``devices()`` or by a case-insensitive piece of its name (default: the first GPU, else the
first device). Native arrays are ``pyopencl.array.Array`` on this backend's queue.

The register family's geometry comes from ``geometry.json`` by device name, else by kind: on
GPUs it stages tiles in local memory; on CPUs it is a local-memory-free vector micro-kernel.
``vendor_matmul`` is ``numpy.matmul`` through the host (OpenCL has no vendor BLAS here), which
is the honest yardstick on CPU devices. ``timings`` reads OpenCL profiling events: from the
start of the first command a call enqueues to the end of its last (launch overhead excluded,
as CUDA events exclude it); calls that enqueue no tiledmm command fall back to wall time.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from tiledmm import Backend, DeviceSpec, Geometry, get_backend, hookimpl, host_cpu

from .. import kernels as K

__all__ = ["OpenCLBackend", "register_backends"]

GEOMETRY = Path(__file__).with_name("geometry.json")
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


class _State:
    """Context, queue and compiled programs for one device."""

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
        self.kernels: dict[Any, Any] = {}
        self.calls: dict[Any, Any] = {}

    def enqueue(self, kern, *args) -> None:
        """Launch ``kern`` on the queue, keeping its event while ``timings`` records."""
        event = kern(self.queue, *args)
        if self.events is not None:
            self.events.append(event)

    def kernel(self, name: str, src: str):
        """Build ``src`` once (pyopencl also caches the binary on disk) and keep the kernel."""
        key = (name, src)
        k = self.kernels.get(key)
        if k is None:
            cl, _ = _cl()
            k = getattr(cl.Program(self.ctx, src).build(options=["-cl-mad-enable"]), name)
            self.kernels[key] = k
        return k


def _spec(dev) -> DeviceSpec:
    cl, _ = _cl()
    name = dev.name.strip()
    cu, wg, lmem = dev.max_compute_units, dev.max_work_group_size, dev.local_mem_size
    if not dev.type & cl.device_type.GPU:
        h = host_cpu()  # PoCL's CPU device is this host: reuse its caches and ceilings
        return replace(
            h,
            name=name,
            compute_units=cu,
            max_threads_per_block=wg,
            max_threads_per_unit=wg,
            simd_bytes=4 * max(1, dev.native_vector_width_float),
            extra=h.extra + (("opencl", f"{dev.platform.name} / {dev.version}"),),
        )
    nv = "NVIDIA" in dev.vendor.upper()
    lanes = 128 if nv else 64  # FP32 lanes per compute unit (Hopper/Ampere+ SM; a guess else)
    clock = dev.max_clock_frequency * 1e6
    peak32 = cu * lanes * 2 * clock
    return DeviceSpec(
        name=name,
        kind="gpu",
        vendor=dev.vendor,
        compute_units=cu,
        warp_size=32 if nv else 64,
        max_threads_per_block=wg,
        max_threads_per_unit=2048,
        max_shared_per_block=lmem,
        shared_per_unit=max(lmem, 228 * 1024 if nv else lmem),
        caches=(("L2", dev.global_mem_cache_size),),
        peak_flops=(("float32", peak32), ("float64", peak32 / 2 if nv else peak32 / 16)),
        bandwidth=3e12 if nv else 5e11,
        launch_overhead=8e-6,
        ceilings_source=(
            f"estimate from {cu} units x {lanes} lanes x {clock / 1e9:.2f} GHz; bandwidth a "
            "guess (OpenCL does not report it); run `tiledmm calibrate` to measure"
        ),
        extra=(("opencl", f"{dev.platform.name} / {dev.version}"),),
    ).with_calibration()


def _strided(x) -> tuple[int, int, int]:
    """(offset, row stride, column stride) of a 2-D pyopencl array, in elements."""
    s = x.dtype.itemsize
    return x.offset // s, x.strides[0] // s, x.strides[1] // s


class OpenCLBackend(Backend):
    name = "opencl"
    aliases = ("cl",)
    kernels = K.FAMILIES
    priority = 5

    def __init__(self) -> None:
        self._states: dict[str, _State] = {}

    # ------------------------------------------------------------------ device

    def _state(self) -> _State:
        choice = os.environ.get(ENV, "")
        st = self._states.get(choice)
        if st is None:
            st = self._states[choice] = _State(_pick(choice))
        return st

    def unavailable_reason(self) -> str | None:
        try:
            import pyopencl  # noqa: F401
        except ImportError:
            return "pyopencl is not installed (pip install 'tiledmm[opencl]')"
        try:
            self._state()
        except Exception as exc:  # noqa: BLE001 - no platform, bad selection, ICD trouble
            return (
                f"no usable OpenCL device: {exc} (install a driver or PoCL: "
                "pip install pocl-binary-distribution)"
            )
        return None

    @property
    def dtypes(self) -> tuple[str, ...]:  # float64 only where the device has cl_khr_fp64
        try:
            return ("float32", "float64") if self._state().fp64 else ("float32",)
        except Exception:  # noqa: BLE001
            return ("float32",)

    def device(self) -> DeviceSpec:
        return _spec_cached(self._state().dev)

    def devices(self) -> list[DeviceSpec]:
        return [_spec_cached(d) for d in _all_devices()]

    def geometry(self, kernel: str, dtype: str, device: DeviceSpec) -> Geometry | None:
        return K.load_geometry(GEOMETRY, kernel, dtype, device)

    # ------------------------------------------------------------------ arrays

    def accepts(self, x: Any) -> bool:
        try:
            import pyopencl.array as cla
        except ImportError:
            return False
        return isinstance(x, cla.Array)

    def asarray(self, x: Any, dtype: np.dtype) -> Any:
        _, cla = _cl()
        q = self._state().queue
        if isinstance(x, cla.Array):
            if x.dtype != dtype:
                x = self._contiguous(x).astype(dtype)
            return x
        return cla.to_device(q, np.ascontiguousarray(x, dtype=dtype))

    def empty(self, shape: tuple[int, ...], dtype: np.dtype) -> Any:
        _, cla = _cl()
        return cla.empty(self._state().queue, shape, dtype)

    def to_numpy(self, x: Any) -> np.ndarray:
        return self._contiguous(x).get() if hasattr(x, "get") else np.asarray(x)

    def vendor_matmul(self, a: Any, b: Any) -> Any:
        """numpy.matmul through the host: OpenCL ships no BLAS; on CPU devices this is the
        OpenBLAS yardstick the kernels are compared against."""
        _, cla = _cl()
        return cla.to_device(self._state().queue, np.matmul(self.to_numpy(a), self.to_numpy(b)))

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
        self._state().queue.finish()

    def timings(self, fn, *, repeat: int = 10, warmup: int = 2) -> list[float]:
        """Seconds per call from profiling events (first command's start to last one's end)."""
        st = self._state()
        for _ in range(warmup):
            fn()
        st.queue.finish()
        times = []
        for _ in range(repeat):
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

    # ------------------------------------------------------------------ strided copies

    def _copy(self, src, dst) -> None:
        st = self._state()
        rows, cols = src.shape
        if not rows or not cols:
            return
        dt = src.dtype
        k = st.kernel("copy2d", f"#define REAL_BYTES {dt.itemsize}\n" + _COPY2D)
        so, s0, s1 = _strided(src)
        do, d0, d1 = _strided(dst)
        i32, i64 = np.int32, np.int64
        st.enqueue(k, ((cols + 15) // 16 * 16, (rows + 15) // 16 * 16), (16, 16),
          i32(rows), i32(cols), src.base_data, i64(so), i64(s0), i64(s1),
          dst.base_data, i64(do), i64(d0), i64(d1))  # fmt: skip

    def _aligned_copy(self, x, vw: int, role: str) -> tuple[Any, int, int]:
        """``x`` copied into rows of ``aligned_ld`` elements (a scratch buffer per ``role``,
        kept for the next call of the same shape): (array, offset 0, ld)."""
        _, cla = _cl()
        st = self._state()
        rows, cols = x.shape
        ld = K.aligned_ld(cols, vw)
        y = st.scratch.get(role)  # the queue is in order: the last kernel is done reading it
        if y is None or y.shape != (rows, ld) or y.dtype != x.dtype:
            y = st.scratch[role] = cla.empty(st.queue, (rows, ld), x.dtype)
        self._copy(x, y[:, :cols])
        return y, 0, ld

    def _contiguous(self, x):
        if x.flags.c_contiguous or x.ndim != 2:
            return x
        _, cla = _cl()
        y = cla.empty(self._state().queue, x.shape, x.dtype)
        self._copy(x, y)
        return y

    def _rowmajor(self, x) -> tuple[Any, int, int]:
        """(array, offset, leading dimension) with unit column stride, copying if needed."""
        off, s0, s1 = _strided(x)
        rows, cols = x.shape
        if (s1 == 1 or cols <= 1) and s0 >= cols and off >= 0:
            return x, off, max(s0, 1)
        y = self._contiguous(x) if not x.flags.c_contiguous else x
        return y, y.offset // y.dtype.itemsize, max(cols, 1)

    # ------------------------------------------------------------------ the kernel

    def run(self, plan, a, b, out) -> None:
        st = self._state()
        m, kk = a.shape
        n = b.shape[1]
        K.check_int32(a.size, b.size, out.size)
        a, oa, lda = self._rowmajor(a)
        b, ob, ldb = self._rowmajor(b)
        direct = out.strides[1] == out.dtype.itemsize or n == 1
        c = out if direct and out.strides[0] >= 0 else self.empty((m, n), out.dtype)
        oc, ldc = c.offset // c.dtype.itemsize, max(c.strides[0] // c.dtype.itemsize, 1)
        vw = K.vector_width(c.dtype.itemsize)
        aligned = not (lda % vw or ldb % vw or oa % vw or ob % vw)
        if not aligned and K.pad_pays(plan):  # odd leading dimensions: copy to aligned rows
            if lda % vw or oa % vw:
                a, oa, lda = self._aligned_copy(a, vw, "a")
            if ldb % vw or ob % vw:
                b, ob, ldb = self._aligned_copy(b, vw, "b")
            aligned = True
        key = (id(plan), aligned)
        call = st.calls.get(key)
        if call is None:
            defs = K.defines(plan, aligned)
            if st.pocl and defs.get("STAGES", 1) > 1:  # see docs/kernels.md, "not reached"
                raise ValueError(
                    "stages=2 (double-buffered register tiles) is miscompiled by PoCL: wrong "
                    "results for some tiles, exact without optimization; use stages=1 on PoCL"
                )
            src = K.source(plan.kernel, defs)
            kern = st.kernel("gemm", src)
            (gx, gy), (lx, ly) = K.launch_shape(plan)
            call = st.calls[key] = (plan, kern, (gx * lx, gy * ly), (lx, ly))
        _, kern, gsize, lsize = call
        i32 = np.int32
        st.enqueue(kern, gsize, lsize, i32(m), i32(n), i32(kk),
             a.base_data, i32(oa), i32(lda), b.base_data, i32(ob), i32(ldb),
             c.base_data, i32(oc), i32(ldc))  # fmt: skip
        if c is not out:
            self._copy(c, out)


@cache
def _spec_cached(dev) -> DeviceSpec:
    return _spec(dev)


@hookimpl
def register_backends(register):
    register(OpenCLBackend())
