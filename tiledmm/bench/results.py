"""Results files: pytest-benchmark's JSON schema (stats, machine_info, commit_info) with the
tiledmm details: GPU (nvidia-smi), OpenCL (pyopencl), CPU, ceilings. The machine and commit
blocks come from :mod:`tiledmm.bench.machine` (the only module importing pyopencl for them);
this module writes and reads the files."""

from __future__ import annotations

import datetime as _dt
import json
import math
import re
import warnings
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from ..core.backend import Backend
from ..planner.geometry import KERNEL_FAMILIES
from .machine import commit_info, machine_info

__all__ = [
    "stats_dict",
    "bench_name",
    "benchmark_entry",
    "document",
    "write_document",
    "write_results",
    "slug",
    "read_benchmarks",
    "row_problem",
    "ROW_KEYS",
    "load",
    "headline",
    "shape_label",
    "fmt_num",
    "family_rank",
]


# --------------------------------------------------------------------------- entries and files


def stats_dict(times: list[float]) -> dict:
    """pytest-benchmark's ``stats`` block (seconds) for one list of per-call times, computed by
    its own :class:`pytest_benchmark.stats.Stats` (plus ``iterations`` and ``data``)."""
    from pytest_benchmark.stats import Stats

    stats = Stats()
    for t in times:
        stats.update(t)
    return stats.as_dict() | {"iterations": 1, "data": list(times)}


def bench_name(backend: str, kernel: str, dtype: str, m: int, n: int, k: int) -> tuple[str, str]:
    """(name, param) in the form ``pytest benches/`` produces, so files compare."""
    param = f"{backend}-{kernel}-{dtype}-{m}x{n}x{k}"
    return f"test_matmul[{param}]", param


def benchmark_entry(info: dict, times: list[float], settings: Any) -> dict:
    name, param = bench_name(*(info[x] for x in ("backend", "kernel", "dtype", "m", "n", "k")))
    return {
        "group": f"{info['dtype']} {info['m']}x{info['n']}x{info['k']}",
        "name": name,
        "fullname": f"benches/test_matmul.py::{name}",
        "params": {
            "backend": info["backend"],
            "kernel": info["kernel"],
            "dtype": info["dtype"],
            "shape": f"{info['m']}x{info['n']}x{info['k']}",
        },
        "param": param,
        "extra_info": info,
        "options": {
            "disable_gc": False,
            "timer": "backend.timings",
            "min_rounds": settings.min_rounds,
            "max_time": settings.budget,
            "min_time": 0,
            "warmup": settings.warmup,
        },
        "stats": stats_dict(times),
    }


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "device"


def document(benchmarks: list[dict], backends: Iterable[Backend] = (), *,
             loadavg: list | None = None, **tiledmm_info: Any) -> dict:  # fmt: skip
    """A pytest-benchmark JSON document for ``benchmarks`` measured on ``backends`` (machine,
    commit, date, pytest-benchmark version; ``tiledmm_info`` under the ``tiledmm`` key;
    ``loadavg``: the load averages when the run started)."""
    doc = {
        "machine_info": machine_info(backends, loadavg),
        "commit_info": commit_info(),
        "benchmarks": benchmarks,
        "datetime": _dt.datetime.now(_dt.UTC).isoformat(),
        "version": _pytest_benchmark_version(),
    }
    if tiledmm_info:
        doc["tiledmm"] = tiledmm_info
    return doc


def write_document(path: Path, benchmarks: list[dict], backends: Iterable[Backend] = (),
                   **tiledmm_info: Any) -> Path:  # fmt: skip
    """:func:`document` written to ``path`` (the benches' own result files)."""
    path = Path(path)
    path.write_text(
        json.dumps(document(benchmarks, backends, **tiledmm_info), indent=1, default=_jsonable)
        + "\n"
    )
    return path


def write_results(res: Any, outdir: Path, name: str | None = None, command: str = "") -> list[Path]:
    """One pytest-benchmark JSON per device (or one file ``NAME.json`` when a name is given,
    a file name inside ``outdir``: a name with a folder part is refused)."""
    if name is not None and (Path(f"{name}.json").name != f"{name}.json" or name in ("", "..")):
        raise ValueError(f"results name {name!r} is not a file name inside {outdir}")
    outdir.mkdir(parents=True, exist_ok=True)
    groups: dict[str, list[dict]] = {}
    for b in res.benchmarks:
        label = name or slug(b["extra_info"]["device"] + "-" + b["extra_info"]["backend"])
        groups.setdefault(label, []).append(b)
    if not groups:
        groups[name or "empty"] = []
    paths = []
    for label, benches in sorted(groups.items()):
        doc = document(benches, res.backends, command=command, skipped=res.skipped,
                       failures=res.failures, busy=getattr(res, "busy", []),
                       loadavg=getattr(res, "loadavg", None))  # fmt: skip
        path = outdir / f"{label}.json"
        path.write_text(json.dumps(doc, indent=2, default=_jsonable) + "\n")
        paths.append(path)
    return paths


# --------------------------------------------------------------------------- reading


# extra_info fields a row must have (a benchmark without them is not a tiledmm result), and
# the numeric ones it may have (number or null), as the report and plots read them
ROW_KEYS = ("backend", "kernel", "device", "dtype", "m", "n", "k", "gflops")
_NUMERIC = (
    "seconds",
    "vendor_gflops",
    "intensity",
    "predicted_seconds",
    "rel_error",
    "peak_flops",
    "bandwidth",
)


def read_benchmarks(path: str | Path) -> list | None:
    """The ``benchmarks`` list of a pytest-benchmark JSON file, or None for a JSON object
    without one (another tool's file); OSError when it cannot be read, ValueError (naming the
    file) when it is not JSON or not an object."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path} is not a results file: not valid JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise ValueError(
            f"{path} is not a results file: pytest-benchmark JSON is an object with a "
            f"'benchmarks' list; this is a JSON {type(doc).__name__}"
        )
    found = doc.get("benchmarks")
    return found if isinstance(found, list) else None


def _number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def row_problem(info: dict) -> str | None:
    """Why a tiledmm ``extra_info`` cannot be reported (None when it can)."""
    for key in ("backend", "kernel", "device", "dtype"):
        if not isinstance(info[key], str):
            return f"{key} is {info[key]!r}, not a string"
    for key in ("m", "n", "k"):
        if not isinstance(info[key], int) or isinstance(info[key], bool) or info[key] < 1:
            return f"{key} is {info[key]!r}, not a positive integer"
    g = info["gflops"]
    if not _number(g) or not math.isfinite(g) or g <= 0:
        return f"gflops is {g!r}, not a positive finite number"
    for key in _NUMERIC:
        if info.get(key) is not None and not _number(info[key]):
            return f"{key} is {info[key]!r}, not a number"
    return None


def family_rank(kernel: str) -> int:
    """Sort position of a kernel family (the DESIGN order; unknown families last)."""
    return KERNEL_FAMILIES.index(kernel) if kernel in KERNEL_FAMILIES else len(KERNEL_FAMILIES)


def _key(r: dict) -> tuple:
    dims = (r["m"] * r["n"] * r["k"], r["m"], r["n"], r["k"])
    how = (r.get("batch") or 1, r.get("requested_kernel") or "")
    return (r["device"], r["backend"], r["dtype"], *dims, family_rank(r["kernel"]), r["kernel"],
            *how)  # fmt: skip


def ladder_row(r: dict) -> bool:
    """A row of the tiling ladder: one matrix, a family asked for by name (the every-shape
    benchmark's rows, batched or through kernel="auto", are reported beside it, not in it)."""
    return (r.get("batch") or 1) == 1 and not r.get("requested_kernel")


def load(paths: list[str | Path]) -> list[dict]:
    """One row per (device, backend, kernel, dtype, shape); later files (sorted) win.

    Benchmarks without tiledmm's ``extra_info`` are skipped, and so are TF32 rows (float32
    inputs rounded to 10 bits on tensor cores: not the float32 the tables compare); a malformed
    one, or a JSON object without a ``benchmarks`` list, is ignored with a warning that says
    why; a file that is not JSON or not an object raises ValueError."""
    rows: dict[tuple, dict] = {}
    for path in sorted(str(p) for p in paths):
        benches, bad = read_benchmarks(path), []
        if benches is None:
            warnings.warn(
                f"{path} ignored, because it has no 'benchmarks' list (not pytest-benchmark JSON)",
                stacklevel=2,
            )
            continue
        for i, b in enumerate(benches):
            e = b.get("extra_info") if isinstance(b, dict) else None
            if not isinstance(e, dict) or not set(ROW_KEYS) <= set(e) or "workers" in e:
                continue  # (rows of a cluster run belong to the Dask report, docs/dask.md)
            if e.get("precision") == "tf32":
                continue  # float32 inputs on tensor cores are not IEEE float32 (docs/mma.md)
            if "tuned_from" in e:
                continue  # tuner experiments (cold vs shipped tiles: docs/tuning.md)
            why = row_problem(e)
            if why:
                bad.append(f"benchmark {i} ({b.get('name', '?')}): {why}")
                continue
            e = dict(e, file=Path(path).name)
            stats = b.get("stats")
            e.setdefault("seconds", stats.get("median") if isinstance(stats, dict) else None)
            rows[_key(e)] = e
        if bad:
            warnings.warn(
                f"{path}: {len(bad)} benchmark(s) ignored, because " + "; ".join(bad[:3]),
                stacklevel=2,
            )
    return [rows[k] for k in sorted(rows)]


def shape_label(r: dict) -> str:
    """``4096^3``, ``1000x3000x777``; batched rows lead with the batch (``32 x 512^3``)."""
    one = f"{r['m']}^3" if r["m"] == r["n"] == r["k"] else f"{r['m']}x{r['n']}x{r['k']}"
    batch = r.get("batch") or 1
    return f"{batch} x {one}" if batch > 1 else one


def headline(rows: list[dict]) -> dict[tuple, tuple]:
    """(device, backend, dtype) -> the square shape with the most families (largest on ties)."""
    count: Counter = Counter()
    for r in rows:
        if r["m"] == r["n"] == r["k"] and ladder_row(r):
            count[(r["device"], r["backend"], r["dtype"], r["m"])] += 1
    best: dict[tuple, tuple] = {}
    for (dev, be, dt, n), c in sorted(count.items()):
        if (dev, be, dt) not in best or (c, n) >= best[(dev, be, dt)][1:]:
            best[(dev, be, dt)] = ((n, n, n), c, n)
    return {k: v[0] for k, v in best.items()}


def fmt_num(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "-"
    return f"{x:,.0f}" if x >= 100 else f"{x:.1f}" if x >= 10 else f"{x:.2f}"


def _jsonable(x: Any) -> Any:
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, tuple | set):
        return list(x)
    return str(x)


def _pytest_benchmark_version() -> str:
    try:
        from importlib.metadata import version

        return version("pytest-benchmark")
    except Exception:  # noqa: BLE001
        return "5.0.0"
