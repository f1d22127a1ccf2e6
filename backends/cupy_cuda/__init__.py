"""CuPy backend: the shared GEMM kernel sources compiled as CUDA C (NVRTC via ``RawModule``).

Each (family, tiles, knobs, dtype, device) is compiled once; CuPy also caches the binary on
disk across processes. ``run`` looks the launch up by plan identity and launches it, so the
per-call path is a dict lookup, a stride check and one ``RawKernel`` call. Tuned tiles live in
``geometry.json`` keyed by device name (written by ``benches/tune_cuda.py``).

Shared memory: the kernels use static ``__shared__`` tiles, so the usable limit per block is
the 48 KiB static limit; the opt-in maximum is reported in ``DeviceSpec.extra``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from tiledmm import Backend, DeviceSpec, Geometry, hookimpl

from .. import kernels as K

__all__ = ["CupyBackend", "register_backends"]

GEOMETRY = Path(__file__).with_name("geometry.json")
STATIC_SHARED = 48 * 1024

# cudaDeviceAttr values (driver_types.h); CUDA 13 dropped clock fields from cudaDeviceProp.
_ATTR = dict(
    threads_per_block=1, warp=10, clock_khz=13, sms=16, mem_clock_khz=36, bus_bits=37,
    l2=38, threads_per_sm=39, cc_major=75, cc_minor=76, shared_per_sm=81, regs_per_sm=82,
    shared_optin=97, blocks_per_sm=106,
)  # fmt: skip
# FP32 and FP64 lanes per SM by compute capability (datacenter parts have full-rate FP64).
_LANES = {(7, 0): (64, 32), (8, 0): (64, 32), (9, 0): (128, 64), (10, 0): (128, 64)}


_CP: Any = None


def _cupy():
    """The cupy module, imported on first use (never at tiledmm import time)."""
    global _CP
    if _CP is None:
        import cupy

        _CP = cupy
    return _CP


def _spec(dev_id: int) -> DeviceSpec:
    cp = _cupy()
    rt = cp.cuda.runtime
    a = {k: rt.deviceGetAttribute(v, dev_id) for k, v in _ATTR.items()}
    name = rt.getDeviceProperties(dev_id)["name"]
    name = name.decode() if isinstance(name, bytes) else str(name)
    cc = (a["cc_major"], a["cc_minor"])
    l32, l64 = _LANES.get(cc, (128, 2))
    clock = a["clock_khz"] * 1e3
    peak32 = a["sms"] * l32 * 2 * clock
    bw = 2 * a["mem_clock_khz"] * 1e3 * a["bus_bits"] / 8
    return DeviceSpec(
        name=name,
        kind="gpu",
        vendor="NVIDIA",
        compute_units=a["sms"],
        warp_size=a["warp"],
        max_threads_per_block=a["threads_per_block"],
        max_threads_per_unit=a["threads_per_sm"],
        max_blocks_per_unit=a["blocks_per_sm"],
        max_shared_per_block=min(STATIC_SHARED, a["shared_optin"]),
        shared_per_unit=a["shared_per_sm"],
        registers_per_unit=a["regs_per_sm"],
        caches=(("L2", a["l2"]),),
        peak_flops=(("float32", peak32), ("float64", a["sms"] * l64 * 2 * clock)),
        bandwidth=bw,
        launch_overhead=5e-6,
        ceilings_source=(
            f"estimate from {a['sms']} SMs x {l32} FP32 lanes x {clock / 1e9:.2f} GHz and "
            f"{a['bus_bits']}-bit memory at {a['mem_clock_khz'] / 1e6:.2f} GHz DDR; "
            "run `tiledmm calibrate` to measure"
        ),
        extra=(
            ("compute capability", f"{cc[0]}.{cc[1]}"),
            ("shared opt-in per block", f"{a['shared_optin'] // 1024} KiB (kernels use static)"),
        ),
    ).with_calibration()


def _layout(x, rows: int, cols: int, s: int) -> int | None:
    """Leading dimension (elements) if ``x`` is row-major with unit column stride, else None."""
    st0, st1 = x.strides
    if cols > 1 and st1 != s:
        return None
    if rows <= 1:
        return max(cols, 1)
    if st0 <= 0 or st0 % s or st0 // s < cols:
        return None
    return st0 // s


def _span(x) -> tuple[int, int]:
    p = x.data.ptr
    (r, c), (s0, s1) = x.shape, x.strides
    return p, p + (r - 1) * abs(s0) + (c - 1) * abs(s1) + x.itemsize


class CupyBackend(Backend):
    name = "cupy"
    aliases = ("cuda",)
    kernels = K.FAMILIES
    priority = 20

    def __init__(self) -> None:
        self._specs: dict[int, DeviceSpec] = {}
        self._modules: dict[Any, Any] = {}
        self._calls: dict[Any, Any] = {}

    def unavailable_reason(self) -> str | None:
        try:
            cp = _cupy()
        except ImportError:
            return "cupy is not installed (pip install 'tiledmm[cupy]')"
        except Exception as exc:  # noqa: BLE001 - a broken CUDA install raises all sorts
            return f"cupy failed to import: {exc} (check the CUDA driver and cupy-cuda13x)"
        try:
            if cp.cuda.runtime.getDeviceCount() < 1:
                return "no CUDA device: the driver reports none (run on a machine with a GPU)"
        except Exception as exc:  # noqa: BLE001
            return f"no CUDA device: {exc} (run on a machine with a GPU and its driver)"
        return None

    def device(self) -> DeviceSpec:
        dev = _cupy().cuda.runtime.getDevice()
        spec = self._specs.get(dev)
        if spec is None:
            spec = self._specs[dev] = _spec(dev)
        return spec

    def devices(self) -> list[DeviceSpec]:
        n = _cupy().cuda.runtime.getDeviceCount()
        return [self._specs.get(i) or self._specs.setdefault(i, _spec(i)) for i in range(n)]

    def geometry(self, kernel: str, dtype: str, device: DeviceSpec) -> Geometry | None:
        return K.load_geometry(GEOMETRY, kernel, dtype, device)

    # ------------------------------------------------------------------ arrays

    def accepts(self, x: Any) -> bool:
        return hasattr(x, "__cuda_array_interface__")

    def asarray(self, x: Any, dtype: np.dtype) -> Any:
        cp = _cupy()
        if type(x) is cp.ndarray and x.dtype == dtype:  # the hot path: already native
            return x
        return cp.asarray(x, dtype=dtype)

    def empty(self, shape: tuple[int, ...], dtype: np.dtype) -> Any:
        return _cupy().empty(shape, dtype=dtype)

    def to_numpy(self, x: Any) -> np.ndarray:
        return _cupy().asnumpy(x)

    def vendor_matmul(self, a: Any, b: Any) -> Any:
        return _cupy().matmul(a, b)  # cuBLAS; FP32 stays FP32 unless CUPY_TF32=1

    def synchronize(self) -> None:
        _cupy().cuda.get_current_stream().synchronize()

    def timings(self, fn, *, repeat: int = 10, warmup: int = 2) -> list[float]:
        """Seconds per call from CUDA events on the current stream (launch jitter excluded)."""
        cp = _cupy()
        for _ in range(warmup):
            fn()
        start, end = cp.cuda.Event(), cp.cuda.Event()
        out = []
        for _ in range(repeat):
            start.record()
            fn()
            end.record()
            end.synchronize()
            out.append(cp.cuda.get_elapsed_time(start, end) / 1e3)
        return out

    # ------------------------------------------------------------------ compile and launch

    def function(self, plan, aligned: bool = True):
        """The compiled ``gemm`` for ``plan`` (cached per source and device)."""
        cp = _cupy()
        src = K.source(plan.kernel, K.defines(plan, aligned))
        key = (src, cp.cuda.runtime.getDevice())
        fn = self._modules.get(key)
        if fn is None:
            mod = cp.RawModule(code=src)
            fn = self._modules[key] = mod.get_function("gemm")
        return fn

    def run(self, plan, a, b, out) -> None:
        cp = _cupy()
        m, k = a.shape
        n = b.shape[1]
        s = out.itemsize
        lda = _layout(a, m, k, s)
        if lda is None:
            a, lda = cp.ascontiguousarray(a), max(k, 1)
        ldb = _layout(b, k, n, s)
        if ldb is None:
            b, ldb = cp.ascontiguousarray(b), max(n, 1)
        ldc = _layout(out, m, n, s)
        c = out
        if ldc is None or _overlap(out, a) or _overlap(out, b):
            c, ldc = cp.empty((m, n), out.dtype), max(n, 1)
        vw = 16 // s
        aligned = not (lda % vw or ldb % vw or a.data.ptr % 16 or b.data.ptr % 16)
        if not aligned and K.pad_pays(plan):  # odd leading dimensions: copy to aligned rows
            if lda % vw or a.data.ptr % 16:
                a, lda = _aligned_copy(a, vw)
            if ldb % vw or b.data.ptr % 16:
                b, ldb = _aligned_copy(b, vw)
            aligned = True
        call = self._calls.get((id(plan), aligned))
        if call is None or call[4] != cp.cuda.runtime.getDevice():
            K.check_int32(m * max(lda, 1), k * max(ldb, 1), m * ldc)
            fn = self.function(plan, aligned)
            grid, block = K.launch_shape(plan)
            call = (plan, fn, grid, block, cp.cuda.runtime.getDevice())
            self._calls[(id(plan), aligned)] = call  # holds plan: its id stays unique
        i32 = np.int32
        z = _ZERO
        args = (i32(m), i32(n), i32(k), a, z, i32(lda), b, z, i32(ldb), c, z, i32(ldc))
        call[1](call[2], call[3], args)
        if c is not out:
            out[...] = c


_ZERO = np.int32(0)


def _aligned_copy(x, vw: int):
    """``x`` copied into fresh rows of ``aligned_ld`` elements: (view, leading dimension)."""
    rows, cols = x.shape
    ld = K.aligned_ld(cols, vw)
    y = _cupy().empty((rows, ld), x.dtype)[:, :cols]
    y[...] = x
    return y, ld


def _overlap(x, y) -> bool:
    if not x.size or not y.size:
        return False
    x0, x1 = _span(x)
    y0, y1 = _span(y)
    return x0 < y1 and y0 < x1


@hookimpl
def register_backends(register):
    register(CupyBackend())
