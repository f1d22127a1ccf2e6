"""First contact (issue 37): on a device tiledmm has never seen, how fast is ``auto`` from the
first call?

    python -m benches.first_contact --backend cupy --quick --out benches/data/X.json
    python -m benches.first_contact --backend numpy --out benches/data/epyc-first-contact-numpy.json

With an empty ``TILEDMM_CACHE_DIR`` (a fresh temporary folder unless ``--cache``) and
``TILEDMM_IGNORE_SHIPPED_TUNING=1`` (no table for this device), each shape of the every-shape
set (``benches/studies/shapes.py``; on a CPU scaled down by ``--scale`` and capped by
``--max-gflop``)
is called once through ``tiledmm.matmul(a, b, backend=B)`` as a user would (device arrays in,
kernel "auto"): that first call's time, including first-use tuning (``tiledmm.tune.first_use``),
and its result checked (every element written, sampled rows against float64). Then, timed in
alternating rounds in the same process on the same arrays, with the backend's ``timings``
(device events on a GPU) around the whole call:

- ``first_use``: the tiles first use left (what the user now gets);
- ``untuned``: first use off, the kind defaults (what a new device got before);
- ``shipped``: first use off, the shipped tables visible (today's default where they apply);
- ``tuned``: with ``--tuned-cache DIR``, the user database of a full ``tiledmm tune`` run;
- ``vendor``: the vendor library (cupy.matmul, numpy.matmul) on the same data.

Writes JSON (machine info, settings, a row per shape, the first-use entries, a summary) and
prints a table: per shape, the first call, each variant's fraction of the vendor library; then
the geometric mean of auto / vendor, the worst shape and what first use cost per class.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("CUPY_TF32", "0")

import tiledmm
from benches.studies.shapes import SHAPES, classify
from tiledmm.bench.machine import commit_info, machine_info
from tiledmm.core import dispatch, tuning, tuning_check
from tiledmm.tune import first_use
from tiledmm.util.accuracy import rel_error

GPU_BACKENDS = ("cupy", "numba-cuda", "opencl")
SAMPLE_ROWS = 16


def scaled_shapes(scale: int, max_gflop: float) -> list[tuple]:
    """SHAPES with every dimension over 64 divided by ``scale`` (less where the class would
    change), products over ``max_gflop`` GFLOP dropped; (batch a, batch b, m, n, k)."""
    out = []
    for ba, bb, m, n, k in SHAPES:
        want = classify(ba, bb, m, n, k)
        for s in (scale, scale // 2, scale // 4, 1):
            s = max(1, s)
            bs = tuple(max(2, x // s) if x > 64 else x for x in ba)
            dims = [d if d <= 64 else max(64, d // s) for d in (m, n, k)]
            cand = (bs, bs if bb else bb, *dims)
            if classify(*cand) == want:
                break
        batch = math.prod(np.broadcast_shapes(cand[0], cand[1])) if cand[0] or cand[1] else 1
        if 2 * batch * math.prod(cand[2:]) <= max_gflop * 1e9:
            out.append(cand)
    return list(dict.fromkeys(out))


def operands(ba, bb, m, n, k, dtype, rng):
    sa = (k,) if m == 1 and not ba else ba + (m, k)
    sb = (k,) if n == 1 and not bb else bb + (k, n)
    return (rng.random(sa) * 2 - 1).astype(dtype), (rng.random(sb) * 2 - 1).astype(dtype)


def sampled_error(c, a, b, rng) -> float:
    """Relative error on up to SAMPLE_ROWS rows against float64; inf if anything is NaN."""
    c = np.asarray(c, np.float64)
    if not np.isfinite(c).all():
        return math.inf
    a2 = a.reshape(1, -1) if a.ndim == 1 else a
    c2 = c.reshape(*c.shape[:-1], 1, c.shape[-1]) if a.ndim == 1 else c
    if b.ndim == 1:
        c2 = c2[..., None]
    rows = np.sort(rng.choice(a2.shape[-2], min(a2.shape[-2], SAMPLE_ROWS), replace=False))
    ref = np.matmul(a2[..., rows, :].astype(np.float64), b.astype(np.float64))
    ref = ref[..., None] if b.ndim == 1 else ref
    return rel_error(c2[..., rows, :], ref)


class Variants:
    """Switch between the variants: each has its cache directory and settings."""

    def __init__(self, cold: str, tuned: str | None):
        self.dirs = {"first_use": cold, "untuned": tempfile.mkdtemp(prefix="tiledmm-untuned-"),
                     "shipped": tempfile.mkdtemp(prefix="tiledmm-shipped-")}  # fmt: skip
        if tuned:
            self.dirs["tuned"] = tuned

    def use(self, name: str) -> None:
        os.environ["TILEDMM_CACHE_DIR"] = self.dirs[name]
        os.environ[first_use.ENABLE] = "1" if name == "first_use" else "0"
        if name == "shipped":
            os.environ.pop(tuning.IGNORE_SHIPPED, None)
        else:
            os.environ[tuning.IGNORE_SHIPPED] = "1"
        dispatch.clear_caches()


def timed(be, fn, budget: float, reps_max: int) -> float:
    fn()
    be.synchronize()
    t0 = time.perf_counter()
    fn()
    be.synchronize()
    one = time.perf_counter() - t0
    reps = int(min(reps_max, max(3, budget / max(one, 1e-9))))
    return statistics.median(be.timings(fn, repeat=reps, warmup=0))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="numpy")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--quick", action="store_true", help="fewer rounds and repeats (GPU: < 4 min)")
    p.add_argument("--budget", type=float, help="first-use seconds per class (default: its own)")
    p.add_argument("--cache", help="the empty TILEDMM_CACHE_DIR to start from (default: a new one)")
    p.add_argument("--tuned-cache", help="TILEDMM_CACHE_DIR of a full `tiledmm tune` run")
    p.add_argument("--variants", default="first_use,untuned,shipped")
    p.add_argument("--scale", type=int, help="divide dimensions over 64 by this (CPU default 4)")
    p.add_argument("--max-gflop", type=float, help="skip larger products (CPU default 20)")
    p.add_argument("--out", help="JSON file (default benches/data/first-contact-BACKEND.json)")
    args = p.parse_args(argv)

    cold = args.cache or tempfile.mkdtemp(prefix="tiledmm-first-contact-")
    if Path(cold, "tuning.json").exists():
        raise SystemExit(f"--cache {cold} already holds a tuning database: give an empty folder")
    var = Variants(cold, args.tuned_cache)
    names = [v for v in args.variants.split(",") if v] + (["tuned"] if args.tuned_cache else [])
    if "first_use" not in names:
        names.insert(0, "first_use")
    if args.budget is not None:
        os.environ[first_use.BUDGET] = str(args.budget)
    var.use("first_use")
    logging.basicConfig(level=logging.WARNING)
    for h in logging.getLogger().handlers:  # the console: INFO and up
        h.setLevel(logging.INFO)
    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda r: lines.append(r.getMessage())  # INFO, and first use's DEBUG lines
    handler.addFilter(lambda r: r.levelno >= logging.INFO or r.getMessage().startswith("first"))
    logging.getLogger("tiledmm").addHandler(handler)
    logging.getLogger("tiledmm").setLevel(logging.DEBUG)

    be = tiledmm.get_backend(args.backend)
    dev = be.device()
    vb = be.vendor_backend()
    gpu = dev.is_gpu
    scale = args.scale or (1 if gpu else 4)
    max_gflop = args.max_gflop or (math.inf if gpu else 20.0)
    rounds, budget, reps_max = (2, 0.05, 10) if args.quick else (3, 0.2, 30)
    shapes = scaled_shapes(scale, max_gflop)
    rng = np.random.default_rng(37)
    dt = np.dtype(args.dtype)

    w = np.ones((2, 2), dt)  # the backend's own start (imports, registry, context): not a shape's
    t0 = time.perf_counter()
    tiledmm.matmul(be.asarray(w, dt), be.asarray(w, dt), backend=be.name)
    be.synchronize()
    startup = time.perf_counter() - t0
    rows = []
    started = time.perf_counter()
    for ba, bb, m, n, k in shapes:
        cls = classify(ba, bb, m, n, k)
        batch = math.prod(np.broadcast_shapes(ba, bb)) if ba or bb else 1
        flops = 2.0 * batch * m * n * k
        a, b = operands(ba, bb, m, n, k, dt, rng)
        A, B = be.asarray(a, dt), be.asarray(b, dt)
        VA, VB = (A, B) if vb is be else (vb.asarray(a, dt), vb.asarray(b, dt))
        var.use("first_use")
        before = len(lines)
        t0 = time.perf_counter()
        c = tiledmm.matmul(A, B, backend=be.name)
        be.synchronize()
        first = time.perf_counter() - t0
        err = sampled_error(be.to_numpy(c), a, b, rng)
        del c
        times: dict[str, list[float]] = {v: [] for v in names + ["vendor"]}
        for r in range(rounds):  # alternating rounds: drift and noise hit every variant alike
            order = names + ["vendor"]
            for v in order if r % 2 == 0 else order[::-1]:
                if v == "vendor":
                    fn = lambda x=VA, y=VB: vb.vendor_matmul(x, y)  # noqa: E731
                    times[v].append(timed(vb, fn, budget, reps_max))
                    continue
                var.use(v)
                fn = lambda x=A, y=B: tiledmm.matmul(x, y, backend=be.name)  # noqa: E731
                times[v].append(timed(be, fn, budget, reps_max))
        var.use("first_use")
        gf = {v: flops / statistics.median(t) / 1e9 for v, t in times.items()}
        plan = dispatch.plan_for(be, max(m, 1), max(n, 1), k, dt.name, batch=batch)
        label = "x".join(map(str, (*(ba or bb), m, n, k)))
        rows.append(dict(shape=label, batch=batch, m=m, n=n, k=k, shape_class=cls,
                         first_call_seconds=first, first_call_rel_error=err,
                         first_use_log=lines[before:], kernel=plan.kernel,
                         block_tile=list(plan.block_tile), thread_tile=list(plan.thread_tile),
                         tiles_from=plan.geometry_source, gflops=gf,
                         of_vendor={v: g / gf["vendor"] for v, g in gf.items()}))  # fmt: skip
        print(f"{label:>22} {cls:9} first call {first:7.3f} s  " + "  ".join(
            f"{v} {gf[v] / gf['vendor']:.3f}" for v in names) + f"  vendor {gf['vendor']:.4g} "
              "GFLOP/s", flush=True)  # fmt: skip
    entries, _ = tuning_check.read_database(Path(cold) / "tuning.json")
    summary = summarize(rows, names, entries)
    print(table(summary, names))
    out = Path(args.out or f"benches/data/first-contact-{be.name}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = dict(about=__doc__.splitlines()[0], command=" ".join(sys.argv), commit=commit_info(),
               machine_info=machine_info([be, vb] if vb is not be else [be]),
               settings=dict(backend=be.name, dtype=dt.name, quick=args.quick, scale=scale,
                             max_gflop=max_gflop, rounds=rounds, variants=names,
                             first_use=vars(first_use.settings(gpu)), startup_seconds=startup,
                             run_seconds=time.perf_counter() - started,
                             OPENBLAS_NUM_THREADS=os.environ.get("OPENBLAS_NUM_THREADS")),
               summary=summary, rows=rows, first_use_entries=entries)  # fmt: skip
    out.write_text(json.dumps(doc, indent=1, default=str, allow_nan=True) + "\n")
    print(f"wrote {out}")
    return 0 if all(r["first_call_rel_error"] <= 1e-3 for r in rows) else 3


def _gm(xs) -> float:
    xs = [x for x in xs if x > 0 and math.isfinite(x)]
    return math.exp(statistics.fmean(math.log(x) for x in xs)) if xs else math.nan


def summarize(rows: list[dict], names: list[str], entries: list[dict]) -> dict:
    """Geometric means of each variant / vendor (all shapes; and without vectors), the worst
    shape of first use, and what first use cost per class: the sum of its runs' seconds, those
    that saved nothing included (each run's log line says "in X s"), and how many runs."""
    mats = [r for r in rows if r["shape_class"] != "vector"]
    worst = min(rows, key=lambda r: r["of_vendor"]["first_use"]) if rows else None
    cost: dict[str, float] = {}
    runs: dict[str, int] = {}
    for r in rows:
        for line in r["first_use_log"]:
            got = re.search(r"\bin (\d+(?:\.\d+)?) s\b", line)
            if got and line.startswith("first use: ") and "calibrated" not in line:
                cost[r["shape_class"]] = cost.get(r["shape_class"], 0.0) + float(got.group(1))
                runs[r["shape_class"]] = runs.get(r["shape_class"], 0) + 1
    return dict(
        geomean_of_vendor={v: _gm(r["of_vendor"][v] for r in rows) for v in names},
        geomean_of_vendor_no_vectors={v: _gm(r["of_vendor"][v] for r in mats) for v in names},
        worst=dict(shape=worst["shape"], of_vendor=worst["of_vendor"]) if worst else None,
        first_use_seconds_per_class=cost,
        first_use_runs_per_class=runs,
        first_call_seconds_max=max((r["first_call_seconds"] for r in rows), default=0.0),
        entries=len(entries),
        wrong_first_calls=[r["shape"] for r in rows if not r["first_call_rel_error"] <= 1e-3],
    )


def table(s: dict, names: list[str]) -> str:
    g, g2 = s["geomean_of_vendor"], s["geomean_of_vendor_no_vectors"]
    lines = ["", "of vendor, geometric mean: " + ", ".join(f"{v} {g[v]:.3f}" for v in names),
             "  without vectors: " + ", ".join(f"{v} {g2[v]:.3f}" for v in names)]  # fmt: skip
    if s["worst"]:
        w = s["worst"]
        lines.append(f"worst shape (first use): {w['shape']} at {w['of_vendor']['first_use']:.3f}")
    runs = s.get("first_use_runs_per_class", {})
    cost = ", ".join(f"{c} {t:.2f} s ({runs.get(c, '?')} runs)"
                     for c, t in s["first_use_seconds_per_class"].items())  # fmt: skip
    lines.append(f"first use cost per class (all its runs): {cost or 'none'}")
    if s["wrong_first_calls"]:
        lines.append(f"WRONG first calls: {', '.join(s['wrong_first_calls'])}")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
