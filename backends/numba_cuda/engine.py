"""The one place that imports ``numba.cuda``: kernel loading, launching, device facts, events
(the event timing itself is ``timing.py``, on this module's ``cuda``).

Imported lazily by the backend (never at ``import tiledmm``). Two engines sit behind it
(:data:`ENGINE`): ``numba-cuda`` (``numba.cuda``; also the CUDA simulator that CI runs) and
``numba-cuda-mlir`` (``numba_cuda_mlir.cuda``, NVIDIA's successor, which compiles with NumPy
2.5 where numba-cuda 0.30.4 cannot). ``TILEDMM_NUMBA_ENGINE`` forces one; by default the
simulator (``NUMBA_ENABLE_CUDASIM=1``) and a numba-cuda that works with this NumPy take
numba-cuda, else numba-cuda-mlir where it is installed (see :func:`choose_engine`).
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import importlib.util
import os
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from .codegen import KernelSpec
from .kernels import source

ENGINE_ENV = "TILEDMM_NUMBA_ENGINE"
ENGINES = ("numba-cuda", "numba-cuda-mlir")


def choose_engine(env: str, simulating: bool, numba_cuda_ok: bool, mlir_installed: bool) -> str:
    """The engine to import: ``env`` (TILEDMM_NUMBA_ENGINE) when set; the simulator and a
    working numba-cuda take numba-cuda; otherwise numba-cuda-mlir when installed."""
    if env:
        if env not in ENGINES:
            raise ImportError(f"{ENGINE_ENV}={env!r}: choose one of {', '.join(ENGINES)}")
        return env
    if simulating or numba_cuda_ok:
        return "numba-cuda"
    return "numba-cuda-mlir" if mlir_installed else "numba-cuda"


def _numba_cuda_ok() -> bool:
    import importlib.metadata as md

    from .compat import numpy_incompatibility

    try:
        nc = md.version("numba-cuda")
    except md.PackageNotFoundError:
        return False
    return numpy_incompatibility(np.__version__, nc) is None


ENGINE = choose_engine(
    os.environ.get(ENGINE_ENV, ""),
    os.environ.get("NUMBA_ENABLE_CUDASIM", "") not in ("", "0"),
    _numba_cuda_ok(),
    importlib.util.find_spec("numba_cuda_mlir") is not None,
)
if ENGINE == "numba-cuda-mlir":
    from numba_cuda_mlir import cuda

    SIMULATOR = False
else:
    from numba import config as _config
    from numba import cuda

    SIMULATOR = bool(_config.ENABLE_CUDASIM)
_U32 = np.uint32


def _perf_warning() -> type[Warning]:
    """The engine's NumbaPerformanceWarning class (Warning where it cannot be found)."""
    for mod in ("numba.cuda.core.errors", "numba.core.errors", "numba_cuda_mlir.core.errors"):
        try:
            return importlib.import_module(mod).NumbaPerformanceWarning
        except (ImportError, AttributeError):
            continue
    return Warning


PERF_WARNING = _PERF = _perf_warning()
#: numba's low-occupancy warning, raised when a launch is configured with under 128 blocks.
#: Where colorama is installed numba highlights the text (``"\x1b[1mGrid size 1 ..."``), and a
#: warnings filter matches from the message's start: hence the leading ``.*``.
SMALL_GRID = r".*Grid size \d+ will likely result in GPU under-utilization"


@contextlib.contextmanager
def small_grids_on_purpose():
    """Silence numba's low-occupancy warning for the launches configured inside (tiledmm's
    small products and copies are small on purpose); every other warning, and the same
    warning for the user's own launches outside, still shows."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=SMALL_GRID, category=_PERF)
        yield


#: The batch descriptor of one product: (grid z, nb1, sa0, sa1, sb0, sb1, sc0, sc1).
NOBATCH = (1, 1, 0, 0, 0, 0, 0, 0)


def kernel_dir() -> Path:
    """Where generated kernel modules (and Numba's on-disk cache next to them) live."""
    root = os.environ.get("TILEDMM_CACHE_DIR")
    if not root:
        import platformdirs

        root = platformdirs.user_cache_dir("tiledmm")
    return Path(root) / "numba_kernels"


_modules: dict[KernelSpec, Any] = {}


def load(spec: KernelSpec):
    """The compiled dispatcher for ``spec`` (generated, written once, imported, cached)."""
    disp = _modules.get(spec)
    if disp is not None:
        return disp
    text = source(spec, ENGINE)
    digest = hashlib.sha1(text.encode()).hexdigest()[:10]
    modname = f"tiledmm_nk_{spec.name}_{digest}"
    folder = kernel_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{modname}.py"
    if not path.exists() or path.read_text() != text:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
    mspec = importlib.util.spec_from_file_location(modname, path)
    mod = importlib.util.module_from_spec(mspec)
    sys.modules[modname] = mod
    mspec.loader.exec_module(mod)
    _modules[spec] = mod.kernel
    return mod.kernel


# ------------------------------------------------------------------------------- launching


def _ptr(x: Any) -> int:
    """The device address of ``x``: a Numba array's from its memory object (its
    ``__cuda_array_interface__`` builds a dict, a ctypes pointer and a contiguity check on
    every access), anything else's from the interface."""
    mem = getattr(x, "gpu_data", None) if type(x) in _ND_TYPES else None
    if mem is not None:
        return int(mem.device_pointer)
    return x.__cuda_array_interface__["data"][0]


def span(x: Any) -> tuple[int, int] | None:
    """The bytes ``[start, end)`` a C-contiguous array occupies (None: address unknown)."""
    if type(x) is _CUPY_ND[0]:
        p = x.data.ptr
    elif SIMULATOR:  # (the simulator's arrays wrap a NumPy array)
        ary = getattr(x, "_ary", None)
        if ary is None:
            return None
        p = ary.__array_interface__["data"][0]
    else:
        try:
            p = _ptr(x)
        except (AttributeError, KeyError, TypeError):
            return None
    return p, p + x.size * x.dtype.itemsize


def overlaps(out: Any, *xs: Any) -> bool:
    """Whether C-contiguous ``out`` shares bytes with any of ``xs`` (also when unknown)."""
    so = span(out)
    if so is None:
        return True
    for x in xs:
        sx = span(x)
        if sx is None or (sx[0] < so[1] and so[0] < sx[1] and so[0] < so[1] and sx[0] < sx[1]):
            return True
    return False


def _nd_types() -> tuple[type, ...]:
    dev = getattr(cuda, "devicearray", None)
    return tuple(t for t in (getattr(dev, "DeviceNDArray", None),) if isinstance(t, type))


_ND_TYPES: tuple[type, ...] = () if SIMULATOR else _nd_types()


def _cupy_ndarray() -> type | None:
    cp = sys.modules.get("cupy")
    return getattr(cp, "ndarray", None)


#: cupy.ndarray when CuPy was imported before this module (its ``data.ptr`` is cheaper than
#: building ``__cuda_array_interface__`` on every call); ``refresh_cupy`` updates it
_CUPY_ND: list[type | None] = [_cupy_ndarray()]


def refresh_cupy() -> None:
    """Pick up cupy.ndarray when CuPy was imported after this module."""
    _CUPY_ND[0] = _cupy_ndarray()


class Launcher:
    """One kernel bound to one launch configuration; call it with 2-D C-contiguous arrays.

    On a real GPU the compiled ``_Kernel`` is looked up once and its arguments are packed here
    directly (a flat 1-D view of each array is its pointer and size: no view object, no
    re-typing, no dispatcher search). Elsewhere, or if numba-cuda's internals differ, it falls
    back to a pre-configured dispatcher ``kernel[grid, block]`` on ``reshape``d views.
    """

    def __init__(self, spec: KernelSpec, grid: tuple[int, int]) -> None:
        self.spec = spec
        self.dispatcher = load(spec)
        self.grid, self.block = (int(grid[0]), int(grid[1]), 1), (spec.threads, 1, 1)
        self._batched: dict[int, Any] = {}  # grid z -> launch configuration
        self._tails: dict[tuple, list] = {}  # (m, n, k, batch) -> the c_uint32 arguments
        self.itemsize = np.dtype(spec.dtype).itemsize
        self._fast = None
        fast_ok = not SIMULATOR and ENGINE == "numba-cuda"  # binds numba-cuda's internals
        if fast_ok and os.environ.get("TILEDMM_NUMBA_FAST_LAUNCH", "1") != "0":
            try:
                self._fast = self._bind_fast()
            except Exception:  # noqa: BLE001 - internals moved: use the public path
                self._fast = None
        # The simulator's ``dispatcher[grid, block]`` configures and returns the dispatcher
        # itself (one object per kernel), so a kept configuration is overwritten by the next
        # launcher of the same kernel: configure per call there.
        self._configured = None if SIMULATOR else self._configure(self.grid)

    def _configure(self, grid: tuple):
        with small_grids_on_purpose():
            return self.dispatcher[grid, self.block]

    @property
    def fast(self) -> bool:
        """Whether calls pack arguments directly (the fast path) rather than through Numba."""
        return self._fast is not None

    def _bind_fast(self):
        from numba.cuda import dispatcher as dmod
        from numba.cuda.cudadrv import driver

        kern = next(iter(self.dispatcher.overloads.values()))
        cufunc = kern._codelibrary.get_cufunc()
        cfg = dmod.LaunchConfig(grid=self.grid, block=self.block, shmem_size=0)
        stream = driver._to_core_stream(0)
        return dmod.launch, stream, cfg, cufunc.kernel

    def __call__(self, a: Any, b: Any, c: Any, m: int, n: int, k: int,
                 bt: tuple = NOBATCH) -> None:  # fmt: skip
        """Launch on C-contiguous ``a``, ``b``, ``c`` (any rank: flat views); ``bt`` is the
        batch: (grid z, nb1, sa0, sa1, sb0, sb1, sc0, sc1) in elements."""
        fast = self._fast
        if fast is not None:
            launch, stream, cfg, fn = fast
            if bt is not NOBATCH:
                cfg = self._batched.get(bt[0]) or self._batched.setdefault(
                    bt[0], _config_z(self.grid, self.block, bt[0])
                )
            s = self.itemsize
            args = []
            for x in (a, b, c):
                size = x.size
                ptr = x.data.ptr if type(x) is _CUPY_ND[0] else _ptr(x)
                args += (0, 0, size, s, ptr, size, s)
            tail = self._tails.get((m, n, k, bt))
            if tail is None:  # (made once per shape: ten ctypes objects cost ~1 us a call)
                if len(self._tails) >= 64:
                    self._tails.clear()
                tail = self._tails[(m, n, k, bt)] = [
                    ctypes.c_uint32(v) for v in (m, n, k) + tuple(bt[1:])
                ]
            launch(stream, cfg, fn, *args, *tail)
            return
        launch = self._configured
        if launch is None or bt is not NOBATCH:
            launch = self._configure((self.grid[0], self.grid[1], bt[0]))
        launch(a.reshape(a.size), b.reshape(b.size), c.reshape(c.size),
               *(_U32(v) for v in (m, n, k) + tuple(bt[1:])))  # fmt: skip


def _config_z(grid: tuple, block: tuple, z: int):
    """The fast path's launch configuration with grid z = ``z`` (as ``_bind_fast`` makes it)."""
    from numba.cuda import dispatcher as dmod

    return dmod.LaunchConfig(grid=(grid[0], grid[1], z), block=block, shmem_size=0)


def bare_launch(spec: KernelSpec, grid, a, b, c, m: int, n: int, k: int) -> None:
    """The same compiled kernel through Numba's ordinary launch syntax (for overhead figures)."""
    rest = (_U32(v) for v in NOBATCH[1:])
    with small_grids_on_purpose():
        launch = load(spec)[grid, spec.threads]
    launch(a, b, c, _U32(m), _U32(n), _U32(k), *rest)


def kernel_report(spec: KernelSpec) -> dict:
    """Registers and local memory per thread of the compiled kernel (real GPU only)."""
    disp = load(spec)
    if SIMULATOR:
        return {"kernel": spec.name}
    return {
        "kernel": spec.name,
        "registers": int(disp.get_regs_per_thread()),
        "local_bytes": int(disp.get_local_mem_per_thread()),
        "shared_bytes": int(disp.get_shared_mem_per_block()),
    }


# ------------------------------------------------------------------------------- arrays


@cuda.jit
def _copy2d(src, dst):  # strided or dtype-converting copy, one element per thread
    i, j = cuda.grid(2)
    if i < dst.shape[0] and j < dst.shape[1]:
        dst[i, j] = src[i, j]


def copy2d(src: Any, dst: Any) -> None:
    rows, cols = dst.shape
    if rows and cols:
        with small_grids_on_purpose():
            launch = _copy2d[((rows + 15) // 16, (cols + 15) // 16), (16, 16)]
        launch(src, dst)


def is_numba_array(x: Any) -> bool:
    if SIMULATOR:
        return hasattr(x, "copy_to_host")
    if _IS_ND is not None:
        return _IS_ND(x)
    return hasattr(x, "copy_to_host") and hasattr(x, "__cuda_array_interface__")


_IS_ND = getattr(getattr(cuda, "devicearray", None), "is_cuda_ndarray", None)


def wrap(x: Any) -> Any:
    """A Numba view of any CUDA array (zero copy); Numba arrays pass through."""
    if is_numba_array(x):
        return x
    return cuda.as_cuda_array(x)


def c_contiguous(x: Any) -> bool:
    if is_numba_array(x):
        return x.is_c_contiguous()
    flags = getattr(x, "flags", None)
    if flags is not None and hasattr(flags, "c_contiguous"):
        return bool(flags.c_contiguous)
    strides = x.__cuda_array_interface__.get("strides")
    return strides is None


_single: list[bool] = []  # whether one GPU is visible (then the ordinal is always 0)


def device_id() -> int:
    """The current CUDA device's ordinal (0 under the simulator or with one GPU: no driver
    call on the per-call path)."""
    if SIMULATOR:
        return 0
    if not _single:
        _single.append(len(cuda.gpus) == 1)
    return 0 if _single[0] else int(cuda.get_current_device().id)


to_device = cuda.to_device
device_array = cuda.device_array
synchronize = cuda.synchronize
