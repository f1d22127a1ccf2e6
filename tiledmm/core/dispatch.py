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
shipped table: ``tiledmm.core.tuning.measured_families``), the ladder's top family among them
(a partial tune of the lower rungs alone does not displace an unmeasured top rung),
``kernel="auto"`` takes the fastest measured family instead (vectors: the gemv path of the
naive family where it measured faster; without measurements for the dtype, a vector takes the
gemv path wherever the naive family has one).
Tiles come from the database (the user's tunings, then the backend's shipped table), else the
planner's default; the plan's ``geometry_source`` says which. Plans are cached per backend,
device, problem and registry generation, in a bounded cache (``clear_caches`` after the
database changes: a new generation).

The engine enters this module once per product it has not seen: :func:`decide` (backend,
family, first-use hook, plan). The call's ``kernel`` and ``precision`` were validated before
(:mod:`tiledmm.core.semantics`); resolving the backend applies the kernel once (a named backend
without it raises, ``auto`` picks among those with it), and planning does not check it again.
:func:`plan_for` is the entry for other callers: it checks its arguments, then plans.
"""

from __future__ import annotations

import operator
from dataclasses import replace
from typing import Any, NamedTuple

import numpy as np

from ..planner import shapefit
from ..planner.geometry import KERNEL_FAMILIES, Geometry
from ..planner.make import default_geometry, plan_product
from ..planner.plans import Plan, PlanError
from ..util.lru import LRUCache
from . import registry, tuning
from .backend import Backend
from .semantics import check_kernel

__all__ = [
    "Decision",
    "decide",
    "plan",
    "plan_for",
    "choose_backend",
    "resolve_backend",
    "auto_kernel",
    "clear_caches",
    "tensor_core_family",
]

RUNG_MARGIN = 4.0
_plans: LRUCache[Plan] = LRUCache(4096)
_choices: LRUCache[Backend] = LRUCache(1024)


def clear_caches() -> None:
    """Forget cached plans and backend choices, and start a new registry generation, so every
    cache keyed on it expires too: the engine's and the torch path's hot paths (after ``tiledmm
    tune`` saved new tiles, say)."""
    _plans.clear()
    _choices.clear()
    registry.expire()


class Decision(NamedTuple):
    """What runs one product: the backend, the family asked of it (``kernel`` as the caller
    gave it, ``mma`` for a dtype the backend runs only on tensor cores), and the plan (None:
    the backend does not run this dtype; the array library computes it)."""

    be: Backend
    kernel: str
    plan: Plan | None


def decide(backend: str | Backend, kernel: str, a: Any, b: Any, m: int, n: int, k: int,
           dtype: str, batch: int = 1, precision: str | None = None,
           hook: Any = None) -> Decision:  # fmt: skip
    """The engine's one call for a product it has not seen: the backend
    (:func:`choose_backend`), the family (:func:`tensor_core_family`), then, unless the dtype is
    delegated, ``hook(be, m, n, k, dtype, kernel, batch)`` (first-use tuning) and the plan.
    ``kernel`` and ``precision`` come validated (:mod:`tiledmm.core.semantics`); that TF32 asks
    for the mma family is checked before planning, as :func:`plan_for` does."""
    be = choose_backend(backend, a, b, m, n, k, dtype, kernel)
    kernel = tensor_core_family(be, dtype, kernel)
    if dtype not in be.dtypes and kernel != "mma":
        return Decision(be, kernel, None)
    if hook is not None:
        hook(be, m, n, k, dtype, kernel, batch)
    _check_precision(precision, kernel)
    return Decision(be, kernel, _plan(be, m, n, k, dtype, kernel, None, None, batch, precision))


def auto_kernel(be: Backend, m: int, n: int, k: int, dtype: str, batch: int = 1,
                precision: str | None = None) -> str:  # fmt: skip
    """The family ``kernel="auto"`` runs on ``be`` for this product (one of a batch of
    ``batch``): the fastest measured family for its shape class where two or more are measured,
    the top plannable rung among them, else the ladder (see the module docstring).
    ``precision="tf32"`` asks for tensor cores on float32: only ``mma`` honours it."""
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
    times = {}
    for fam in rungs:
        try:
            times[fam] = _plan(be, m, n, k, dtype, fam, precision=precision).predicted_seconds
        except PlanError:  # a family whose tiles do not fit this device (or dtype) is no candidate
            continue
    if not times:
        return rungs[0]  # let plan_for raise the family's own PlanError
    cls = tuning.shape_class(m, n, k, batch)
    measured = tuning.measured_families(be.name, dtype, be.device(), cls, be)
    measured = {f: g for f, g in measured.items() if f in times
                and not _first_use_only(be, f, dtype, cls)}  # fmt: skip
    top = next(fam for fam in rungs if fam in times)
    if len(measured) >= 2 and top in measured:  # measurements overrule the model and the ladder
        return max(measured, key=lambda f: (measured[f], -rungs.index(f)))
    if cls == "vector" and "naive" in rungs and _is_gemv(be, m, n, k, dtype):
        return "naive"
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
        return bool(_plan(be, m, n, k, dtype, "naive").options.get("gemv"))
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
    on tensor cores (the mma family; never implied). Checks ``kernel`` (one ``be`` has) and
    ``precision`` first: the entry for callers other than :func:`decide`."""
    _check_precision(precision, kernel)
    check_kernel(kernel, be)
    return _plan(be, m, n, k, dtype, kernel, block_tile, thread_tile, batch, precision)


def _check_precision(precision: str | None, kernel: str) -> None:
    if precision not in (None, "tf32"):
        raise PlanError(f"precision must be None (IEEE) or 'tf32', not {precision!r}")
    if precision is not None and kernel not in ("auto", "mma"):
        raise PlanError(f"precision={precision!r} runs on tensor cores: use kernel 'mma' or "
                        f"'auto', not {kernel!r}")  # fmt: skip


def _plan(be, m, n, k, dtype, kernel, block_tile=None, thread_tile=None, batch=1,
          precision=None) -> Plan:  # fmt: skip
    """:func:`plan_for` of checked arguments, through the plan cache."""
    key = (registry.generation(), be.name, be.device_key(), m, n, k, dtype, kernel,
           block_tile, thread_tile, batch, precision)  # fmt: skip
    hit = _plans.get(key)
    if hit is None:
        hit = _plans.put(
            key, _make(be, m, n, k, dtype, kernel, block_tile, thread_tile, batch, precision)
        )
    return hit


def _make(be, m, n, k, dtype, kernel, block_tile, thread_tile, batch=1, precision=None,
          user=True) -> Plan:  # fmt: skip
    """The plan itself: ``kernel`` comes checked, or is "auto" (a family ``be`` has)."""
    fam = auto_kernel(be, m, n, k, dtype, batch, precision) if kernel == "auto" else kernel
    device = be.device()
    cls = tuning.shape_class(m, n, k, batch)
    geo = tuning.select(be, fam, dtype, device, cls, user=user)
    used = tuning.lookup(be.name, dtype, fam, device, cls) if user and geo is not None else None
    if tuning.is_first_use(used):
        if tuning.first_use_reaches(used, 2.0 * batch * m * n * k):
            geo = replace(geo, source=tuning.first_use_source(used, device))
        else:  # timed on a product far smaller: planned as if never tuned
            geo = tuning.select(be, fam, dtype, device, cls, user=False)
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
        return plan_product(m, n, k, dtype=dtype, kernel=fam, device=device, geometry=geo,
                            backend=be.name)  # fmt: skip
    except PlanError as exc:  # a user entry that does not fit this product: the next source
        if not (user and block_tile is None and thread_tile is None and tuning.is_user(geo)):
            raise
        tuning.warn_unplannable(geo, (m, n, k), exc)
        return _make(be, m, n, k, dtype, fam, None, None, batch, precision, user=False)


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
            check_kernel(kernel, be)  # a named backend without the kernel: its resolution fails
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
        try:  # (``found`` all have ``kernel``)
            t = _plan(item[1], m, n, k, dtype, kernel).predicted_seconds
        except Exception:  # noqa: BLE001 - a backend that cannot plan this is not a candidate
            t = float("inf")
        return (t, item[0])

    return min(enumerate(found), key=cost)[1]


def choose_backend(name: str | Backend, a: Any, b: Any, m: int, n: int, k: int, dtype: str,
                   kernel: str):  # fmt: skip
    """:func:`resolve_backend` for one call's operands, cached per kinds and problem; a Backend
    the caller already resolved by name (the array bridge's) is taken as it is, once it has the
    kernel."""
    if isinstance(name, Backend):
        if kernel != "auto":
            check_kernel(kernel, name)
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
    check_kernel(kernel)
    bt = _tile("block_tile", block_tile, 3, "BM, BN, BK")
    tt = _tile("thread_tile", thread_tile, 2, "TM, TN")
    be = resolve_backend(backend, dtype=dt, shape=(m, n, k), kernel=kernel)
    return plan_for(be, m, n, k, dt, kernel, bt, tt, precision=precision)


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
    check_kernel("mma", be)  # (mma_dtypes declared without the family)
    return "mma"

