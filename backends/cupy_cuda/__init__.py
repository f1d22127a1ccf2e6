"""CuPy backend: the shared GEMM kernel sources compiled as CUDA C (NVRTC via ``RawModule``).

Each (family, tiles, knobs, dtype, device) is compiled once; CuPy also caches the binary on
disk across processes. ``run`` is the shared launch path (``kernels.launch``) with CuPy's array
model as the adapter: a raw pointer per operand (the kernel offset is 0), 16-byte alignment
read from the pointer. Tiles come from the geometry database (``kernels/geometry.json``), the
device description from ``tiledmm.device.nvidia``.

Shared memory: the kernels use static ``__shared__`` tiles, so the usable limit per block is
the 48 KiB static limit; the opt-in maximum is reported in ``DeviceSpec.extra``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tiledmm import Backend, DeviceSpec, Geometry, hookimpl
from tiledmm.device import nvidia
from tiledmm.util.lru import LRUCache

from .. import kernels as K
from ..kernels import launch
from ..kernels.probe import has_probe, probe_source
from .arrays import ARRAYS, compile_kernel, cupy_module
from .mma import MmaFamily

__all__ = ["CupyBackend", "register_backends"]

# cudaDeviceAttr values (driver_types.h); CUDA 13 dropped clock fields from cudaDeviceProp.
_ATTR = dict(
    threads_per_block=1, warp=10, clock_khz=13, sms=16, mem_clock_khz=36, bus_bits=37,
    l2=38, threads_per_sm=39, cc_major=75, cc_minor=76, shared_per_sm=81, regs_per_sm=82,
    shared_optin=97, blocks_per_sm=106,
)  # fmt: skip

#: how long the spin kernel ahead of each timed call keeps the GPU busy (ns): longer than the
#: host side of any call timed here (the slowest, 1-D operands through cupy.matmul: ~45 us)
SPIN_NS = 200_000


def _spec(dev_id: int) -> DeviceSpec:
    rt = cupy_module().cuda.runtime
    a = {k: rt.deviceGetAttribute(v, dev_id) for k, v in _ATTR.items()}
    name = rt.getDeviceProperties(dev_id)["name"]
    name = name.decode() if isinstance(name, bytes) else str(name)
    cc = (a["cc_major"], a["cc_minor"])
    return nvidia.device_spec(name, cc, a, launch_overhead=5e-6)


class CupySharedSource(K.SharedSourceTables, Backend):
    """CuPy running the shared C-dialect families (naive, tiled, register); :class:`CupyBackend`
    adds the tensor-core family."""

    name = "cupy"
    aliases = ("cuda",)
    kernels = K.FAMILIES
    priority = 20
    launch_stream = "cupy"  # launches and temporaries: CuPy's current stream (torch fast path)

    def __init__(self) -> None:
        self._specs: dict[int, DeviceSpec] = {}
        self._modules: LRUCache[Any] = LRUCache(256)
        self.launches = launch.Launches(self._build)

    def unavailable_reason(self) -> str | None:
        try:
            cp = cupy_module()
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
        dev = cupy_module().cuda.runtime.getDevice()
        spec = self._specs.get(dev)
        if spec is None:
            spec = self._specs[dev] = _spec(dev)
        return spec.with_calibration()  # the cache as it is now (first use may just have run)

    def device_key(self) -> int:
        """CuPy's current device (plans and launches are per device)."""
        return cupy_module().cuda.runtime.getDevice()

    def devices(self) -> list[DeviceSpec]:
        n = cupy_module().cuda.runtime.getDeviceCount()
        return [(self._specs.get(i) or self._specs.setdefault(i, _spec(i))).with_calibration()
                for i in range(n)]  # fmt: skip

    def search_space(self, kernel: str, dtype: str, device: DeviceSpec) -> list[Geometry]:
        """The geometries ``tiledmm tune`` tries (backends/kernels/space.py)."""
        from ..kernels.space import space

        return space(kernel, dtype, device)

    def compile_probe(self, kernel: str, defines: dict[str, int], source: str | None = None):
        """A calibration probe (``kernels/probes.cl``) compiled as CUDA C, cached per source and
        device; its ``launch(groups, args)`` runs grid ``(groups,)``, block ``(THREADS,)`` on
        the current stream."""
        if not has_probe(kernel, source):
            return None
        src = probe_source(source, defines)
        key = (src, kernel, cupy_module().cuda.runtime.getDevice())
        fn = self._modules.get_or_make(key, lambda: compile_kernel(src, kernel))
        block = (int(defines["THREADS"]),)

        def launch(groups: int, args: tuple) -> None:
            fn((groups,), block, tuple(args))

        return launch

    # ------------------------------------------------------------------ arrays

    def accepts(self, x: Any) -> bool:
        return hasattr(x, "__cuda_array_interface__")

    def asarray(self, x: Any, dtype: np.dtype) -> Any:
        cp = cupy_module()
        if type(x) is cp.ndarray and x.dtype == dtype:  # the hot path: already native
            return x
        return cp.asarray(x, dtype=dtype)

    def empty(self, shape: tuple[int, ...], dtype: np.dtype, like: Any = None) -> Any:
        return cupy_module().empty(shape, dtype=dtype)

    def to_numpy(self, x: Any) -> np.ndarray:
        return cupy_module().asnumpy(x)

    def vendor_matmul(self, a: Any, b: Any) -> Any:
        return cupy_module().matmul(a, b)  # cuBLAS; FP32 stays FP32 unless CUPY_TF32=1

    def synchronize(self) -> None:
        cupy_module().cuda.get_current_stream().synchronize()

    def timings(self, fn, *, repeat: int = 10, warmup: int = 2) -> list[float]:
        """Device seconds per call from CUDA events on the current stream. Each timed call is
        queued behind a 200 us spin kernel, so the host has enqueued all of ``fn``'s work before
        the start event fires: the events time the device work, not Python's launch latency
        (as OpenCL's profiling events do; per-call host cost is
        benches/studies/interop_overhead.py's)."""
        cp = cupy_module()
        for _ in range(warmup):
            fn()
        start, end = cp.cuda.Event(), cp.cuda.Event()
        spin = self._spin()
        out = []
        for _ in range(repeat):
            spin((1,), (1,), (np.uint64(SPIN_NS),))
            start.record()
            fn()
            end.record()
            end.synchronize()
            out.append(cp.cuda.get_elapsed_time(start, end) / 1e3)
        return out

    def _spin(self):
        """A one-thread kernel that busy-waits ``ns`` nanoseconds of the GPU's global timer."""
        key = ("spin", cupy_module().cuda.runtime.getDevice())
        return self._modules.get_or_make(key, lambda: compile_kernel(K.spin_source(), "spin"))

    # ------------------------------------------------------------------ compile and launch

    def function(self, plan, aligned: bool = True, single: bool = False):
        """The compiled ``gemm`` for ``plan`` (cached per source and device)."""
        src = K.source(plan.kernel, K.defines(plan, aligned, single))
        key = (src, cupy_module().cuda.runtime.getDevice())
        return self._modules.get_or_make(key, lambda: compile_kernel(src))

    def _build(self, plan, aligned: bool, single: bool = False):
        grid, block = K.launch_shape(plan)
        return self.function(plan, aligned, single), grid, block

    def run(self, plan, a, b, out) -> None:
        launch.run(ARRAYS, self.launches, plan, a, b, out)

    def run_batched(self, plan, a, b, out) -> bool:
        """The whole broadcast batch in one launch (see ``kernels.launch.run_batched``)."""
        return launch.run_batched(ARRAYS, self.launches, plan, a, b, out)

    def bind(self, plan) -> Bound | None:
        """A pre-bound launch of ``plan`` on the current device for the hot paths (``api``'s
        and ``torchpath``'s), or None where only :meth:`run` applies (split-K, the mma family,
        an empty or 32-bit-overflowing product, odd leading dimensions the plan pads)."""
        m, n, k = plan.m, plan.n, plan.k
        if plan.kernel not in K.FAMILIES or K.split_k(plan) != 1 or not (m and n and k):
            return None
        if max(m * k, k * n, m * n) > K.INT_MAX:
            return None
        vw = 16 // K.itemsize(plan.dtype)
        ld_ok = not (k % vw or n % vw)
        if not ld_ok and K.pad_pays(plan, bool(k % vw), bool(n % vw)):
            return None
        # an operand at an odd address: run() copies it where that pays
        pads = K.pad_pays(plan, True, False) or K.pad_pays(plan, False, True)
        return Bound(self.launches, plan, ARRAYS.device_id(), ld_ok, pads)


class Bound:
    """One plan's launch for the plain case, built once: ``bound(a, b, c, pa, pb, stream)``
    runs ``c = a @ b`` for C-contiguous ``a`` (m x k), ``b`` (k x n) and a C-contiguous ``c``
    (m x n) that overlaps neither, on ``stream`` (an object with the raw handle as ``.ptr``;
    None: CuPy's current stream; nothing else is enqueued); ``a``, ``b``, ``c`` are what the
    kernel takes (CuPy arrays, or :attr:`pointer` objects over raw addresses), ``pa``, ``pb``
    the addresses of ``a`` and ``b`` (their alignment picks the compiled variant). Returns
    False, launching nothing, when the operands are not 16-byte aligned and the plan pads
    them (then :meth:`CupyBackend.run` does). The scalar arguments are CuPy's own kernel
    argument objects, made once (per call CuPy would convert 18 NumPy scalars)."""

    __slots__ = ("launches", "plan", "dev", "ld_ok", "pad", "args", "calls")

    #: A kernel argument over a raw device address (``cupy.cuda.function.CIntptr``).
    pointer: Any = None

    def __init__(self, launches, plan, dev, ld_ok: bool, pad: bool) -> None:
        self.launches, self.plan, self.dev, self.ld_ok, self.pad = launches, plan, dev, ld_ok, pad
        if Bound.pointer is None:
            Bound.pointer = _pointer_arg()
        m, n, k = plan.m, plan.n, plan.k
        self.args = tuple(_arg(v) for v in (m, n, k, 0, k, n, n) + launch.NOBATCH[1:])
        self.calls: list = [None, None]  # compiled launch: [unaligned, aligned]

    def __call__(self, a, b, c, pa: int, pb: int, stream: Any = None) -> bool:
        aligned = self.ld_ok and not (pa % 16 or pb % 16)
        if not aligned and self.pad:
            return False
        call = self.calls[aligned]
        if call is None:
            fn, grid, block = self.launches.get(self.plan, self.dev, aligned, True)
            # CuPy's Function behind the RawKernel, for this device (the kernel's own call takes
            # keywords only and looks the device's Function up on every launch)
            fn = getattr(fn, "kernel", fn)
            call = self.calls[aligned] = (fn, tuple(grid), tuple(block))
        fn, grid, block = call
        m, n, k, z, lda, ldb, ldc, b1, b2, b3, b4, b5, b6, b7, b8 = self.args
        fn(grid, block, (m, n, k, a, z, lda, b, z, ldb, c, z, ldc, b1, b2, b3, b4, b5, b6, b7,
                         b8), 0, stream)  # fmt: skip
        return True

    def arrays(self, a, b, c) -> bool:
        """``self(...)`` for CuPy arrays: False (nothing launched) unless ``a`` and ``b`` are
        C-contiguous (``c``, a fresh array, is)."""
        if not (a._c_contiguous and b._c_contiguous):
            return False
        return self(a, b, c, a.data.ptr, b.data.ptr)


def _arg(v: int) -> Any:
    """An int32 kernel argument, as the object CuPy's launch converts it to (CuPy 14's
    ``CScalar``; NumPy's int32, converted per launch, where CuPy has none or builds it
    otherwise, as CuPy 13 does)."""
    try:
        from cupy._core._scalar import CScalar

        arg = CScalar(np.int32(v))
        if arg.dtype == np.int32 and int(arg.value) == v:
            return arg
    except Exception:  # noqa: BLE001 - another CuPy: NumPy's scalar is always accepted
        pass
    return np.int32(v)


def _pointer_arg() -> Any:
    try:
        from cupy.cuda.function import CIntptr
    except ImportError:  # an older CuPy: a Python int goes as int64 (the same 8 bytes)
        return int
    return CIntptr


class CupyBackend(MmaFamily, CupySharedSource):
    """The CuPy backend: the shared-source families and the tensor-core family (issue 14:
    ``kernels/mma.cl`` through :mod:`.mma`)."""


@hookimpl
def register_backends(register):
    register(CupyBackend())
