"""The calibration cache: measured ceilings per device name and each backend's per-call host
cost on it (``tiledmm calibrate`` and first-use calibration write it,
``DeviceSpec.with_calibration`` reads it), validated record by record; a corrupt file or
record is ignored with one warning that says why and how to repair it. Split out of
``tiledmm.device.spec`` (import these names from here).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ..util.atomicfile import atomic_write, locked
from ..util.store import CachedFile

__all__ = [
    "CalibrationWarning",
    "calibration_path",
    "calibration_problem",
    "read_calibration",
    "load_calibration",
    "save_calibration",
    "has_ceilings",
]


class CalibrationWarning(UserWarning):
    """The calibration cache (or a record in it) was ignored; `tiledmm calibrate` rewrites it."""


_REPAIR = "run `tiledmm calibrate` to measure again and rewrite it"


def calibration_path() -> Path:
    """Where measured ceilings live (``TILEDMM_CACHE_DIR`` overrides the platformdirs default)."""
    return _CALIBRATION.path()


def _rate(value: Any) -> bool:
    """A ceiling: a positive finite number (not a bool, not a string)."""
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )


def calibration_problem(record: Any) -> str | None:
    """Why ``record`` is not a usable calibration record (None when it is).

    Schema: ``{"peak_flops": {dtype: FLOP/s, ...}, "bandwidth": bytes/s, "date": str,
    "method": str, ...}``; every rate positive and finite, at least one dtype; optional
    ``"levels": {level: bytes/s}``, ``"fma_peaks": {dtype: FLOP/s}`` (per-level calibration,
    same rule), ``"sustained"`` (0 < x <= 1) and ``"fma_accumulators"`` (a count >= 1: the
    vector FMA chains that fill a CPU core's pipes, and ``"fma_probe"``, their float32 FLOP/s
    on every core, both from ``tiledmm.tune.calibrate.measure_fma_accumulators``); optional
    ``"host_cost": {backend: {"seconds": s, ...}}``, each backend's measured per-call host
    cost (s >= 0, finite), and
    ``"loop_costs": {backend: {"step": s, "column": s}}``, its register loop's seconds per
    K step and per column on one core (positive; ``measure_loop_costs``). A
    record of host costs alone (no ``peak_flops`` and no ``bandwidth``: a first-use
    calibration that ran out of time before the ceilings) is valid too. Other keys free
    (older files stay valid).
    """
    if not isinstance(record, dict):
        return f"it is a {type(record).__name__}, not an object"
    why = _loop_cost_problem(record.get("loop_costs", {}))
    if why:
        return why
    if "host_cost" in record:
        why = _host_cost_problem(record["host_cost"])
        if why:
            return why
        if "peak_flops" not in record and "bandwidth" not in record:
            return _common_problem(record)
    peaks = record.get("peak_flops")
    if not isinstance(peaks, dict) or not peaks:
        return "peak_flops is missing or not an object of {dtype: FLOP/s}"
    for dtype, value in peaks.items():
        if not _rate(value):
            return f"peak_flops[{dtype!r}] is {value!r}, not a positive finite number"
    if "bandwidth" not in record:
        return "bandwidth is missing"
    if not _rate(record["bandwidth"]):
        return f"bandwidth is {record['bandwidth']!r}, not a positive finite number"
    for key in ("levels", "fma_peaks"):
        if key not in record:
            continue
        table = record[key]
        if not isinstance(table, dict):
            return f"{key} is {table!r}, not an object of positive rates"
        for name, value in table.items():
            if not _rate(value):
                return f"{key}[{name!r}] is {value!r}, not a positive finite number"
    if "sustained" in record and not (_rate(record["sustained"]) and record["sustained"] <= 1):
        return f"sustained is {record['sustained']!r}, not a fraction in (0, 1]"
    if "fma_probe" in record and not _rate(record["fma_probe"]):
        return f"fma_probe is {record['fma_probe']!r}, not a positive finite number"
    acc = record.get("fma_accumulators", 1)
    if not (isinstance(acc, int) and not isinstance(acc, bool) and acc >= 1):
        return f"fma_accumulators is {acc!r}, not a count >= 1"
    return _common_problem(record)


def _common_problem(record: dict) -> str | None:
    for key in ("date", "method"):
        if key in record and not isinstance(record[key], str):
            return f"{key} is {record[key]!r}, not a string"
    return None


def _loop_cost_problem(table: Any) -> str | None:
    """Why ``table`` is not a ``{backend: {"step": s, "column": s}}`` (None if it is)."""
    if not isinstance(table, dict):
        return f"loop_costs is {table!r}, not an object of {{backend: {{'step', 'column'}}}}"
    for name, entry in table.items():
        if not (isinstance(entry, dict) and all(_rate(entry.get(k)) for k in ("step", "column"))):
            return f"loop_costs[{name!r}] is {entry!r}, not positive 'step' and 'column' seconds"
    return None


def _host_cost_problem(table: Any) -> str | None:
    """Why ``table`` is not a ``{backend: {"seconds": s, ...}}`` of host costs (None if it is)."""
    if not isinstance(table, dict):
        return f"host_cost is {table!r}, not an object of {{backend: {{'seconds': s}}}}"
    for name, entry in table.items():
        value = entry.get("seconds") if isinstance(entry, dict) else None
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if not (ok and math.isfinite(value) and value >= 0):
            return f"host_cost[{name!r}] is {entry!r}, not an object with seconds >= 0"
    return None


def has_ceilings(record: dict) -> bool:
    """Whether a valid ``record`` holds measured ceilings (not host costs alone)."""
    return "peak_flops" in record


def read_calibration(path: Path) -> tuple[dict, list[str]]:
    """(valid records by device name, problems): a file that cannot be read or parsed, or is
    not an object, gives no records and one problem; a bad record is dropped and named."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}, []
    except (OSError, UnicodeDecodeError) as exc:
        return {}, [f"it cannot be read ({getattr(exc, 'strerror', None) or exc})"]
    try:
        data = json.loads(text)
    except RecursionError:
        return {}, ["it is not valid JSON (nested too deeply to parse)"]
    except ValueError as exc:
        return {}, [f"it is not valid JSON ({exc})"]
    if not isinstance(data, dict):
        return {}, [f"it holds a JSON {type(data).__name__}, not an object of device records"]
    good, problems = {}, []
    for name, record in data.items():
        why = calibration_problem(record)
        if why:
            problems.append(f"the record for {name!r} is ignored: {why}")
        else:
            good[name] = record
    return good, problems


def load_calibration() -> dict:
    """Valid cached measurements, keyed by device name (re-read only when the file changes).

    Never raises: a corrupt file or record is ignored with one :class:`CalibrationWarning` per
    state of the file, saying why and that `tiledmm calibrate` rewrites it.
    """
    return _CALIBRATION.load()


_CALIBRATION = CachedFile(
    "calibration.json",
    read_calibration,
    what="calibration cache",
    category=CalibrationWarning,
    repair="the planner uses estimated ceilings where nothing valid is measured; " + _REPAIR,
    empty={},
)


def save_calibration(device_name: str, record: dict) -> Path:
    """Store ``record`` for ``device_name``, keeping the file's other valid records; a corrupt
    file (or record) is overwritten. The stored record's host costs of other backends stay
    (``host_cost`` is per backend, and several backends share a device); a record of host
    costs alone keeps the stored record's ceilings, date and method. Likewise ``loop_costs``,
    and a stored ``fma_accumulators`` and ``fma_probe`` where ``record`` has none. Raises
    ValueError for an invalid ``record``."""
    why = calibration_problem(record)
    if why:
        raise ValueError(f"calibration record for {device_name!r} not saved: {why}")
    path = calibration_path()
    with locked(path):  # another process's records, saved meanwhile, stay (atomicfile)
        data, _ = read_calibration(path)
        old = data.get(device_name, {})
        new = old if has_ceilings(old) and not has_ceilings(record) else record
        # per-backend measurements of other backends stay, and the accumulator probe's count
        # (OpenCL's) where a later backend's record has none
        for key in ("host_cost", "loop_costs"):
            table = old.get(key, {}) | record.get(key, {})
            new = new | ({key: table} if table else {})
        for key in ("fma_accumulators", "fma_probe"):  # OpenCL's probe, kept for the device
            if key in old and key not in new:
                new = new | {key: old[key]}
        data[device_name] = new
        atomic_write(path, json.dumps(data, indent=2, sort_keys=True, allow_nan=False))
    return path
