"""Numba CUDA backend: the three kernel families written in Python with ``numba.cuda``.

Arrays: NumPy in -> NumPy out (the API copies through ``to_numpy``); Numba device arrays and
anything with ``__cuda_array_interface__`` stay on the device. Result kind: decided by the
caller's operand that the API passes to ``empty(shape, dtype, like=...)``: a CuPy array gives
a CuPy result, anything else a Numba ``DeviceNDArray`` (zero-copy ``cupy.asarray`` /
``torch.as_tensor`` views convert it). No state is kept between calls.

Kernels are generated per parameter set (see ``kernels.py``), compiled once per signature,
cached on disk, and launched through a ``Launcher`` per launch (``plan.launch_key``, device;
a bounded cache; no per-call typing). Tiles come from the geometry database
(``kernels/geometry.json``, section "numba"), the device description (``device.py``) from
``tiledmm.device.nvidia``. Indices are unsigned 32-bit: one matrix may hold at most
2**32 - 1 elements. ``engine.py`` is the only module that imports ``numba.cuda``, lazily;
``unavailable_reason`` says what is missing and how to fix it.
"""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import math
import os
import sys
from typing import Any

import numpy as np

from tiledmm import Backend, DeviceSpec, Geometry, hookimpl
from tiledmm.util.lru import LRUCache

from .. import kernels as K
from .compat import numpy_incompatibility
from .device import current_spec

__all__ = ["NumbaCudaBackend", "register_backends"]


def _dist_version(name: str) -> str | None:
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


def _simulating() -> bool:
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "") not in ("", "0")


def _is_cupy(x: Any) -> bool:
    cp = sys.modules.get("cupy")  # a CuPy array exists only once cupy is imported
    return cp is not None and isinstance(x, cp.ndarray)


def _is_numba(x: Any) -> bool:
    nd = sys.modules.get("numba.cuda.cudadrv.devicearray")
    return nd is not None and isinstance(x, nd.DeviceNDArrayBase)


def _direct(x: Any) -> bool:
    """Whether the fast launch path takes ``x`` as it is: a C-contiguous CuPy array (its
    pointer and size are all a launch needs; ``cuda.as_cuda_array`` costs tens of
    microseconds per operand on every call). CuPy's ``_c_contiguous`` is read where it exists
    (``flags`` builds an object per access)."""
    if not _is_cupy(x):
        return False
    flag = getattr(x, "_c_contiguous", None)
    return bool(x.flags.c_contiguous if flag is None else flag)


class NumbaCudaBackend(Backend):
    """naive / tiled / register kernels in Numba CUDA (simulator when NUMBA_ENABLE_CUDASIM=1)."""

    name = "numba-cuda"
    aliases = ("cuda",)
    kernels = ("naive", "tiled", "register")
    priority = 10
    result_kinds = ("numba",)  # Numba arrays in, Numba arrays out (empty(like=))

    def __init__(self) -> None:
        self.launches: LRUCache[Any] = LRUCache(256)  # Launcher per (launch key, device)
        self._last: tuple | None = None  # (plan, launcher) of the last call

    # ----------------------------------------------------------------- availability, device

    def unavailable_reason(self) -> str | None:
        nc = _dist_version("numba-cuda")
        mlir = importlib.util.find_spec("numba_cuda_mlir") is not None
        forced = os.environ.get("TILEDMM_NUMBA_ENGINE", "")
        if nc is None and not mlir and importlib.util.find_spec("numba") is None:
            return "Numba is not installed: pip install 'tiledmm[numba]' (numba + numba-cuda)"
        if nc is None and not mlir and not _simulating():
            return (
                "numba-cuda is not installed (Numba's built-in CUDA target is deprecated): "
                "pip install numba-cuda (or numba-cuda-mlir)"
            )
        bad = numpy_incompatibility(np.__version__, nc)
        if bad and not _simulating() and (not mlir or forced == "numba-cuda"):
            return bad + ", or pip install numba-cuda-mlir (used automatically when present)"
        try:
            from . import engine as nb
        except Exception as exc:  # noqa: BLE001 - any import failure is a reason
            return (
                f"numba.cuda failed to import ({type(exc).__name__}: {exc}): "
                "pip install -U numba numba-cuda"
            )
        if nb.SIMULATOR:
            return None
        if not nb.cuda.is_available():
            return (
                "no usable CUDA GPU or driver was found (numba.cuda.is_available() is False); "
                "install the NVIDIA driver, or set NUMBA_ENABLE_CUDASIM=1 for the simulator"
            )
        return None

    def device(self) -> DeviceSpec:
        return current_spec().with_calibration()

    def device_key(self) -> int:
        """The current CUDA device's ordinal."""
        from . import engine as nb

        return nb.device_id()

    def geometry(self, kernel: str, dtype: str, device: DeviceSpec,
                 shape_class: str | None = None) -> Geometry:  # fmt: skip
        """Tiles from the geometry database's "numba" entries; ``shape_class`` picks a class
        entry before the general one (the gemv path for vectors, split-K for skinny_mn)."""
        return K.load_geometry(kernel, dtype, device, kernels="numba", backend=self.name,
                               shape_class=shape_class)  # fmt: skip

    def geometry_entries(self) -> list[dict]:
        """The geometry database's "numba" entries, in file order
        (``tiledmm.report.modelcheck``)."""
        return [e for e in K.geometry_entries() if e.get("kernels") == "numba"]

    def measured_gflops(self, kernel: str, dtype: str, device: DeviceSpec,
                        shape_class: str) -> float | None:  # fmt: skip
        """The geometry database's measured GFLOP/s of this backend's ``kernel`` on ``device``
        for exactly ``shape_class`` ("numba" entries: what ``kernel="auto"`` compares)."""
        from ..kernels.shapes import shipped_gflops

        return shipped_gflops(kernel, dtype, device, self.name, shape_class, kernels="numba")

    def search_space(self, kernel: str, dtype: str, device: DeviceSpec) -> list[Geometry]:
        """The geometries ``tiledmm tune`` tries (backends/kernels/space.py)."""
        from ..kernels.space import space

        return space(kernel, dtype, device, kernels="numba")

    # ----------------------------------------------------------------- arrays

    def accepts(self, x: Any) -> bool:
        if _is_cupy(x) or (not _simulating() and _is_numba(x)):
            return True  # (without building their __cuda_array_interface__ dicts)
        if hasattr(x, "__cuda_array_interface__"):
            return True
        return _simulating() and type(x).__name__ == "FakeCUDAArray"

    def asarray(self, x: Any, dtype: np.dtype) -> Any:
        from . import engine as nb

        dtype = np.dtype(dtype)
        if _is_cupy(x):
            return x if x.dtype == dtype else x.astype(dtype)
        if isinstance(x, np.ndarray) or not self.accepts(x):
            return nb.to_device(np.ascontiguousarray(x, dtype=dtype))
        x = nb.wrap(x)
        if x.dtype == dtype:
            return x
        out = nb.device_array(x.shape, dtype)
        if x.ndim == 2:
            nb.copy2d(x, out)
        else:  # rare: cast through a 2-D view of any rank
            nb.copy2d(
                x.reshape(1, x.size) if nb.c_contiguous(x) else _contig(x), out.reshape(1, x.size)
            )
        return out

    def empty(self, shape: tuple[int, ...], dtype: np.dtype, like: Any = None) -> Any:
        """A CuPy array when ``like`` (the caller's operand) is one, else a Numba array."""
        if _is_cupy(like):
            return sys.modules["cupy"].empty(shape, dtype)
        from . import engine as nb

        return nb.device_array(shape, dtype)

    def to_numpy(self, x: Any) -> np.ndarray:
        if isinstance(x, np.ndarray):
            return x
        if hasattr(x, "copy_to_host"):
            return x.copy_to_host()
        if hasattr(x, "get"):
            return x.get()
        from . import engine as nb

        return nb.wrap(x).copy_to_host()

    def vendor_matmul(self, a: Any, b: Any) -> Any:
        """cuBLAS through ``cupy.matmul`` when CuPy is installed; otherwise NumPy on the host
        (copied there and back: a correctness fallback, not a yardstick)."""
        try:
            import cupy
        except ImportError:
            from . import engine as nb

            return nb.to_device(np.matmul(self.to_numpy(a), self.to_numpy(b)))
        res = cupy.matmul(cupy.asarray(a), cupy.asarray(b))
        if _is_cupy(a):
            return res
        from . import engine as nb

        return nb.wrap(res)

    def synchronize(self) -> None:
        from . import engine as nb

        nb.synchronize()

    def timings(self, fn, *, repeat: int = 10, warmup: int = 2) -> list[float]:
        """Seconds per call between CUDA events (host timer under the simulator)."""
        from . import engine as nb

        if nb.SIMULATOR:
            return super().timings(fn, repeat=repeat, warmup=warmup)
        from .timing import event_seconds

        return event_seconds(fn, repeat, warmup)

    # ----------------------------------------------------------------- the kernel

    def launcher(self, plan, single: bool = True) -> Any:
        """The bound kernel for ``plan`` (compiled on first use, then cached per launch key,
        device and ``single``: one product, without the batch prologue; the last plan is also
        remembered by identity)."""
        last = self._last
        if last is not None and last[0] is plan and last[1] is single:
            return last[2]
        from . import engine as nb

        key = (plan.launch_key, nb.device_id(), single)
        launch = self.launches.get_or_make(key, lambda: self._make_launcher(plan, single))
        self._last = (plan, single, launch)
        return launch

    def _make_launcher(self, plan, single: bool) -> Any:
        from . import engine as nb
        from .codegen import KernelSpec

        bm, bn, bk = plan.block_tile
        tm, tn = plan.thread_tile
        o = plan.options
        gemv = 0
        if plan.kernel == "naive" and o.get("gemv"):  # 1: M short (x @ B), 2: N short (A @ x)
            gemv = 2 if plan.n < plan.m else 1
        spec = KernelSpec(
            plan.kernel, plan.dtype, bm, bn, bk, tm, tn,
            layout=o.get("layout", "strided"), pad=int(o.get("pad", 0)),
            unroll_k=bool(o.get("unroll_k", False)), stages=int(o.get("stages", 1)),
            split_k=K.split_k(plan), gemv=gemv, ks=int(o.get("ks", 8)) if gemv else 1,
            single=single,
        )  # fmt: skip
        nb.refresh_cupy()  # CuPy may have been imported after the engine
        grid = K.launch_shape(plan)[0] if gemv else plan.grid
        return nb.Launcher(spec, grid)

    def _launch(self, launch, a, b, c, m: int, n: int, k: int, bt: tuple, cupy_ws: bool) -> None:
        """One launch over ``bt``'s batch (with split-K: the slices, then the reduction)."""
        if launch.spec.split_k == 1:
            launch(a, b, c, m, n, k, bt)
        else:
            from .splitk import launch_split

            launch_split(self.launches, launch, a, b, c, m, n, k, bt, cupy_ws)

    def run(self, plan, a, b, out) -> None:
        from . import engine as nb

        m, n, k = plan.m, plan.n, plan.k
        if max(m * k, k * n, m * n) >= 1 << 32:
            raise ValueError(
                f"numba-cuda kernels index with 32-bit unsigned integers; a {m}x{n}x{k} product "
                "has a matrix of 2**32 elements or more: split it or use the cupy backend"
            )
        launch = self.launcher(plan)
        if launch.fast and _direct(a) and _direct(b) and _direct(out):
            if not nb.overlaps(out, a, b):  # (an out= that is an operand: through a temporary)
                # CuPy arrays as they are: pointer and size only
                self._launch(launch, a, b, out, m, n, k, nb.NOBATCH, True)
                return
        a = a if nb.is_numba_array(a) and a.is_c_contiguous() else _contig(a)
        b = b if nb.is_numba_array(b) and b.is_c_contiguous() else _contig(b)
        c = out if nb.is_numba_array(out) else nb.wrap(out)
        if c.is_c_contiguous() and not nb.overlaps(c, a, b):
            self._launch(launch, a, b, c, m, n, k, nb.NOBATCH, False)
            return
        tmp = nb.device_array((m, n), c.dtype)
        self._launch(launch, a, b, tmp, m, n, k, nb.NOBATCH, False)
        nb.copy2d(tmp, c)

    def run_batched(self, plan, a, b, out) -> bool:
        """The whole broadcast batch in one launch (grid z), on C-contiguous operands; False
        (the per-matrix loop) for other layouts."""
        from ..kernels.launch import MAX_Z, batch_dims
        from . import engine as nb

        m, n, k = plan.m, plan.n, plan.k
        batch = tuple(out.shape)[:-2]  # (the simulator's shapes take no negative index)
        if not m or not n or 0 in batch:
            return True
        if not all(nb.c_contiguous(x) for x in (a, b, out)) or nb.overlaps(out, a, b):
            return False  # (overlapping out: the per-matrix loop, each through a temporary)
        strides = [_batch_strides(tuple(x.shape), len(batch)) for x in (a, b, out)]
        if max(a.size, b.size, out.size) >= 1 << 32:
            return False
        dims = batch_dims(batch, strides)
        if len(dims) > 2 or math.prod(batch) * K.split_k(plan) > MAX_Z:  # (grid z: batch x slices)
            return False
        dims = [(1, [0, 0, 0])] * (2 - len(dims)) + dims
        (n0, s0), (n1, s1) = dims
        bt = (n0 * n1, n1, s0[0], s1[0], s0[1], s1[1], s0[2], s1[2])
        launch = self.launcher(plan, single=False)
        # flat views need .size and a pointer: CuPy arrays have them (fast path), others wrap
        direct = nb.SIMULATOR or (launch.fast and _direct(a) and _direct(b) and _direct(out))
        wrap = (lambda x: x) if direct else nb.wrap
        cupy_ws = direct and not nb.SIMULATOR
        self._launch(launch, wrap(a), wrap(b), wrap(out), m, n, k, bt, cupy_ws)
        return True


def _batch_strides(shape: tuple[int, ...], nd: int) -> list[int]:
    """Element strides of a C-contiguous array's batch dimensions, aligned to ``nd`` result
    batch dimensions (0 where it broadcasts)."""
    sh = shape[:-2]
    out, step = [], shape[-2] * shape[-1]
    for d in reversed(sh):
        out.append(0 if d == 1 else step)
        step *= d
    return [0] * (nd - len(sh)) + out[::-1]


def _contig(x: Any) -> Any:
    """A C-contiguous Numba array with the values of ``x`` (a view when it already is one)."""
    from . import engine as nb

    x = nb.wrap(x)
    if x.is_c_contiguous():
        return x
    out = nb.device_array(x.shape, x.dtype)
    nb.copy2d(x, out)
    return out


@hookimpl
def register_backends(register):
    register(NumbaCudaBackend())
