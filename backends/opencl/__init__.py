"""PyOpenCL backend: the shared GEMM kernel sources compiled as OpenCL C.

Runs on any OpenCL device: GPUs, and CPUs through PoCL (which is how CI exercises the kernels
that the CuPy backend runs as CUDA). Only devices whose compiler builds and runs a trivial kernel
are used (``platforms.py``: probed once per device; a failing one is skipped with its reason,
shown by ``tiledmm info``; where none passes the backend is unavailable, saying why and what to
install). ``TILEDMM_OPENCL_DEVICE`` picks the device by index into ``devices()`` (the usable
ones) or by a case-insensitive piece of its platform and name (default: the first usable GPU,
else the first usable device). Native arrays are ``pyopencl.array.Array`` on this backend's
queue.

Tiles come from the geometry database (``kernels/geometry.json``) by device name, else by kind:
on GPUs the register family stages tiles in local memory; on CPUs it is a local-memory-free
vector micro-kernel. ``run`` is the shared launch path (``kernels.launch``) with this backend's
array model (a buffer, an element offset and a leading dimension per operand) as the adapter
(``OpenCLState``, in ``state.py``: one device's context, queue, programs and that model).
``vendor_matmul`` is ``numpy.matmul`` through the host (OpenCL has no vendor BLAS here), which
is the honest yardstick on CPU devices. ``timings`` reads OpenCL profiling events: from the
start of the first command a call enqueues to the end of its last, queued behind a spin kernel
on NVIDIA GPUs (device time, as the CUDA backends measure it); calls that enqueue no tiledmm
command fall back to wall time.
"""

from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import replace
from functools import cache
from typing import Any

import numpy as np

from tiledmm import Backend, DeviceSpec, Geometry, get_backend, hookimpl

from .. import kernels as K
from ..kernels import launch
from ..kernels.probe import probe_source
from . import choice, platforms
from .choice import NoUsableDevice
from .device import device_spec
from .mma import MmaFamily
from .state import OpenCLState, cl_modules

__all__ = ["OpenCLBackend", "OpenCLState", "NoUsableDevice", "register_backends"]

#: how long the spin kernel ahead of each timed call keeps an NVIDIA GPU busy (ns): longer than
#: the host side of any call timed here (pyopencl's: 160 us for one GEMM, 300-450 us with a
#: split-K reduction or aligned copies on the H200, benches/results/logs/h200-opencl-gaps.txt;
#: behind a 200 us spin those calls still showed the host's gaps)
SPIN_NS = 1_000_000


class OpenCLSharedSource(K.SharedSourceTables, Backend):
    """The OpenCL backend's shared-source families (:class:`OpenCLBackend` adds mma)."""

    name = "opencl"
    aliases = ("cl",)
    kernels = K.FAMILIES
    priority = 5

    def __init__(self) -> None:
        self._states: dict[str, OpenCLState] = {}

    # ------------------------------------------------------------------ device

    def state(self) -> OpenCLState:
        """The device chosen by ``TILEDMM_OPENCL_DEVICE`` now: context, queue, programs (a
        RuntimeError saying why in a child forked after OpenCL started: FORKED)."""
        choice.check_fork()
        sel = os.environ.get(choice.ENV, "")
        st = self._states.get(sel)
        if st is None:
            st = self._states[sel] = OpenCLState(choice.pick(sel))
        return st

    def selected_device(self) -> Any:
        """The pyopencl device ``TILEDMM_OPENCL_DEVICE`` selects now (its open state's), or
        None before pyopencl has been imported in this process (this never imports it, so
        ``import tiledmm`` stays light); the device is picked, not opened."""
        sel = os.environ.get(choice.ENV, "")
        st = self._states.get(sel)
        if st is not None:
            return st.dev
        if "pyopencl" not in sys.modules:
            return None
        return choice.pick(sel)

    def unavailable_reason(self) -> str | None:
        try:
            import pyopencl  # noqa: F401
        except ImportError:
            return "pyopencl is not installed (pip install 'tiledmm[opencl]')"
        if choice.RUNTIME["forked"]:
            return choice.FORKED
        try:
            self.state()
        except choice.NoUsableDevice as exc:  # devices, none of whose compilers builds: say why
            return str(exc)
        except Exception as exc:  # noqa: BLE001 - no platform, bad selection, ICD trouble
            text = " ".join(str(exc).split()) or type(exc).__name__
            return (
                f"no usable OpenCL device: {text} (install a driver or PoCL: "
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
        return _with_notes(_spec_cached(self.state().dev))

    def device_key(self) -> str:
        """The device choice (``TILEDMM_OPENCL_DEVICE``) the next call runs on."""
        return os.environ.get(choice.ENV, "")

    def devices(self) -> list[DeviceSpec]:
        """The usable devices (every one probed); skipped ones are named in ``extra``."""
        return [_with_notes(_spec_cached(d)) for d in choice.usable()]

    def search_space(self, kernel: str, dtype: str, device: DeviceSpec) -> list[Geometry]:
        """The geometries ``tiledmm tune`` tries (backends/kernels/space.py)."""
        from ..kernels.space import space

        return space(kernel, dtype, device, stages=not self.state().pocl)

    def plan_problem(self, plan) -> str | None:
        """The sources' constraints (``kernels.defines``), and PoCL's miscompiled stages=2."""
        why = super().plan_problem(plan)
        if why is None and self.state().pocl and int(plan.options.get("stages", 1)) > 1:
            if plan.kernel == "register" and int(plan.options.get("use_local", 1)):
                return "stages=2 is miscompiled by PoCL (docs/kernels.md): use stages=1"
        return why

    def compile_probe(self, kernel: str, defines: dict[str, int], source: str | None = None):
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
        _, cla = cl_modules()
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
        _, cla = cl_modules()
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


@cache
def _noted(spec: DeviceSpec, notes: tuple[tuple[str, str], ...]) -> DeviceSpec:
    return replace(spec, extra=spec.extra + notes)


def _with_notes(spec: DeviceSpec) -> DeviceSpec:
    """``spec`` with the skipped devices (and what ``platforms.prepare_icd`` did) in ``extra``,
    which ``tiledmm info`` prints."""
    notes = tuple(("skipped", f"{name}: {why}") for name, why in choice.skipped())
    if platforms.icd_note():
        notes += (("ICD", platforms.icd_note()),)
    return _noted(spec, notes) if notes else spec


class OpenCLBackend(MmaFamily, OpenCLSharedSource):
    """The OpenCL backend: the shared-source families and, on NVIDIA GPUs of compute
    capability 8.0+, the tensor-core family (:mod:`.mma`)."""


@hookimpl
def register_backends(register):
    register(OpenCLBackend())
