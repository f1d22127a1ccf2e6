"""The end of `tiledmm tune` (``tiledmm.tune.command``): each task's outcome, the closing table, the
database entry of a winner, and the closing line with the exit status.

Outcomes: ``done`` (a winner), ``budget`` (the budget ran out before the task measured a
candidate: not an error; the next run resumes from the log), ``failed`` (candidates ran and
none was correct: compile errors, launch failures, wrong results, timeouts) and ``empty`` (no
candidate of the backend's space plans on this shape). Exit status: 0 when every task is done
or only the budget stopped some; 1 when a task failed or had no candidate (one line on stderr
names them and why); 2 is a usage error (argparse, before anything runs).
"""

from __future__ import annotations

import math
import sys
from typing import TYPE_CHECKING

from ..core import tuning
from ..planner.geometry import Geometry
from .task import Task

if TYPE_CHECKING:  # pragma: no cover
    from .search import Tuner

__all__ = ["outcome", "entry", "closing", "verdict"]


def outcome(t: Task) -> str:
    """``done``, ``budget``, ``failed`` or ``empty`` (see the module docstring)."""
    if t.choice:
        return "done"
    if not t.space:
        return "empty"
    return "failed" if t.results else "budget"


def _failures(t: Task) -> dict[str, int]:
    fails: dict[str, int] = {}
    for r in t.results.values():
        if r["status"] != "ok":
            fails[r["status"]] = fails.get(r["status"], 0) + 1
    return fails


def entry(tuner: Tuner, t: Task) -> dict:
    """The tuning-database entry of a task's winner."""
    g, dev, c = Geometry.from_key(t.choice["geometry"]), tuner.device, t.choice
    vendor = tuner.vendor.get(t.key)
    meas = dict(gflops=float(f"{c['gflops']:.6g}"), seconds=c["seconds"], shape=list(t.shape),
                date=tuner.run_id, of_vendor=round(c["gflops"] / vendor, 4) if vendor else None,
                default_gflops=float(f"{t.default_gflops:.6g}") if t.default_gflops else None,
                default=str(t.default), candidates=len(t.results))  # fmt: skip
    e = dict(device=dev.name, vendor=dev.vendor, kind=dev.kind, backend=tuner.be.name,
             dtype=tuner.dtype, family=t.family, shape_class=t.cls, **g.to_dict(), measured=meas,
             source=f"tiledmm tune on {dev.name}, {tuner.run_id[:10]}")  # fmt: skip
    if tuning.device_arch(dev):
        e["arch"] = tuning.device_arch(dev)
    return e


_WHY = {"budget": "not measured: the budget ran out", "failed": "no correct candidate",
        "empty": "no candidate plans on this shape"}  # fmt: skip


def closing(tuner: Tuner, tasks: list[Task]) -> list[dict]:
    """Print and return the closing table: per task, the winner and the shipped default, as
    GFLOP/s and fractions of the vendor library measured in this run; a task without a winner
    says why instead."""
    rows = []
    for t in tasks:
        c = t.choice
        rows.append(dict(shape_class=t.cls, shape=t.shape, family=t.family,
                         best=c["tiles"] if c else None, gflops=c["gflops"] if c else None,
                         default=str(t.default), default_gflops=t.default_gflops,
                         vendor_gflops=tuner.vendor.get(t.key), tried=len(t.results),
                         space=len(t.space), failures=_failures(t), outcome=outcome(t),
                         note=t.note))  # fmt: skip
    print(
        f"\n{'class':10} {'shape':>20} {'family':8} {'best geometry':44} {'GFLOP/s':>9} "
        f"{'of vendor':>9} {'default':>9} {'of vendor':>9}  tried/space  failures"
    )
    for r in rows:
        b, m, n, k = r["shape"]
        shape = (f"{b}x" if b > 1 else "") + f"{m}x{n}x{k}"
        v = r["vendor_gflops"] or math.nan
        g, d = r["gflops"] or math.nan, r["default_gflops"] or math.nan
        fails = ", ".join(f"{n} {s}" for s, n in r["failures"].items()) or "-"
        best = str(r["best"]) if r["best"] else f"({_WHY[r['outcome']]})"
        note = f"  note: {r['note']}" if r["note"] else ""
        print(
            f"{r['shape_class']:10} {shape:>20} {r['family']:8} {best[:44]:44} "
            f"{_num(g, '9.4g')} {_num(g / v, '9.3f')} {_num(d, '9.4g')} {_num(d / v, '9.3f')}"
            f"  {r['tried']:>5}/{r['space']:<5}  {fails}{note}"
        )
    vb = tuner.be.vendor_backend()
    print(
        f"vendor: {vb.name}'s vendor_matmul, timed in this run; default: the shipped table's "
        f"geometry ({tuning.IGNORE_SHIPPED}={'1' if tuning.ignore_shipped() else '0'})"
    )
    return rows


def _num(x: float, fmt: str) -> str:
    width = int(fmt.split(".")[0])
    return f"{x:{fmt}}" if math.isfinite(x) else f"{'-':>{width}}"


def verdict(tuner: Tuner, tasks: list[Task], saved: int) -> int:
    """Print the closing line (what finished, what did not and why; on stderr when a task
    failed) and return the exit status (see the module docstring)."""
    by: dict[str, list[Task]] = {}
    for t in tasks:
        by.setdefault(outcome(t), []).append(t)
    done = len(by.get("done", []))
    line = f"tiledmm tune: {done} of {len(tasks)} task(s) done"
    if by.get("budget"):
        line += (f"; {len(by['budget'])} not measured: the {tuner.budget:g} s budget ran out "
                 "(not an error: run the same command again to go on from the log, or give "
                 "a larger --budget)")  # fmt: skip
    line += f"; {saved} entries saved" if saved else "; nothing saved"
    print(line, flush=True)
    bad = by.get("failed", []) + by.get("empty", [])
    if not bad:
        return 0
    what = "; ".join(f"{t.family} {t.cls} {'x'.join(map(str, t.shape))}: {_WHY[outcome(t)]}"
                     + (f" ({', '.join(f'{n} {s}' for s, n in _failures(t).items())})"
                        if t.results else "") for t in bad)  # fmt: skip
    print(f"tiledmm tune: error: {len(bad)} task(s) found no usable geometry: {what}; the log "
          f"{tuner.log} has each candidate's error", file=sys.stderr)  # fmt: skip
    return 1
