"""PyOpenCL backend: the shared GEMM kernel sources compiled as OpenCL C.

Runs on any OpenCL device: GPUs, and CPUs through PoCL (which is how CI exercises the kernels
that the CuPy backend runs as CUDA). Only devices whose compiler builds and runs a trivial kernel
are used (``platforms.py``: probed once per device; a failing one is skipped with its reason,
shown by ``tiledmm info``; where none passes the backend is unavailable, saying why and what to
install). ``TILEDMM_OPENCL_DEVICE`` picks the device by index into ``devices()`` (the usable
ones) or by a case-insensitive piece of its platform and name (default: the first usable GPU,
else the first usable device). Native arrays are ``pyopencl.array.Array``, on any context and
queue: a product of pyopencl arrays runs on their queue (the caller's) and returns a queued
array holding the call's event, no host wait inside (``queues.py``); NumPy operands go to the
chosen device's own context and queue, and NumPy comes back.

Tiles come from the geometry database (``kernels/geometry.json``) by device name, else by kind:
on GPUs the register family stages tiles in local memory; on CPUs it is a local-memory-free
vector micro-kernel. ``run`` is the shared launch path (``kernels.launch``) with this backend's
array model (a buffer, an element offset and a leading dimension per operand) as the adapter
(``OpenCLState``, in ``state.py``: one queue's context, programs (shared per context), buffer
pool and that model); ``bind`` gives the engine's hot path a pre-bound launch for plain
operands (``bound.py``: kernel objects whose scalar arguments were set once).
``vendor_matmul`` is ``numpy.matmul`` through the host (OpenCL has no vendor BLAS here), which
is the honest yardstick on CPU devices. ``timings`` reads OpenCL profiling events: from the
start of the first command a call enqueues to the end of its last, queued behind a spin kernel
on NVIDIA GPUs (device time, as the CUDA backends measure it); calls that enqueue no tiledmm
command fall back to wall time.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import replace
from functools import lru_cache
from typing import Any

import numpy as np

from tiledmm import Backend, DeviceSpec, Geometry, get_backend, hookimpl

from .. import kernels as K
from ..kernels import launch
from ..kernels.probe import has_probe, probe_source
from . import choice, platforms
from .bound import Bound, bind
from .device import device_spec
from .mma import MmaFamily
from .queues import Queues, largest, prepare
from .state import OpenCLState, check_size, cl_modules

__all__ = ["OpenCLBackend", "register_backends"]

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
        self._queues = Queues()  # every queue run on: the caller's arrays' too (queues.py)
        self._array: type | None = None  # pyopencl.array.Array, once a state exists

    # ------------------------------------------------------------------ device

    def state(self) -> OpenCLState:
        """The device chosen by ``TILEDMM_OPENCL_DEVICE`` now: context, queue, programs (a
        RuntimeError saying why in a child forked after OpenCL started: FORKED)."""
        choice.check_fork()
        sel = os.environ.get(choice.ENV, "")
        st = self._states.get(sel)
        if st is None:
            st = OpenCLState(choice.pick(sel), recorder=self._queues.rec)
            self._states[sel] = self._queues.add(st)
            self._array = cl_modules()[1].Array
        return st

    def home(self, x: Any) -> OpenCLState:
        """The state a call with result ``x`` runs on: a pyopencl array's own queue (the
        caller's context and queue, ``queues.py``), else the selected device's."""
        if self._array is not None and isinstance(x, self._array):
            choice.check_fork()
            return self._queues.of(x)
        return self.state()

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
        return _with_notes(device_spec(self.state().dev))

    def device_key(self) -> str:
        """The device choice (``TILEDMM_OPENCL_DEVICE``) the next call runs on."""
        return os.environ.get(choice.ENV, "")

    def devices(self) -> list[DeviceSpec]:
        """The usable devices (every one probed); skipped ones are named in ``extra``."""
        return [_with_notes(device_spec(d)) for d in choice.usable()]

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
        if not has_probe(kernel, source):
            return None
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
        """A pyopencl array of ``dtype``: one of ``dtype`` as it is (on its own queue), another
        converted on its queue, host data copied to the selected device's queue."""
        if self._array is not None and isinstance(x, self._array):
            if x.dtype == dtype:
                return x
            check_size(x.shape)
            return self.home(x).contiguous(x).astype(dtype)
        _, cla = cl_modules()
        st = self.state()
        check_size(np.shape(x))  # before the host copy and the buffer
        if isinstance(x, cla.Array):  # (before any state existed: x's queue is not known yet)
            return self.asarray(x, dtype)
        return cla.to_device(st.queue, np.ascontiguousarray(x, dtype=dtype), allocator=st.pool)

    def empty(self, shape: tuple[int, ...], dtype: np.dtype, like: Any = None) -> Any:
        """On ``like``'s queue when it is a pyopencl array (the caller's), else the selected
        device's queue; from that queue's buffer pool."""
        return self.home(like).empty(shape, dtype)

    def to_numpy(self, x: Any) -> np.ndarray:
        return self.home(x).contiguous(x).get() if hasattr(x, "get") else np.asarray(x)

    def vendor_matmul(self, a: Any, b: Any) -> Any:
        """numpy.matmul through the host: OpenCL ships no BLAS; on CPU devices this is the
        OpenBLAS yardstick the kernels are compared against."""
        _, cla = cl_modules()
        return cla.to_device(self.home(a).queue, np.matmul(self.to_numpy(a), self.to_numpy(b)))

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
        """Wait for every queue this backend has run on (the callers' too)."""
        self.state()
        for st in self._queues.all():
            st.queue.finish()

    def timings(self, fn, *, repeat: int = 10, warmup: int = 2) -> list[float]:
        """Seconds per call from profiling events (first command's start to last one's end).
        On NVIDIA GPUs each timed call is queued behind a 1 ms spin kernel (as on CUDA), so a
        call of several commands (split-K's GEMM and reduction) is timed without the host's
        enqueue gaps between them: device time, as the CUDA backends measure it. Work ``fn``
        queues on a caller's queue is waited for too (every queue this backend ran on); a
        queue without profiling gives wall time."""
        st = self.state()
        for _ in range(warmup):
            fn()
        self.synchronize()
        spin = st.spin()
        times = []
        for _ in range(repeat):
            if spin is not None:
                spin(st.queue, (1,), (1,), np.uint64(SPIN_NS))
            st.events = []
            t0 = time.perf_counter()
            try:
                fn()
                self.synchronize()
            finally:
                events, st.events = st.events, None
            wall = time.perf_counter() - t0
            times.append(_span(events) or wall)
        return times

    # ------------------------------------------------------------------ the kernel

    def bind(self, plan) -> Bound | None:
        """A pre-bound launch of ``plan`` for the hot path (``bound.py``), or None where only
        :meth:`run` applies."""
        return bind(self, plan)

    def run(self, plan, a, b, out) -> None:
        """``out[...] = a @ b`` on ``out``'s queue, queued behind the operands' pending events;
        the call's last event becomes ``out.events`` (``queues.py``)."""
        st = self.home(out)
        if not (a.queue is st.queue and b.queue is st.queue) and _other_home(a, b, out):
            return self._run_elsewhere(plan, a, b, out)
        a, b, wait = prepare(st, a, b, out)
        st.begin(wait)
        launch.run(st, st.launches, plan, a, b, out)
        _done(st, out)

    def run_batched(self, plan, a, b, out) -> bool:
        """The whole broadcast batch in one launch (see ``kernels.launch.run_batched``)."""
        st = self.home(out)
        if not (a.queue is st.queue and b.queue is st.queue) and _other_home(a, b, out):
            return False  # (the per-matrix loop: run, each through the host)
        a, b, wait = prepare(st, a, b, out)
        st.begin(wait)
        done = launch.run_batched(st, st.launches, plan, a, b, out)
        _done(st, out)
        return done

    def _run_elsewhere(self, plan, a, b, out) -> None:
        """Operands of two contexts, the largest an input: the product there, then its result
        through the host into ``out``."""
        _, cla = cl_modules()
        st = self.home(largest(a, b))
        c = st.empty(out.shape, out.dtype)
        self.run(plan, a, b, c)
        home = self.home(out)
        home.begin(list(out.events))
        home.copy(cla.to_device(home.queue, c.get(), allocator=home.pool), out)
        _done(home, out)


def _other_home(a, b, out) -> bool:
    """Whether an input lives in another context than ``out`` and outsizes it (then the call
    runs in the input's context: ``largest``)."""
    big = largest(a, b, out)
    return big is not out and big.context != out.context


def _done(st: OpenCLState, out) -> None:
    """The call's last event becomes ``out``'s pending events (it waited for the old ones);
    a call that enqueued nothing leaves no wait behind for the state's next command."""
    st.wait = None
    if st.last is not None:
        del out.events[:]
        out.events.append(st.last)
        st.last = None


def _span(events) -> float | None:
    """Seconds from the first event's start to the last one's end (None: no events, or a
    queue without profiling)."""
    if not events:
        return None
    try:
        return (events[-1].profile.end - events[0].profile.start) * 1e-9
    except Exception:  # noqa: BLE001 - PROFILING_INFO_NOT_AVAILABLE: a caller's plain queue
        return None


@lru_cache(maxsize=16)  # a spec per calibration state: bounded
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
