"""The Backend base class: what a backend must define, and the defaults for everything else.

A minimal backend defines ``name``, ``kernels`` and ``run(plan, a, b, out)``; it then runs on the
host CPU with NumPy arrays, float32 and float64, and is always available. Device backends
override the array hooks (``accepts``, ``asarray``, ``empty``, ``to_numpy``), ``device`` and
``geometry``. The core calls nothing else.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..device.host import host_cpu
from ..device.spec import DeviceSpec
from ..planner.geometry import Geometry

if TYPE_CHECKING:  # pragma: no cover
    from ..planner.plans import Plan

__all__ = ["Backend"]


class Backend:
    """Base class of every backend. Subclass it and register an instance from a plugin hook."""

    #: Unique name users pass as ``backend=``.
    name: str = ""
    #: Kernel families implemented, a subset of ``KERNEL_FAMILIES``.
    kernels: tuple[str, ...] = ()
    #: Other names this backend answers to. Shared aliases ("cuda", "cpu") go to the
    #: available backend with the highest ``priority``.
    aliases: tuple[str, ...] = ()
    #: dtypes the kernels run; others are delegated to the array library (documented).
    dtypes: tuple[str, ...] = ("float32", "float64")
    #: Input dtypes the ``mma`` family takes beyond ``dtypes`` (float16, bfloat16); the API
    #: routes them to tensor cores. Empty: none.
    mma_dtypes: tuple[str, ...] = ()
    #: Preference among backends sharing an alias, and for ``backend="auto"``.
    priority: int = 0
    #: Array libraries (``tiledmm.interop.kinds`` names, e.g. ``"numba"``) whose arrays this backend
    #: takes and returns itself (``empty(like=...)``): the array bridge leaves them alone.
    result_kinds: tuple[str, ...] = ()
    #: ``"cupy"`` when every launch and temporary goes to CuPy's current stream: the torch
    #: fast path then orders a call on a torch side stream by making it CuPy's current one,
    #: without events (``""``: the backend may launch on the legacy default stream).
    launch_stream: str = ""

    # ---------------------------------------------------------------- availability and device

    def unavailable_reason(self) -> str | None:
        """``None`` when usable, else a sentence saying why not and what to do."""
        return None

    @property
    def available(self) -> bool:
        return self.unavailable_reason() is None

    def device(self) -> DeviceSpec:
        """The device this backend runs on now (the planner reads its limits and ceilings)."""
        return host_cpu()

    def device_key(self) -> Any:
        """A cheap, hashable name of the current device (plan caches key on it). Backends that
        can switch devices (CuPy's current device, an OpenCL device choice) override it."""
        return None

    def devices(self) -> list[DeviceSpec]:
        """Every device the backend can see (for ``tiledmm info``)."""
        return [self.device()]

    def bind(self, plan: Plan) -> Any:
        """A pre-bound launch of ``plan`` for the hot path (an object whose ``arrays(a, b, out)``
        launches and returns True, or False to decline), or None: :meth:`run` every call."""
        return None

    def measured_gflops(self, kernel: str, dtype: str, device: DeviceSpec,
                        shape_class: str) -> float | None:  # fmt: skip
        """The backend's shipped measurement of ``kernel`` on ``device`` for ``shape_class``
        (GFLOP/s), or None where it ships none."""
        return None

    def geometry(self, kernel: str, dtype: str, device: DeviceSpec) -> Geometry | None:
        """Preferred tiles for a family on ``device``; ``None`` lets the planner choose."""
        return None

    def geometry_entries(self) -> list[dict]:
        """The shipped table entries behind ``geometry`` (JSON objects as the backend's own
        table holds them, e.g. the built-ins' ``kernels/geometry.json``), for offline tools:
        ``tiledmm.report.modelcheck`` rebuilds committed results with the options each row ran with.
        The core reads them only through this method, never from a backend's files. ``[]``
        (the default): no such table."""
        return []

    def plan_problem(self, plan: Plan) -> str | None:
        """Why this backend's kernels cannot run ``plan`` (constraints beyond the planner's:
        vector widths, micro-tile shapes), ``None`` when they can. The tuner prunes its
        candidates and the tuning database its entries with it; the default accepts all."""
        return None

    def search_space(self, kernel: str, dtype: str, device: DeviceSpec) -> list[Geometry] | None:
        """Candidate tiles ``tiledmm tune`` may try for a family on ``device`` (the planner's
        limits prune them before anything runs); ``None``: this backend is not tunable."""
        return None

    def compile_probe(
        self, kernel: str, defines: dict[str, int], source: str | None = None
    ) -> Callable[[int, tuple], Any] | None:
        """Optional, for ``tiledmm calibrate``: compile the level probe ``kernel``
        (``stream_probe``, ``shared_probe``, ``fma_probe``; ``acc_probe`` for OpenCL on a
        CPU; ``register_block``, a compiled CPU register kernel on one block with ``defines``'
        BM/BN/BK/TN and args ``(A, B, C)``: ``tiledmm.tune.loop_probe``) from the backend's own
        probe source
        (``source``, when given, instead) with ``defines`` and return
        ``launch(groups, args)``, which runs it on ``groups`` 1-D groups of
        ``defines["THREADS"]`` work-items with native arrays and scalars (int32 or the probe's
        real type) as arguments. ``None`` (the default): no level probes on this backend."""
        return None

    # ---------------------------------------------------------------- arrays

    def accepts(self, x: Any) -> bool:
        """True if ``x`` is one of this backend's native arrays (used by ``backend="auto"``)."""
        return isinstance(x, np.ndarray)

    def asarray(self, x: Any, dtype: np.dtype) -> Any:
        """``x`` as a native array of ``dtype`` (copying to the device if needed)."""
        return np.asarray(x, dtype=dtype)

    def empty(self, shape: tuple[int, ...], dtype: np.dtype, like: Any = None) -> Any:
        """A new native array for a result. ``like`` is the caller's own operand (before
        ``asarray``): a backend whose results can take several array kinds (Numba CUDA: CuPy or
        Numba device arrays) returns the kind of ``like``; ``None`` means the backend's own."""
        return np.empty(shape, dtype=dtype)

    def to_numpy(self, x: Any) -> np.ndarray:
        return np.asarray(x)

    def vendor_matmul(self, a: Any, b: Any) -> Any:
        """The device's vendor library on native arrays: the yardstick, and the delegate for
        dtypes the kernels do not run."""
        return np.matmul(a, b)

    def vendor_backend(self) -> Backend:
        """The backend whose ``vendor_matmul`` is this device's yardstick (itself by default).

        A backend without a vendor GEMM of its own on its device (OpenCL on an NVIDIA GPU)
        returns the one that has it (CuPy, for cuBLAS), so benchmarks compare like with like.
        """
        return self

    def synchronize(self) -> None:
        """Wait for queued device work (for timing)."""

    def timings(self, fn: Callable[[], Any], *, repeat: int = 10, warmup: int = 2) -> list[float]:
        """Seconds per call of ``fn()`` after ``warmup`` untimed calls.

        The default is host wall time around a synchronized call; device backends override it
        with device events (CUDA events, OpenCL profiling) so launch jitter stays out.
        """
        for _ in range(warmup):
            fn()
        self.synchronize()
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            fn()
            self.synchronize()
            times.append(time.perf_counter() - t0)
        return times

    # ---------------------------------------------------------------- the kernel

    def run(self, plan: Plan, a: Any, b: Any, out: Any) -> None:
        """Compute ``out[...] = a @ b`` for 2-D native arrays with the plan's kernel.

        ``a`` is (M, K), ``b`` is (K, N), both of ``plan.dtype`` and possibly strided;
        ``out`` is an (M, N) native array of the same dtype, possibly a strided view,
        and must be fully written.
        """
        raise NotImplementedError(f"backend {self.name!r} does not implement run()")

    def run_batched(self, plan: Plan, a: Any, b: Any, out: Any) -> bool:
        """Compute every ``out[i] = a[i] @ b[i]`` of a batched product at once, if it can.

        ``out`` has the full batch shape ``(*batch, M, N)``; ``a`` is ``(*batch_a, M, K)`` and
        ``b`` ``(*batch_b, K, N)`` with NumPy's broadcasting (missing or size-1 batch
        dimensions repeat). Return True when done, False to let the API run ``run`` per
        matrix (the default: this backend has no batched kernel).
        """
        return False

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"
