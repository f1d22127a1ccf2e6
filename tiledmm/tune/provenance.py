"""Where tiles come from, said plainly (issue 37): a plan's origin in one phrase (for
``tiledmm plan`` and the ``tiles_from`` of benchmark rows), and per backend and device what is
on record: measured ceilings (``tiledmm calibrate``), first-use and ``tiledmm tune`` entries in
the user database, the shipped table, or the model alone (``tiledmm info``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..core import tuning
from . import first_use

if TYPE_CHECKING:  # pragma: no cover
    from ..core.backend import Backend
    from ..device.spec import DeviceSpec

__all__ = ["ORIGINS", "origin", "device_record", "describe"]

#: what :func:`origin` answers, most measured first
ORIGINS = ("tiledmm tune", "first use", "shipped table", "shipped default", "model default",
           "requested")  # fmt: skip


def origin(source: str) -> str:
    """One of :data:`ORIGINS` for a ``Plan.geometry_source``."""
    s = source.strip().lower()
    if s.startswith("first use"):
        return "first use"
    if s.startswith("tuned "):
        return "tiledmm tune"
    for name in ("shipped table", "shipped default", "requested"):
        if s.startswith(name):
            return name
    return "model default"


def device_record(be: Backend, dev: DeviceSpec) -> dict[str, Any]:
    """What tiledmm has on record for ``be`` on ``dev``: calibration, user entries by origin
    (their shape classes), the shipped layer's answer and first use's settings."""
    mine = [e for e in tuning.user_entries() if e["backend"] == be.name
            and e.get("device") == dev.name]  # fmt: skip
    by = {"first use": set(), "tiledmm tune": set()}
    for e in mine:
        by["first use" if tuning.is_first_use(e) else "tiledmm tune"].add(
            f"{e['family']}/{e['dtype']}/{e['shape_class']}"
        )
    found = set()
    for fam in be.kernels:
        for dtype in [d for d in ("float32", "float64") if d in be.dtypes][:1]:
            try:
                geo = tuning.select(be, fam, dtype, dev, "square", user=False)
            except Exception:  # noqa: BLE001 - a plugin's table must not break `info`
                geo = None
            found.add(origin(geo.source) if geo is not None else "model default")
    layer = next((o for o in ORIGINS if o in found), "model default")
    conf = first_use.settings(dev.is_gpu)
    try:
        tunable = any(be.search_space(f, be.dtypes[0], dev) is not None for f in be.kernels)
    except Exception:  # noqa: BLE001
        tunable = False
    shipped = {"shipped table": f"shipped table for {dev.name}",
               "shipped default": f"shipped defaults for {dev.kind}"}  # fmt: skip
    return {
        "calibrated": bool(dev.ceilings_measured),
        "ceilings": dev.ceilings_source,
        "host_cost": dev.host_cost(be.name),
        "host_cost_source": dev.host_cost_source(be.name),
        "first_use_entries": sorted(by["first use"]),
        "tune_entries": sorted(by["tiledmm tune"]),
        "shipped": shipped.get(layer, "none (the model's tiles)"),
        "tunable": tunable,
        "first_use": {
            "enabled": conf.enabled and tunable,
            "budget": conf.budget,
            "shortlist": conf.shortlist,
        },
    }


def describe(be: Backend, dev: DeviceSpec) -> list[str]:
    """``tiledmm info``'s lines for ``be`` on ``dev`` (calibrated? tuned how?)."""
    r = device_record(be, dev)
    cal = (
        "calibrated (`tiledmm calibrate`)"
        if r["calibrated"]
        else ("not calibrated: ceilings estimated (`tiledmm calibrate` measures them)")
    )
    tuned = []
    for what, key in (("tiledmm tune", "tune_entries"), ("first use", "first_use_entries")):
        if r[key]:
            tuned.append(f"{what}: {', '.join(r[key])}")
    if not tuned:
        tuned.append("not tuned on this device")
    fu = r["first_use"]
    if not r["tunable"]:
        how = "not tunable (the backend declares no search space)"
    elif fu["enabled"]:
        how = (f"first use on: an untuned class's first call times up to {fu['shortlist']} "
               f"candidates, {fu['budget']:.3g} s (`tiledmm tune --quick` pre-warms)")  # fmt: skip
    else:
        how = f"first use off ({first_use.ENABLE}=0)"
    cal += f"; host cost {r['host_cost'] * 1e6:.3g} us per call ({r['host_cost_source']})"
    return [
        f"calibration: {cal}",
        f"tiles: {'; '.join(tuned)}; shipped: {r['shipped']}",
        f"tuning: {how}",
    ]
