"""Array kinds: which array library and device an operand belongs to (``tiledmm.interop.bridge``
converts between them).

:func:`kind_of` names the caller's array library and device, cached per type; nothing here
imports torch, jax or cupy unless an operand's type module says it is theirs (:func:`lib_of`).
:func:`result_kind` is the one rule for mixed kinds; :func:`route` decides, once per call, where
:func:`tiledmm.matmul` sends its operands (the engine, the array bridge or Dask);
:func:`optional_module` imports a library only when asked; :func:`array_libraries` lists the
installed ones without importing them.
"""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from ..core import registry
from ..core.backend import Backend
from ..core.semantics import unwrap_out

__all__ = [
    "Kind",
    "RUN_DTYPES",
    "FOREIGN",
    "kind_of",
    "lib_of",
    "lib_by_type",
    "result_kind",
    "Route",
    "route",
    "optional_module",
    "torch_dtype",
    "array_libraries",
]

#: Operand dtypes tiledmm's kernels run for foreign libraries; others are delegated.
RUN_DTYPES = frozenset({np.dtype(np.float32), np.dtype(np.float64)})  # a set: None is not in it

#: Libraries the backends do not take as they are: the bridge converts them both ways.
FOREIGN = frozenset({"torch", "jax", "numba", "dlpack"})

_ROOTS = {"numpy": "numpy", "cupy": "cupy", "cupyx": "cupy", "numba": "numba", "torch": "torch",
          "jax": "jax", "jaxlib": "jax", "pyopencl": "pyopencl", "dask": "dask"}  # fmt: skip


@dataclass(frozen=True)
class Kind:
    """The caller's array library and device.

    ``lib``: "numpy", "cupy", "numba", "torch", "jax", "dlpack" (any other DLPack exporter),
    "pyopencl", "dask" or "host" (lists, Python scalars, anything else NumPy converts).
    ``device``: "cpu" or "cuda", else the library's own word ("mps", "trace" for a JAX tracer);
    ``index``: the device ordinal. ``foreign``: the bridge converts it (see ``FOREIGN``).
    """

    lib: str
    device: str = "cpu"
    index: int = 0
    foreign: bool = False


_kinds: dict[tuple[str, str, int], Kind] = {}
lib_by_type: dict[type, str] = {}


def _kind(lib: str, device: str = "cpu", index: int = 0) -> Kind:
    k = _kinds.get((lib, device, index))
    if k is None:
        k = _kinds[(lib, device, index)] = Kind(lib, device, index, lib in FOREIGN)
    return k


def lib_of(t: type) -> str:
    """The array library a type belongs to, by its modules (cached; imports nothing)."""
    lib = lib_by_type.get(t)
    if lib is None:
        lib = "host"
        for cls in t.__mro__[:-1]:
            root = _ROOTS.get(cls.__module__.partition(".")[0])
            if root:
                lib = root
                break
        else:
            if hasattr(t, "__dlpack__") and hasattr(t, "__dlpack_device__"):
                lib = "dlpack"
        lib_by_type[t] = lib
    return lib


_TORCH_CPU = _kind("torch")
_DL_DEVICES = {1: "cpu", 2: "cuda"}  # DLPack device types: kDLCPU, kDLCUDA


def kind_of(x: Any) -> Kind:
    """The :class:`Kind` of ``x`` (cheap: a dict lookup, plus a device query for torch/JAX)."""
    lib = lib_by_type.get(type(x)) or lib_of(type(x))
    if lib == "torch":
        if x.is_cpu:
            return _TORCH_CPU
        if x.is_cuda:
            return _kind("torch", "cuda", x.get_device())
        dev = x.device
        return _kind("torch", dev.type, dev.index or 0)
    if lib == "jax" or lib == "dlpack":
        if lib == "jax" and not type(x).__module__.startswith("jaxlib"):
            return _kind("jax", "trace")  # a tracer inside jit/grad/vmap: only jnp can run it
        try:
            code, index = x.__dlpack_device__()
        except Exception:  # noqa: BLE001 - sharded over several devices, deleted, ...
            return _kind(lib, "other")
        return _kind(lib, _DL_DEVICES.get(int(code), f"dlpack{int(code)}"), int(index))
    if lib == "numba" or lib == "cupy":
        return _kind(lib, "cuda")
    return _kind(lib)


def result_kind(a: Any, b: Any, out: Any = None) -> Kind:
    """The one rule for mixed kinds: ``out``'s kind when given, else the first operand that is
    an array (a list or scalar first operand defers to the second)."""
    out = unwrap_out(out)
    if out is not None:
        return kind_of(out)
    ka = kind_of(a)
    return kb if ka.lib == "host" and (kb := kind_of(b)).lib != "host" else ka


class Route(NamedTuple):
    """Where one call goes: ``way`` is "native" (the engine), "foreign" (the array bridge, the
    result as ``kind``) or "dask"; ``backend`` is the named backend, resolved once here where
    the operands' kinds needed it (else None: the engine resolves the name)."""

    way: str
    kind: Kind | None = None
    backend: Backend | None = None


NATIVE = Route("native")


def route(a: Any, b: Any, out: Any = None, backend: str = "auto") -> Route:
    """The one decision on the operands' kinds. Native: every operand is one the backends take
    as it is (NumPy, CuPy, lists; the usual, fast answer). CuPy arrays are native, except for a
    named backend that cannot read CUDA memory (OpenCL, NumPy): they then take the same host
    route as foreign CUDA arrays, and the result comes back as CuPy. Foreign kinds a named
    backend takes and returns itself (``result_kinds``) stay native too."""
    o = unwrap_out(out)
    libs = [lib_by_type.get(type(x)) or lib_of(type(x)) for x in (a, b, o) if x is not None]
    foreign = any(lib in FOREIGN for lib in libs)
    if not foreign and "cupy" not in libs:
        return DASK if "dask" in libs and _dask(a, b) else NATIVE
    be = None
    if backend != "auto":
        try:
            be = registry.get_backend(backend)
        except (ValueError, RuntimeError):  # unknown or unavailable: the engine says so
            return DASK if "dask" in libs and _dask(a, b) else NATIVE
        own = be.result_kinds
        if own and not any(lib in FOREIGN and lib not in own for lib in libs):
            return NATIVE
    if not foreign:
        if be is None:
            return NATIVE
        cuda = next(x for x in (a, b, o) if x is not None and lib_of(type(x)) == "cupy")
        if be.accepts(cuda):
            return NATIVE
    return Route("foreign", result_kind(a, b, o), be)


DASK = Route("dask")


def _dask(a: Any, b: Any) -> bool:
    """Whether an operand is a ``dask.array.Array`` (dask is imported only when a type of
    dask's is seen)."""
    import dask.array as da

    return isinstance(a, da.Array) or isinstance(b, da.Array)


# ------------------------------------------------------------------------------- libraries

_mods: dict[str, Any] = {}


def optional_module(name: str) -> Any:
    """The module ``name`` if it imports, else None (answer cached)."""
    if name not in _mods:
        try:
            _mods[name] = importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a broken CUDA install raises all sorts
            _mods[name] = None
    return _mods[name]


_torch_np: dict[Any, np.dtype] = {}


def torch_dtype(torch: Any, dt: Any) -> np.dtype | None:
    """NumPy's dtype for a torch dtype, None where NumPy has none (bfloat16, float8, ...)."""
    if not _torch_np:
        names = "bool uint8 int8 int16 int32 int64 uint16 uint32 uint64 float16 float32 float64"
        for name in (*names.split(), "complex64", "complex128"):
            if hasattr(torch, name):
                _torch_np[getattr(torch, name)] = np.dtype(name)
    return _torch_np.get(dt)


# ------------------------------------------------------------------------------- info

_LIBRARIES = (
    ("numpy", "numpy", ("numpy",)),
    ("cupy", "cupy", ("cupy-cuda13x", "cupy-cuda12x", "cupy-cuda11x", "cupy")),
    ("torch", "torch", ("torch",)),
    ("jax", "jax", ("jax",)),
    ("numba", "numba", ("numba",)),
    ("numba-cuda", "numba_cuda", ("numba-cuda",)),
    ("pyopencl", "pyopencl", ("pyopencl",)),
    ("dask", "dask", ("dask",)),
    ("ml_dtypes", "ml_dtypes", ("ml-dtypes", "ml_dtypes")),
)


def array_libraries() -> list[tuple[str, str | None]]:
    """The array libraries installed here, with versions (None when unknown); nothing is
    imported (``importlib.util.find_spec`` and package metadata only)."""
    found = []
    for name, module, dists in _LIBRARIES:
        if importlib.util.find_spec(module) is None:
            continue
        version = None
        for dist in dists:
            try:
                version = md.version(dist)
                break
            except md.PackageNotFoundError:
                continue
        found.append((name, version))
    return found
