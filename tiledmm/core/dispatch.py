"""Dispatch: which backend and kernel family run a product, and the plan cache.

The layer between the registry (which backends exist) and the pure planner (what a plan on a
device looks like). ``backend="auto"`` keeps the data where it lives: among the available
backends that take the operands (built-in and trusted ones first, see the registry's trust
policy) it plans each and takes the lowest predicted time, ties going to priority.
``kernel="auto"`` takes the highest rung of the ladder the backend implements (register, then
tiled, then naive) unless the model predicts it more than ``RUNG_MARGIN`` times slower than the
best family (a 512^3 CPU register tile on a 64^3 product: 99.8% padding). The committed results
rank register > tiled > naive on every device and large shape, while the model's errors
between families reach 2-3x (tiled predicted 2x too fast, naive 3-6x too slow), so only a
larger predicted gap overrules the ladder. Where measurements of two or more families exist
for this backend, device, dtype and shape class (the user tuning database, else the backend's
shipped table: ``tiledmm.core.tuning.measured_families``), ``kernel="auto"`` takes the fastest
measured family instead (vectors: the gemv path of the naive family where it measured faster;
without measurements for the dtype, a vector takes the gemv path wherever the naive family has
one).
Tiles come from the database (the user's tunings, then the backend's shipped table), else the
planner's default; the plan's ``geometry_source`` says which. Plans are cached per backend,
device, problem and registry generation, in a bounded cache (``clear_caches`` after the
database changes).
"""

from __future__ import annotations

import operator
from dataclasses import replace
from typing import Any

import numpy as np

from ..planner import shapefit
from ..planner.geometry import KERNEL_FAMILIES, Geometry
from ..planner.make import default_geometry, make_plan
from ..planner.plans import Plan, PlanError
from ..util.lru import LRUCache
from . import registry, tuning
from .backend import Backend

__all__ = [
    "plan",
    "plan_for",
    "resolve_backend",
    "auto_kernel",
    "clear_caches",
    "check_kernel_name",
    "check_precision",
    "run_batch",
    "tensor_core_family",
]

RUNG_MARGIN = 4.0
_plans: LRUCache[Plan] = LRUCache(4096)
_choices: LRUCache[Backend] = LRUCache(1024)


_epoch = 0


def clear_caches() -> None:
    """Forget cached plans and backend choices (they also expire with the registry); the API's
    hot path expires with them (after ``tiledmm tune`` saved new tiles, say)."""
    global _epoch
    _epoch += 1
    _plans.clear()
    _choices.clear()


def cache_token() -> tuple[int, int]:
    """What cached plans are valid for: the registry's generation and this module's epoch."""
    return (registry.generation(), _epoch)


def auto_kernel(be: Backend, m: int, n: int, k: int, dtype: str, batch: int = 1,
                precision: str | None = None) -> str:  # fmt: skip
    """The family ``kernel="auto"`` runs on ``be`` for this product (one of a batch of
    ``batch``): the fastest measured family for its shape class where two or more are measured,
    else the ladder (see the module docstring). ``precision="tf32"`` asks for tensor cores on
    float32: only ``mma`` honours it."""
    rungs = [fam for fam in reversed(KERNEL_FAMILIES) if fam in be.kernels]
    if precision is not None:
        rungs = [fam for fam in rungs if fam == "mma"]
        if not rungs:
            raise PlanError(f"precision={precision!r} runs on tensor cores (kernel 'mma'), "
                            f"which backend {be.name!r} does not have")  # fmt: skip
    if not rungs:
        raise PlanError(f"backend {be.name!r} declares no kernels")
    if len(rungs) == 1:
        return rungs[0]
    cls = tuning.shape_class(m, n, k, batch)
    measured = tuning.measured_families(be.name, dtype, be.device(), cls, be)
    measured = {f: g for f, g in measured.items() if f in rungs
                and not _first_use_only(be, f, dtype, cls)}  # fmt: skip
    if len(measured) >= 2:  # measurements overrule the model and the ladder
        return max(measured, key=lambda f: (measured[f], -rungs.index(f)))
    if cls == "vector" and "naive" in rungs and _is_gemv(be, m, n, k, dtype):
        return "naive"
    times = {}
    for fam in rungs:
        try:
            times[fam] = plan_for(be, m, n, k, dtype, fam, precision=precision).predicted_seconds
        except PlanError:  # a family whose tiles do not fit this device (or dtype) is no candidate
            continue
    if not times:
        return rungs[0]  # let plan_for raise the family's own PlanError
    best = min(times.values())
    return next(fam for fam in rungs if fam in times and times[fam] <= RUNG_MARGIN * best)


def _first_use_only(be: Backend, family: str, dtype: str, cls: str) -> bool:
    """Whether the family's measurement for this class is a first-use entry: timed on one
    caller's shape, it ranks tiles within the family, not families against each other."""
    e = tuning.lookup(be.name, dtype, family, be.device(), cls)
    return bool(e and e["shape_class"] == cls and tuning.is_first_use(e))


def _is_gemv(be: Backend, m: int, n: int, k: int, dtype: str) -> bool:
    """Whether ``be``'s naive family runs this product on its gemv path: a vector product
    reads its matrix once at DRAM speed there, where every tiled family pads the short side
    to a block (measured on the H200, float32, all three GPU backends: 0.57-0.90 of the DRAM
    roofline on gemv, 0.07-0.39 on register; float64 took mma by the ladder: 0.12)."""
    try:
        return bool(plan_for(be, m, n, k, dtype, "naive").options.get("gemv"))
    except PlanError:
        return False


def plan_for(
    be: Backend,
    m: int,
    n: int,
    k: int,
    dtype: str,
    kernel: str = "auto",
    block_tile: tuple[int, ...] | None = None,
    thread_tile: tuple[int, ...] | None = None,
    batch: int = 1,
    precision: str | None = None,
) -> Plan:
    """The (cached) plan of one product (of a batch of ``batch``) on ``be``'s current device;
    the batch size only decides the shape class, hence the tiles. ``precision="tf32"``: float32
    on tensor cores (the mma family; never implied)."""
    key = (cache_token(), be.name, be.device_key(), m, n, k, dtype, kernel,
           block_tile, thread_tile, batch, precision)  # fmt: skip
    hit = _plans.get(key)
    if hit is None:
        hit = _plans.put(
            key, _make(be, m, n, k, dtype, kernel, block_tile, thread_tile, batch, precision)
        )
    return hit


def _make(be, m, n, k, dtype, kernel, block_tile, thread_tile, batch=1, precision=None,
          user=True) -> Plan:  # fmt: skip
    if precision not in (None, "tf32"):
        raise PlanError(f"precision must be None (IEEE) or 'tf32', not {precision!r}")
    if precision is not None and kernel not in ("auto", "mma"):
        raise PlanError(f"precision={precision!r} runs on tensor cores: use kernel 'mma' or "
                        f"'auto', not {kernel!r}")  # fmt: skip
    fam = auto_kernel(be, m, n, k, dtype, batch, precision) if kernel == "auto" else kernel
    _check_kernel(be, fam)
    device = be.device()
    cls = tuning.shape_class(m, n, k, batch)
    geo = tuning.select(be, fam, dtype, device, cls, user=user)
    used = tuning.lookup(be.name, dtype, fam, device, cls) if user and geo is not None else None
    if tuning.is_first_use(used):
        geo = replace(geo, source=tuning.first_use_source(used, device))
    geo = geo or replace(default_geometry(fam, dtype, device), source="model default")
    if precision is not None:  # only ever from the caller, never from a table
        geo = replace(
            geo, options=tuple(sorted({**dict(geo.options), "precision": precision}.items()))
        )
    if block_tile is None and thread_tile is None:
        geo = shapefit.for_product(geo, fam, m, n, k, device, cls, batch, dtype, be.name)
    else:  # requested tiles: the table's options (split_k resolved for this product)
        base = shapefit.resolve_split(geo, m, n, k, device.compute_units, batch)
        bt = block_tile or base.block_tile
        tt = thread_tile or (base.thread_tile if fam in ("register", "mma") else (1, 1))
        geo = Geometry(tuple(bt), tuple(tt), base.options, None, "requested")
    try:
        return make_plan(m, n, k, dtype=dtype, kernel=fam, device=device, geometry=geo,
                         backend=be.name)  # fmt: skip
    except PlanError as exc:  # a user entry that does not fit this product: the next source
        if not (user and block_tile is None and thread_tile is None and tuning.is_user(geo)):
            raise
        tuning.warn_unplannable(geo, (m, n, k), exc)
        return _make(be, m, n, k, dtype, fam, None, None, batch, precision, user=False)


def _check_kernel(be: Backend, kernel: str) -> None:
    if kernel not in be.kernels:
        raise PlanError(
            f"backend {be.name!r} has no {kernel!r} kernel; it has {', '.join(be.kernels)}"
        )


def resolve_backend(
    name: str,
    *,
    dtype: str = "float32",
    shape: tuple[int, int, int] = (1, 1, 1),
    sample: Any = None,
    kernel: str = "auto",
) -> Backend:
    """A backend for a name, an alias or ``"auto"`` (see the module docstring)."""
    if name != "auto":
        be = registry.get_backend(name)
        if kernel != "auto":
            _check_kernel(be, kernel)
        return be
    probe = np.empty((0, 0)) if sample is None else sample
    want = None if kernel == "auto" else kernel
    found = registry.candidates(probe, want)
    if not found:
        what = f" with a {kernel!r} kernel" if want else ""
        raise RuntimeError(
            f"no available backend{what} takes {type(probe).__name__} arrays; see `tiledmm info`"
        )
    if len(found) == 1:
        return found[0]
    m, n, k = shape

    def cost(item: tuple[int, Backend]) -> tuple[float, int]:
        try:
            t = plan_for(item[1], m, n, k, dtype, kernel).predicted_seconds
        except Exception:  # noqa: BLE001 - a backend that cannot plan this is not a candidate
            t = float("inf")
        return (t, item[0])

    return min(enumerate(found), key=cost)[1]


def choose_backend(name: str | Backend, a: Any, b: Any, m: int, n: int, k: int, dtype: str,
                   kernel: str):  # fmt: skip
    """:func:`resolve_backend` for one call's operands, cached per kinds and problem; a Backend
    the caller already resolved (the array bridge's) is taken as it is."""
    if isinstance(name, Backend):
        return name
    key = (registry.generation(), name, kernel, type(a), type(b))
    if name == "auto":
        key += (m, n, k, dtype)
    be = _choices.get(key)
    if be is None:
        sample = b if isinstance(a, np.ndarray) else a
        be = _choices.put(
            key, resolve_backend(name, dtype=dtype, shape=(m, n, k), sample=sample, kernel=kernel)
        )
    return be


def _size(label: str, v: Any) -> int:
    try:
        if isinstance(v, bool | np.bool_):
            raise TypeError
        out = operator.index(v)
    except TypeError:
        raise PlanError(f"{label} must be a non-negative integer, got {v!r}") from None
    if out < 0:
        raise PlanError(f"{label} must be a non-negative integer, got {v!r}")
    return out


def _tile(label: str, v: Any, n: int, names: str) -> tuple[int, ...] | None:
    if v is None:
        return None
    try:
        t = tuple(_size(label, x) for x in v) if not isinstance(v, str) else ()
    except (TypeError, PlanError):
        t = ()
    if len(t) != n or min(t) < 1:
        raise PlanError(f"{label} must be {n} positive integers ({names}), got {v!r}")
    return t


def plan(
    m: int,
    n: int,
    k: int,
    *,
    dtype: Any = "float32",
    backend: str = "auto",
    kernel: str = "auto",
    block_tile: tuple[int, int, int] | None = None,
    thread_tile: tuple[int, int] | None = None,
    precision: str | None = None,
) -> Plan:
    """Plan C[m x n] = A[m x k] @ B[k x n] on a backend's current device.

    ``backend="auto"`` plans for the backend ``matmul`` would pick for host arrays;
    ``kernel="auto"`` for the family ``matmul`` would run (see :func:`auto_kernel`);
    ``precision="tf32"``: float32 on tensor cores (``mma``), only when asked for.
    """
    m, n, k = _size("m", m), _size("n", n), _size("k", k)
    try:
        dt = np.dtype(dtype).name
    except TypeError:
        raise PlanError(f"dtype {dtype!r} is not a NumPy dtype (try float32 or float64)") from None
    check_kernel_name(kernel)
    bt = _tile("block_tile", block_tile, 3, "BM, BN, BK")
    tt = _tile("thread_tile", thread_tile, 2, "TM, TN")
    be = resolve_backend(backend, dtype=dt, shape=(m, n, k), kernel=kernel)
    return plan_for(be, m, n, k, dt, kernel, bt, tt, precision=precision)


def check_kernel_name(kernel: str) -> None:
    """A clear error for a kernel name that is neither ``"auto"`` nor a family."""
    if kernel != "auto" and kernel not in KERNEL_FAMILIES:
        fams = ", ".join(KERNEL_FAMILIES)
        raise PlanError(f"kernel must be 'auto' or one of {fams}, not {kernel!r}")


def check_precision(precision: str | None) -> None:
    """``matmul``'s ``precision``: None (IEEE) or "tf32"."""
    if precision not in (None, "tf32"):
        raise ValueError(f"precision must be None (IEEE) or 'tf32', not {precision!r}")


def tensor_core_family(be: Backend, dtype: str, kernel: str) -> str:
    """The family for ``dtype`` on ``be`` when the backend runs that dtype only on tensor cores
    (float16/bfloat16 listed in its ``mma_dtypes``, not its ``dtypes``): ``mma``, and a clear
    error for another family asked by name; any other dtype keeps ``kernel``. (TF32 is
    ``precision``'s business: :func:`plan_for`.)"""
    if dtype in be.dtypes or dtype not in be.mma_dtypes:
        return kernel
    if kernel not in ("auto", "mma"):
        raise ValueError(f"{dtype} runs on tensor cores only (kernel 'mma' or 'auto'); backend "
                         f"{be.name!r} has no {kernel!r} kernel for it")  # fmt: skip
    return "mma"


def run_batch(be: Backend, plan: Plan, A, B, R, batch, pa, pb) -> None:
    """``R = A @ B`` over ``batch`` (:func:`tiledmm.core.semantics.matmul_shapes`' batch and the
    operands' padded batch shapes ``pa``, ``pb``; 1 = broadcast): the backend's
    ``run_batched`` (one launch on the GPU backends), else ``run`` per matrix."""
    if not batch:
        be.run(plan, A, B, R)
        return
    if be.run_batched(plan, A, B, R):
        return
    off_a, off_b = len(batch) - (A.ndim - 2), len(batch) - (B.ndim - 2)
    for idx in np.ndindex(*batch):
        ia = tuple(0 if pa[d] == 1 else i for d, i in enumerate(idx))[off_a:]
        ib = tuple(0 if pb[d] == 1 else i for d, i in enumerate(idx))[off_b:]
        be.run(plan, A[ia], B[ib], R[idx])
