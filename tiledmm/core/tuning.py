"""The tuning database: which tiles a backend runs per device, dtype, family and shape class.

Two layers. The *shipped* layer is what the backends ship (``backends/kernels/geometry.json``,
read by each backend's ``geometry()``: tuned tiles by device name, defaults by device kind).
The *user* layer is ``tuning.json`` in the cache directory (``TILEDMM_CACHE_DIR``, else the
platformdirs user cache), written by ``tiledmm tune``; its entries override the shipped ones.
``TILEDMM_IGNORE_SHIPPED_TUNING=1`` hides the shipped *device-specific* entries (the backends
are asked as if the device had no name on record: kind defaults only), for cold-start
experiments; the user layer still applies.

An entry: ``{"device", "vendor", "arch", "kind", "backend", "dtype", "family", "shape_class",
"block_tile", "thread_tile", "options", "measured": {"gflops", "date", ...}}``. Lookup: an entry
for the device's name before one for its architecture before one for its vendor (and kind);
the product's shape class before ``"square"`` (the general class). ``kernel="auto"`` compares
families by their measured GFLOP/s for the product's class (:func:`measured_families`: this
layer, then the backend's shipped measurements). A file that cannot be read
or parsed (however deeply nested), or an entry that breaks the schema, is ignored with one
:class:`TuningWarning`; so is an entry the planner or its backend refuses (checked when
:func:`select` first meets it, :mod:`tiledmm.core.tuning_check`), and the next source answers. Of
two entries with one key, the newest ``measured.date`` wins (then the later in the file).
Writers hold a lock across processes and replace the file atomically
(:mod:`tiledmm.util.atomicfile`), merging what another process saved meanwhile.
"""

from __future__ import annotations

import inspect
import json
import math
import threading
import warnings
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from ..device.spec import DeviceSpec
from ..planner.geometry import Geometry
from ..util import env
from ..util.atomicfile import atomic_write, locked
from ..util.store import CachedFile
from .tuning_check import describe, entry_problem, key_of, read_database, unusable

if TYPE_CHECKING:  # pragma: no cover
    from .backend import Backend

__all__ = [
    "shape_class", "TuningWarning", "IGNORE_SHIPPED", "ignore_shipped", "database_path",
    "user_entries", "lookup", "save_entries",
    "device_arch", "select", "measured_families", "export",
]  # fmt: skip

SKINNY_MN = 64  # M or N at most this: a thin output (skinny_mn)
SKINNY_K = 256  # K at most this: a short reduction (skinny_k)
ODD_MULTIPLE = 32  # a dimension that is not a multiple of this makes a product "odd"
IGNORE_SHIPPED = "TILEDMM_IGNORE_SHIPPED_TUNING"
FORMAT = 1


class TuningWarning(UserWarning):
    """The user tuning database (or an entry in it) was ignored; `tiledmm tune` rewrites it."""


def shape_class(m: int, n: int, k: int, batch: int = 1) -> str:
    """The class of a product: ``vector`` (M or N is 1), ``batched`` (batch > 1), ``skinny_mn``
    (M or N <= 64 and a quarter of the largest dimension or less), ``skinny_k`` (K <= 256 and
    a quarter of M and N or less), ``odd`` (a dimension not a multiple of 32), else ``square``
    (aligned; small cubes too; also the general fallback)."""
    if min(m, n) <= 1:
        return "vector"
    if batch > 1:
        return "batched"
    if min(m, n) <= SKINNY_MN and 4 * min(m, n) <= max(m, n, k):
        return "skinny_mn"
    if k <= SKINNY_K and 4 * k <= min(m, n):
        return "skinny_k"
    if m % ODD_MULTIPLE or n % ODD_MULTIPLE or k % ODD_MULTIPLE:
        return "odd"
    return "square"


def ignore_shipped() -> bool:
    """Whether ``TILEDMM_IGNORE_SHIPPED_TUNING`` asks to hide the shipped device tables."""
    return env.switch(IGNORE_SHIPPED, default=False)


def database_path() -> Path:
    """The user layer (``TILEDMM_CACHE_DIR`` overrides the platformdirs cache directory)."""
    return _DATABASE.path()


def device_arch(device: DeviceSpec) -> str:
    """An architecture label for fallbacks: 'NVIDIA cc 9.0', 'cpu avx512', else ''."""
    extra = dict(device.extra)
    if "compute capability" in extra:
        return f"{device.vendor} cc {extra['compute capability']}".strip()
    if not device.is_gpu and "simd" in extra:
        return f"cpu {extra['simd']}"
    return ""


def user_entries() -> list[dict]:
    """The user layer's valid entries (re-read when the file changes). Never raises: a corrupt
    file or entry is ignored with one :class:`TuningWarning` per state of the file."""
    return _DATABASE.load()


_DATABASE = CachedFile(
    "tuning.json",
    read_database,
    what="tuning database",
    category=TuningWarning,
    repair="`tiledmm tune` rewrites it",
    empty=[],
)


# --------------------------------------------------------------------------- lookup


def _rank(e: dict, device: DeviceSpec) -> int | None:
    """0: the device's own name, 1: its architecture, 2: its vendor (same kind); None: no."""
    if "kind" in e and e["kind"] != device.kind:
        return None
    if "device" in e:
        return 0 if e["device"] == device.name else None
    if "arch" in e:
        return 1 if e["arch"] == device_arch(device) and e["arch"] else None
    return 2 if e.get("vendor") and e["vendor"] == device.vendor else None


def _matches(backend: str, dtype: str, family: str | None, device: DeviceSpec,
             entries: list[dict]) -> list[tuple[int, dict]]:  # fmt: skip
    out = []
    for e in entries:
        if e["backend"] != backend or e["dtype"] != dtype:
            continue
        if family is not None and e["family"] != family:
            continue
        r = _rank(e, device)
        if r is not None:
            out.append((r, e))
    return out


def lookup(backend: str, dtype: str, family: str, device: DeviceSpec, cls: str,
           entries: list[dict] | None = None) -> dict | None:  # fmt: skip
    """The user entry for this product: the most specific device match, the product's shape
    class before ``square`` (a first-use entry of ``square`` serves its own class only: its
    tiles were timed on one square product); the newest of equals."""
    found = _matches(backend, dtype, family, device, user_entries() if entries is None else entries)
    classes = (cls, "square") if cls != "square" else ("square",)
    best = None
    for r, e in found:
        if e["shape_class"] not in classes or (e["shape_class"] != cls and is_first_use(e)):
            continue
        key = (r, classes.index(e["shape_class"]))
        if best is None or key < best[0] or (key == best[0] and _newer(e, best[1])):
            best = (key, e)
    return best[1] if best else None


def sibling_entries(backend: str, dtype: str, family: str, device: DeviceSpec, cls: str,
                    entries: list[dict] | None = None) -> list[dict]:  # fmt: skip
    """The user entries tuned on this very device for ``family`` and ``dtype`` by *other*
    backends (CuPy and OpenCL run one kernel source), the product's class first, newest first:
    `tiledmm tune` tries those of them its own space holds right after its defaults."""
    found = [e for e in (user_entries() if entries is None else entries)
             if e["backend"] != backend and e["dtype"] == dtype and e["family"] == family
             and e.get("device") == device.name]  # fmt: skip
    found.sort(key=lambda e: e["measured"]["date"], reverse=True)
    return sorted(found, key=lambda e: e["shape_class"] != cls)


def _newer(a: dict, b: dict) -> bool:
    return a["measured"]["date"] >= b["measured"]["date"]


USER_LAYER = "user tuning database"  # in the source of every geometry from that layer


def to_geometry(e: dict, device: DeviceSpec) -> Geometry:
    """An entry as a Geometry whose source says where it came from."""
    meas = e["measured"]
    where = "on this device" if e.get("device") == device.name else f"for {_who(e)}"
    src = (f"tuned {where}, {meas['date'][:10]} ({e['shape_class']} shapes, "
           f"{meas['gflops']:.4g} GFLOP/s measured; {USER_LAYER})")  # fmt: skip
    return replace(Geometry.from_dict(e), source=src)


def is_first_use(e: dict | None) -> bool:
    """Whether a user entry was written by first-use tuning (``measured.first_use``;
    :mod:`tiledmm.tune.first_use`), not by ``tiledmm tune``."""
    return bool(e and isinstance(e.get("measured"), dict) and e["measured"].get("first_use"))


#: a first-use entry serves calls of up to this many times the FLOPs it was timed on; past it
#: (not refined) dispatch plans as if untuned (H100: tiles timed on 512^3 ran 4096^3 at 0.64)
FIRST_USE_REACH = 8.0


def first_use_flops(e: dict) -> float:
    """FLOPs of the call a first-use entry was timed on (0 where it is not recorded)."""
    meas = e["measured"]
    return 2.0 * math.prod(meas.get("call_shape") or meas.get("shape") or (0,))


def first_use_reaches(e: dict, flops: float) -> bool:
    """Whether a first-use entry's tiles serve a call of ``flops`` (:data:`FIRST_USE_REACH`)."""
    tuned = first_use_flops(e)
    return tuned <= 0 or flops <= FIRST_USE_REACH * tuned


def first_use_source(e: dict, device: DeviceSpec) -> str:
    """A first-use entry's ``Plan.geometry_source``: what was timed, where and when."""
    meas = e["measured"]
    where = "on this device" if e.get("device") == device.name else f"for {_who(e)}"
    shape = "x".join(str(d) for d in meas.get("shape", ())[1:]) or "?"
    return (f"first use {where}, {meas['date'][:10]} (a short list timed on {shape}, "
            f"{meas['gflops']:.4g} GFLOP/s; user tuning database; `tiledmm tune` searches "
            "further)")  # fmt: skip


def is_user(geo: Geometry) -> bool:
    """Whether ``geo`` (or what shapefit made of it) came from the user layer."""
    return USER_LAYER in geo.source


def warn_unplannable(geo: Geometry, shape: tuple[int, int, int], exc: Exception) -> None:
    """One :class:`TuningWarning` per geometry: a user entry that passed its check does not
    plan this product (dispatch then uses the next source)."""
    token = ("plan", str(database_path()), geo.block_tile, geo.thread_tile, geo.options)
    with _warned_lock:
        fresh = token not in _warned
        _warned.add(token)
    if fresh:
        m, n, k = shape
        warnings.warn(
            f"tuning database {database_path()}: the entry of {geo.source} does not plan "
            f"{m}x{n}x{k} ({exc}); the next source (shipped table or model default) is used",
            TuningWarning,
            stacklevel=5,
        )


def _who(e: dict) -> str:
    return e.get("device") or e.get("arch") or e.get("vendor", "")


def select(be: Backend, family: str, dtype: str, device: DeviceSpec, cls: str, *,
           user: bool = True) -> Geometry | None:  # fmt: skip
    """The geometry for one product: the user layer (unless ``user=False``), else the backend's
    shipped table (with ``TILEDMM_IGNORE_SHIPPED_TUNING``: its kind defaults only), else None
    (the model default). The source says which: "tuned on this device, <date>", "shipped table
    for <name>", "shipped default for <kind>"."""
    e = _usable_lookup(be, dtype, family, device, cls) if user else None
    if e is not None:
        return to_geometry(e, device)
    cold = _shipped(be, family, dtype, cold_device(device), cls)
    if ignore_shipped():
        return _label(cold, f"shipped default for {device.kind} ({IGNORE_SHIPPED})", device)
    geo = _shipped(be, family, dtype, device, cls)
    if geo is None:
        return None
    if cold is None or _tiles(cold) != _tiles(geo):
        return _label(geo, f"shipped table for {device.name}", device)
    return _label(geo, f"shipped default for {device.kind}", device)


_warned: set[tuple] = set()
_warned_lock = threading.Lock()


def _usable_lookup(be: Backend, dtype: str, family: str, device: DeviceSpec,
                   cls: str) -> dict | None:  # fmt: skip
    """:func:`lookup` among the user entries ``be`` can run on ``device``: an entry the
    planner or the backend refuses is dropped with one :class:`TuningWarning` naming the file
    and the entry, and the next one answers."""
    entries = user_entries()
    while True:
        e = lookup(be.name, dtype, family, device, cls, entries)
        if e is None:
            return None
        why = unusable(e, be, device)
        if why is None:
            return e
        entries = [x for x in entries if x is not e]
        token = (str(database_path()), json.dumps(e, sort_keys=True, default=str), device.name)
        with _warned_lock:
            fresh = token not in _warned
            _warned.add(token)
        if fresh:
            warnings.warn(
                f"tuning database {database_path()}: entry {describe(e)} is ignored: {why}; "
                "the next source (shipped table or model default) is used; `tiledmm tune` "
                "rewrites it",
                TuningWarning,
                stacklevel=4,
            )


_takes_class: dict[type, bool] = {}


def _shipped(be: Backend, family: str, dtype: str, device: DeviceSpec, cls: str):
    """``be.geometry``, with the shape class for backends whose tables hold per-class entries
    (their ``geometry`` takes ``shape_class``; plugins written without it still work)."""
    t = type(be)
    if t not in _takes_class:
        _takes_class[t] = "shape_class" in inspect.signature(t.geometry).parameters
    if _takes_class[t]:
        return be.geometry(family, dtype, device, shape_class=cls)
    return be.geometry(family, dtype, device)


def cold_device(device: DeviceSpec) -> DeviceSpec:
    """``device`` under a name no table knows: backends answer with their kind defaults."""
    return replace(device, name=f"{device.kind} (name withheld: {IGNORE_SHIPPED})")


def _tiles(g: Geometry) -> tuple:
    return (g.block_tile, g.thread_tile, g.options)


def _label(geo: Geometry | None, what: str, device: DeviceSpec) -> Geometry | None:
    if geo is None:
        return None
    src = geo.source if geo.source not in ("", "default") else ""
    src = src.replace(cold_device(device).name, device.name)
    return replace(geo, source=f"{what}: {src}" if src else what)


def measured_families(backend: str, dtype: str, device: DeviceSpec, cls: str,
                      be: Backend | None = None) -> dict[str, float]:  # fmt: skip
    """Measured GFLOP/s per family for this backend, device, dtype and exact shape class: the
    user layer's (the most specific device match per family), then, for families it lacks,
    the backend's shipped measurements where ``be`` has ``measured_gflops(family, dtype,
    device, shape_class)`` (the shared-source backends read ``geometry.json``; hidden by
    ``TILEDMM_IGNORE_SHIPPED_TUNING``)."""
    best: dict[str, tuple[int, dict]] = {}
    for r, e in _matches(backend, dtype, None, device, user_entries()):
        if e["shape_class"] != cls:
            continue
        old = best.get(e["family"])
        if old is None or r < old[0] or (r == old[0] and _newer(e, old[1])):
            best[e["family"]] = (r, e)
    out = {f: e["measured"]["gflops"] for f, (_, e) in best.items()}
    ask = be.measured_gflops if be is not None else None
    if ask is None or ignore_shipped():
        return out
    for fam in be.kernels:
        if fam in out:
            continue
        try:
            g = ask(fam, dtype, device, cls)
        except Exception:  # noqa: BLE001 - a plugin's table must not break planning
            g = None
        if isinstance(g, int | float) and math.isfinite(g) and g > 0:
            out[fam] = float(g)
    return out


# --------------------------------------------------------------------------- writing


def save_entries(new: list[dict], path: Path | None = None) -> Path:
    """Add ``new`` to the user layer, replacing entries with the same key (device, backend,
    dtype, family, shape class; of duplicates in ``new`` the last); invalid entries of a
    corrupt file are dropped. Invalid new entries raise. The file is read, merged and replaced
    under a lock across processes (what another process saved meanwhile stays), atomically."""
    for e in new:
        why = entry_problem(e)
        if why:
            raise ValueError(f"tuning entry not saved: {why}")
    path = path or database_path()
    mine = list({key_of(e): e for e in new}.values())
    with locked(path):
        old, _ = read_database(path)
        keys = {key_of(e) for e in mine}
        write(path, [e for e in old if key_of(e) not in keys] + mine)
    return path


def write(path: Path, entries: list[dict], about: str = "") -> None:
    """Write a database file atomically (temporary file, fsync, rename)."""
    data = {"format": FORMAT, "about": about or __doc__.splitlines()[0], "entries": entries}
    atomic_write(path, json.dumps(data, indent=1, sort_keys=True, allow_nan=False) + "\n")


def export(path: Path, device: DeviceSpec | None = None, backend: str | None = None) -> int:
    """Write the user layer's entries (for one device / backend if given) to ``path``, a file
    in the user database's format to contribute back; returns how many were written."""
    chosen = [e for e in user_entries()
              if (device is None or _rank(e, device) == 0)
              and (backend is None or e["backend"] == backend)]  # fmt: skip
    about = (
        "tiledmm tuning results (`tiledmm tune --export`): entries for the geometry database; "
        "each carries the device, backend, shape class and measured GFLOP/s"
    )
    write(Path(path), chosen, about)
    return len(chosen)
