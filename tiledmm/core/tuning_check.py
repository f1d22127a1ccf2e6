"""The user tuning database's entries checked (``tiledmm.core.tuning`` re-exports what it needs).

The schema (:func:`entry_problem`) and the file (:func:`read_database`: unreadable, not JSON,
nested too deeply to parse, or a bad entry: a problem each, never an exception). An entry can
pass the schema (types, positive sizes) and still be one the planner or the backend refuses:
a thread tile that does not divide the block (``[7, 5]``), a vector width the kernel has no
type for, a block of 2^20. :func:`unusable` says why, trying what dispatch does with it: the
geometry built, fitted to a product of the entry's shape class (``shapefit.for_product``) and
planned (``make_plan``) on the device, then the backend's own check of the plan
(``Backend.plan_problem``, the kernels' constraints). The tuning layer drops such an entry
with one ``TuningWarning`` naming the file and the entry, and falls back to the next source (a
less specific user entry, the shipped table, the model default).

Duplicate keys (one device/arch/vendor, backend, dtype, family and shape class):
:func:`dedupe` keeps the newest ``measured.date``, the later one in the file on equal dates,
and names the ones it drops. ``save_entries`` never writes two.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..planner.geometry import KERNEL_FAMILIES, Geometry
from ..util.lru import LRUCache

if TYPE_CHECKING:  # pragma: no cover
    from ..device.spec import DeviceSpec
    from .backend import Backend

__all__ = ["SHAPE_CLASSES", "CHECK_SHAPES", "entry_problem", "read_database", "unusable", "dedupe",
           "key_of", "describe"]  # fmt: skip

#: The shape classes, most specific first (issue 11's per-class geometry uses the same names).
SHAPE_CLASSES = ("vector", "batched", "skinny_mn", "skinny_k", "odd", "square")

#: the product (batch, M, N, K) an entry of each shape class is planned on when it is checked
CHECK_SHAPES = {
    "square": (1, 1024, 1024, 1024), "odd": (1, 1001, 999, 1003),
    "skinny_k": (1, 1024, 1024, 64), "skinny_mn": (1, 1024, 48, 1024),
    "batched": (8, 256, 256, 256), "vector": (1, 1024, 1, 1024),
}  # fmt: skip

_verdicts: LRUCache[tuple[str | None]] = LRUCache(1024)


def _ints(v: Any, n: int) -> bool:
    if not isinstance(v, list | tuple) or len(v) != n:
        return False
    return all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in v)


def entry_problem(e: Any) -> str | None:
    """Why ``e`` is not a valid database entry (None when it is)."""
    if not isinstance(e, dict):
        return f"it is a {type(e).__name__}, not an object"
    if not any(isinstance(e.get(k), str) and e[k] for k in ("device", "arch", "vendor")):
        return "it names no device, arch or vendor"
    for key in ("backend", "dtype"):
        if not isinstance(e.get(key), str) or not e[key]:
            return f"{key} is {e.get(key)!r}, not a name"
    if e.get("family") not in KERNEL_FAMILIES:
        return f"family is {e.get('family')!r}, not one of {', '.join(KERNEL_FAMILIES)}"
    if e.get("shape_class") not in SHAPE_CLASSES:
        return f"shape_class is {e.get('shape_class')!r}, not one of {', '.join(SHAPE_CLASSES)}"
    if not _ints(e.get("block_tile"), 3):
        return f"block_tile is {e.get('block_tile')!r}, not 3 positive integers"
    if "thread_tile" in e and not _ints(e["thread_tile"], 2):
        return f"thread_tile is {e['thread_tile']!r}, not 2 positive integers"
    opts = e.get("options", {})
    if not isinstance(opts, dict) or not all(
        isinstance(v, int | float | str | bool) for v in opts.values()
    ):
        return "options is not an object of numbers, strings and booleans"
    meas = e.get("measured")
    if not isinstance(meas, dict):
        return "measured is missing (an object with gflops and date)"
    g = meas.get("gflops")
    if not isinstance(g, int | float) or isinstance(g, bool) or not math.isfinite(g) or g <= 0:
        return f"measured.gflops is {g!r}, not a positive finite number"
    if not isinstance(meas.get("date"), str):
        return f"measured.date is {meas.get('date')!r}, not a string"
    return None


def read_database(path: Path) -> tuple[list[dict], list[str]]:
    """(valid entries, problems) of one database file; a missing file is empty, not a problem."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return [], []
    except (OSError, UnicodeDecodeError) as exc:
        return [], [f"it cannot be read ({getattr(exc, 'strerror', None) or exc})"]
    try:
        data = json.loads(text)
    except RecursionError:
        return [], ["it is not valid JSON (nested too deeply to parse)"]
    except ValueError as exc:
        return [], [f"it is not valid JSON ({exc})"]
    if not isinstance(data, dict) or not isinstance(data.get("entries"), list):
        return [], ["it is not an object with an 'entries' list"]
    good, problems = [], []
    for i, e in enumerate(data["entries"]):
        try:
            why = entry_problem(e)
        except Exception as exc:  # noqa: BLE001 - RecursionError, odd types: not an entry
            why = f"it cannot be checked ({type(exc).__name__})"
        if why:
            problems.append(f"entry {i} is ignored: {why}")
        else:
            good.append((i, e))
    kept, dropped = dedupe(good)
    return kept, problems + dropped


def key_of(e: dict) -> tuple:
    """What makes two entries the same: device (or arch, vendor), backend, dtype, family and
    shape class."""
    return (e.get("device"), e.get("arch"), e.get("vendor"), e["backend"], e["dtype"],
            e["family"], e["shape_class"])  # fmt: skip


def describe(e: dict) -> str:
    """An entry in words: ``opencl/register/float32/square for AMD EPYC: 64x64x1/8x8``."""
    who = e.get("device") or e.get("arch") or e.get("vendor") or "?"
    bt = "x".join(str(x) for x in e.get("block_tile", ()))
    tt = "x".join(str(x) for x in e.get("thread_tile", ()))
    return (f"{e.get('backend')}/{e.get('family')}/{e.get('dtype')}/{e.get('shape_class')} "
            f"for {who}: {bt}" + (f"/{tt}" if tt else ""))  # fmt: skip


def dedupe(entries: list[tuple[int, dict]]) -> tuple[list[dict], list[str]]:
    """(entries without duplicate keys, a problem per dropped one) of ``(position in the
    file, entry)`` pairs: the newest ``measured.date`` of a key wins, on equal dates the later
    entry in the file."""
    winner: dict[tuple, tuple[int, dict]] = {}
    for i, e in entries:
        old = winner.get(key_of(e))
        if old is None or str(e["measured"]["date"]) >= str(old[1]["measured"]["date"]):
            winner[key_of(e)] = (i, e)
    keep = {i for i, _ in winner.values()}
    problems = [
        f"entry {i} ({describe(e)}) is ignored: entry {winner[key_of(e)][0]} has the same key "
        "and is newer or later in the file (the newest measured.date wins, then the later)"
        for i, e in entries
        if i not in keep
    ]
    return [e for i, e in entries if i in keep], problems


def unusable(e: dict, be: Backend, device: DeviceSpec) -> str | None:
    """Why backend ``be`` cannot run entry ``e`` on ``device`` (None when it can); cached per
    entry, backend and device. Never raises."""
    token = (json.dumps(e, sort_keys=True, default=str), be.name, device.name, id(be))
    hit = _verdicts.get(token)
    if hit is None:
        hit = _verdicts.put(token, (_why(e, be, device),))
    return hit[0]


def _why(e: dict, be: Backend, device: DeviceSpec) -> str | None:
    from ..planner import shapefit
    from ..planner.make import make_plan
    from ..planner.plans import PlanError

    try:
        geo = Geometry.from_dict(e)
        b, m, n, k = CHECK_SHAPES.get(e["shape_class"], CHECK_SHAPES["square"])
        fam, dt = e["family"], e["dtype"]
        if fam not in be.kernels:
            return f"backend {be.name!r} has no {fam!r} kernel"
        geo = shapefit.for_product(geo, fam, m, n, k, device, e["shape_class"], b, dt, be.name)
        plan = make_plan(m, n, k, dtype=dt, kernel=fam, device=device, geometry=geo,
                         backend=be.name)  # fmt: skip
    except PlanError as exc:
        return f"the planner refuses it on {device.name} ({exc})"
    except Exception as exc:  # noqa: BLE001 - whatever an odd entry does, it is not usable
        return f"it cannot be planned ({type(exc).__name__}: {exc})"
    check = getattr(be, "plan_problem", None)
    if check is None:
        return None
    try:
        why = check(plan)
    except Exception as exc:  # noqa: BLE001 - a plugin's check that crashes refuses it
        why = f"{type(exc).__name__}: {exc}"
    return f"backend {be.name!r} refuses it ({why})" if why else None
