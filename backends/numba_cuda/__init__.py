"""Numba CUDA backend: the three kernel families written in Python with ``numba.cuda``.

Arrays: NumPy in -> NumPy out (the API copies through ``to_numpy``); Numba device arrays and
anything with ``__cuda_array_interface__`` stay on the device. Result kind: if either operand
of the call was a CuPy array and CuPy imports, the result is a CuPy array; otherwise a Numba
``DeviceNDArray`` (zero-copy ``cupy.asarray``/``torch.as_tensor`` views convert it). The API
calls ``asarray(a)``, ``asarray(b)``, ``empty(...)`` in that order on one thread, so the
backend remembers per thread whether the last two operands were CuPy arrays.

Kernels are generated per parameter set (see ``kernels.py``), compiled once per signature,
cached on disk, and launched through a per-plan ``Launcher`` (no per-call typing). Indices
are unsigned 32-bit: one matrix may hold at most 2**32 - 1 elements. Nothing here imports
Numba until the backend is used; ``unavailable_reason`` says what is missing and how to fix it.
"""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import json
import os
import threading
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from tiledmm import Backend, Geometry, hookimpl
from tiledmm.device import DeviceSpec

__all__ = ["NumbaCudaBackend", "register_backends", "numpy_incompatibility"]

_TUNED = Path(__file__).with_name("tuned.json")
_SIM_NAME = "CUDA simulator"


def _version(text: str) -> tuple[int, ...]:
    out = []
    for part in text.split(".")[:3]:
        digits = "".join(ch for ch in part if ch.isdigit())
        out.append(int(digits or 0))
    return tuple(out)


def numpy_incompatibility(numpy_version: str, numba_cuda_version: str | None) -> str | None:
    """The known numba-cuda/NumPy clash, as a sentence naming the fix, or None."""
    if numba_cuda_version is None or _version(numpy_version) < (2, 5):
        return None
    if _version(numba_cuda_version) <= (0, 30, 4):
        return (
            f"numba-cuda {numba_cuda_version} cannot compile kernels with numpy "
            f"{numpy_version} (np.row_stack was removed; NVIDIA/numba-cuda#907, not fixed "
            "upstream): pip install 'numpy<2.5'"
        )
    return None


def _dist_version(name: str) -> str | None:
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


def _simulating() -> bool:
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "") not in ("", "0")


@cache
def _tuned() -> dict:
    try:
        return json.loads(_TUNED.read_text())
    except (OSError, ValueError):
        return {}


def _default_geometry(kernel: str, dtype: str, device: DeviceSpec) -> Geometry:
    if device.name == _SIM_NAME:  # the simulator runs a Python thread per CUDA thread
        tiles = {"naive": ((8, 8, 1), (1, 1)), "tiled": ((8, 8, 8), (1, 1))}
        bt, tt = tiles.get(kernel, ((16, 16, 4), (4, 4)))
        return Geometry(bt, tt, source="numba-cuda simulator: small tiles")
    if kernel == "naive":
        return Geometry((16, 16, 1), source="numba-cuda default")
    if kernel == "tiled":
        return Geometry((16, 16, 16), source="numba-cuda default")
    if dtype == "float32":
        opts = (("layout", "strided"), ("pad", 0), ("unroll_k", False))
        return Geometry((128, 128, 8), (8, 8), opts, source="numba-cuda default")
    opts = (("layout", "strided"), ("pad", 0), ("unroll_k", False))
    return Geometry((64, 64, 8), (4, 4), opts, source="numba-cuda default")


class NumbaCudaBackend(Backend):
    """naive / tiled / register kernels in Numba CUDA (simulator when NUMBA_ENABLE_CUDASIM=1)."""

    name = "numba-cuda"
    aliases = ("cuda",)
    kernels = ("naive", "tiled", "register")
    priority = 10

    def __init__(self) -> None:
        self._launchers: dict[int, tuple[Any, Any]] = {}
        self._tls = threading.local()

    # ----------------------------------------------------------------- availability, device

    def unavailable_reason(self) -> str | None:
        nc = _dist_version("numba-cuda")
        if nc is None and importlib.util.find_spec("numba") is None:
            return "Numba is not installed: pip install 'tiledmm[numba]' (numba + numba-cuda)"
        if nc is None and not _simulating():
            return (
                "numba-cuda is not installed (Numba's built-in CUDA target is deprecated): "
                "pip install numba-cuda"
            )
        bad = numpy_incompatibility(np.__version__, nc)
        if bad and not _simulating():
            return bad
        try:
            from . import _numba as nb
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
        return _device_spec().with_calibration()

    def geometry(self, kernel: str, dtype: str, device: DeviceSpec) -> Geometry:
        entry = _tuned().get(device.name, {}).get(f"{kernel}/{dtype}")
        if entry:
            return Geometry.from_dict(entry, f"tuned on {device.name}")
        return _default_geometry(kernel, dtype, device)

    # ----------------------------------------------------------------- arrays

    def accepts(self, x: Any) -> bool:
        if hasattr(x, "__cuda_array_interface__"):
            return True
        return _simulating() and type(x).__name__ == "FakeCUDAArray"

    def _note_kind(self, is_cupy: bool) -> None:
        self._tls.kinds = (getattr(self._tls, "kinds", (False, False))[1], is_cupy)

    def asarray(self, x: Any, dtype: np.dtype) -> Any:
        from . import _numba as nb

        dtype = np.dtype(dtype)
        is_cupy = type(x).__module__.startswith("cupy")
        self._note_kind(is_cupy)
        if is_cupy:
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

    def empty(self, shape: tuple[int, ...], dtype: np.dtype) -> Any:
        if any(getattr(self._tls, "kinds", ())):
            try:
                import cupy

                return cupy.empty(shape, dtype)
            except ImportError:
                pass
        from . import _numba as nb

        return nb.device_array(shape, dtype)

    def to_numpy(self, x: Any) -> np.ndarray:
        if isinstance(x, np.ndarray):
            return x
        if hasattr(x, "copy_to_host"):
            return x.copy_to_host()
        if hasattr(x, "get"):
            return x.get()
        from . import _numba as nb

        return nb.wrap(x).copy_to_host()

    def vendor_matmul(self, a: Any, b: Any) -> Any:
        """cuBLAS through ``cupy.matmul`` when CuPy is installed; otherwise NumPy on the host
        (copied there and back: a correctness fallback, not a yardstick)."""
        try:
            import cupy
        except ImportError:
            from . import _numba as nb

            return nb.to_device(np.matmul(self.to_numpy(a), self.to_numpy(b)))
        res = cupy.matmul(cupy.asarray(a), cupy.asarray(b))
        if type(a).__module__.startswith("cupy"):
            return res
        from . import _numba as nb

        return nb.wrap(res)

    def synchronize(self) -> None:
        from . import _numba as nb

        nb.synchronize()

    def timings(self, fn, *, repeat: int = 10, warmup: int = 2) -> list[float]:
        """Seconds per call between CUDA events (host timer under the simulator)."""
        from . import _numba as nb

        if nb.SIMULATOR:
            return super().timings(fn, repeat=repeat, warmup=warmup)
        return nb.event_seconds(fn, repeat, warmup)

    # ----------------------------------------------------------------- the kernel

    def launcher(self, plan) -> Any:
        """The bound kernel for ``plan`` (compiled on first use, then cached per plan)."""
        hit = self._launchers.get(id(plan))
        if hit is not None and hit[0] is plan:
            return hit[1]
        from . import _numba as nb
        from .kernels import KernelSpec

        bm, bn, bk = plan.block_tile
        tm, tn = plan.thread_tile
        o = plan.options
        spec = KernelSpec(
            plan.kernel, plan.dtype, bm, bn, bk, tm, tn,
            layout=o.get("layout", "strided"), pad=int(o.get("pad", 0)),
            unroll_k=bool(o.get("unroll_k", False)), stages=int(o.get("stages", 1)),
        )  # fmt: skip
        launch = nb.Launcher(spec, plan.grid)
        self._launchers[id(plan)] = (plan, launch)
        return launch

    def run(self, plan, a, b, out) -> None:
        from . import _numba as nb

        m, n, k = plan.m, plan.n, plan.k
        if max(m * k, k * n, m * n) >= 1 << 32:
            raise ValueError(
                f"numba-cuda kernels index with 32-bit unsigned integers; a {m}x{n}x{k} product "
                "has a matrix of 2**32 elements or more: split it or use the cupy backend"
            )
        launch = self.launcher(plan)
        a = a if nb.is_numba_array(a) and a.is_c_contiguous() else _contig(a)
        b = b if nb.is_numba_array(b) and b.is_c_contiguous() else _contig(b)
        c = out if nb.is_numba_array(out) else nb.wrap(out)
        if c.is_c_contiguous():
            launch(a, b, c, m, n, k)
            return
        tmp = nb.device_array((m, n), c.dtype)
        launch(a, b, tmp, m, n, k)
        nb.copy2d(tmp, c)


def _contig(x: Any) -> Any:
    """A C-contiguous Numba array with the values of ``x`` (a view when it already is one)."""
    from . import _numba as nb

    x = nb.wrap(x)
    if x.is_c_contiguous():
        return x
    out = nb.device_array(x.shape, x.dtype)
    nb.copy2d(x, out)
    return out


@cache
def _device_spec() -> DeviceSpec:
    from . import _numba as nb

    if nb.SIMULATOR:
        return DeviceSpec(
            name=_SIM_NAME, kind="gpu", vendor="NVIDIA (simulated)", compute_units=1,
            warp_size=32, max_shared_per_block=48 * 1024, shared_per_unit=48 * 1024,
            peak_flops=(("float32", 1e6), ("float64", 1e6)), bandwidth=1e6,
            launch_overhead=1e-3, ceilings_source="estimate: the simulator runs on the host",
        )  # fmt: skip
    return _device_from(nb.cuda.get_current_device())


def _attr(dev: Any, name: str, default: int) -> int:
    try:
        return int(getattr(dev, name))
    except (AttributeError, TypeError, ValueError):  # attribute unknown to this driver/binding
        return default


def _device_from(dev: Any) -> DeviceSpec:
    """A DeviceSpec from a numba.cuda device's attributes (CU_DEVICE_ATTRIBUTE_* names)."""
    name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
    cc = dev.compute_capability
    sms = _attr(dev, "MULTIPROCESSOR_COUNT", 1)
    clock = _attr(dev, "CLOCK_RATE", 1000000) * 1e3  # kHz -> Hz
    lanes = 128 if cc[0] >= 8 and cc != (8, 0) else 64  # FP32 lanes per SM
    fp64 = 64 if cc in ((6, 0), (7, 0), (8, 0), (9, 0)) else 2
    mem_hz = _attr(dev, "MEMORY_CLOCK_RATE", 1000000) * 1e3
    bw = 2 * mem_hz * _attr(dev, "GLOBAL_MEMORY_BUS_WIDTH", 256) / 8
    optin = _attr(dev, "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN", 0)
    return DeviceSpec(
        name=name, kind="gpu", vendor="NVIDIA", compute_units=sms,
        warp_size=_attr(dev, "WARP_SIZE", 32),
        max_threads_per_block=_attr(dev, "MAX_THREADS_PER_BLOCK", 1024),
        max_threads_per_unit=_attr(dev, "MAX_THREADS_PER_MULTIPROCESSOR", 2048),
        max_blocks_per_unit=_attr(dev, "MAX_BLOCKS_PER_MULTIPROCESSOR", 32),
        # static shared arrays (all this backend uses) are capped at 48 KiB per block
        max_shared_per_block=_attr(dev, "MAX_SHARED_MEMORY_PER_BLOCK", 49152),
        shared_per_unit=_attr(dev, "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR", 49152),
        registers_per_unit=_attr(dev, "MAX_REGISTERS_PER_MULTIPROCESSOR", 65536),
        max_registers_per_thread=255,
        caches=(("L2", _attr(dev, "L2_CACHE_SIZE", 0)),),
        peak_flops=(("float32", sms * clock * lanes * 2), ("float64", sms * clock * fp64 * 2)),
        bandwidth=bw, launch_overhead=27e-6,
        ceilings_source=(
            f"estimate from {sms} SMs x {clock / 1e9:.2f} GHz x {lanes} FP32 lanes x 2; "
            "run `tiledmm calibrate` to measure"
        ),
        extra=(("compute_capability", f"{cc[0]}.{cc[1]}"), ("shared_optin_per_block", str(optin))),
    )  # fmt: skip


@hookimpl
def register_backends(register):
    register(NumbaCudaBackend())
