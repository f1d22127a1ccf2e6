"""Every shape class beside the vendor library, in one run; and a sweep of the per-class
candidate geometries (issue 11).

    python -m benches.studies.shapes --out benches/results/h200-shapes.json      # the shape set
    python -m benches.studies.shapes --sweep --entries sweep.json [--save] [--dtype float64]

The shape set: >= 24 float32 shapes (squares 256-16384, odd sizes, K <= 256, M or N <= 64,
batches of 8-256 small matrices, vectors as 1-D operands) through every available backend of
cupy / opencl / numba-cuda with ``kernel="auto"`` and each explicit family, tiledmm.matmul as a
user calls it (device arrays in, no ``out=``; numba-cuda gets CuPy arrays when CuPy is there),
and the vendor (cuBLAS via ``cupy.matmul``, TF32 off) timed in the same run on the same data;
then a float64 subset. Each row is checked first (NaN-poisoned ``out=``, float64 reference).
Rows are pytest-benchmark JSON with ``extra_info.shape_class``, ``requested_kernel``, ``batch``,
``dram_fraction`` (bytes of A, B, C over time, of the device's DRAM roof ``dram_roof``: its
DRAM level, after ``tiledmm calibrate`` the measured streaming-read bandwidth; not the copy
bandwidth, read and written, which a read-only gemv can exceed). A table comes last.

The sweep times ``backends/kernels/shapes.py``'s candidates per class on two shapes each,
prints the best per class and backend, writes them as tuning-database entries (``--entries``)
and with ``--save`` adds them to the user layer, which ``kernel="auto"`` then reads.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import os
import statistics
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np

os.environ.setdefault("CUPY_TF32", "0")

import tiledmm
from tiledmm.bench import results
from tiledmm.bench.sweep import peak_of, tolerance
from tiledmm.core import tuning
from tiledmm.core.dispatch import plan_for
from tiledmm.planner import shapefit
from tiledmm.planner.make import batch_plan
from tiledmm.util.accuracy import rel_error

# (batch shape of a, batch shape of b, m, n, k); m == 1 / n == 1 with "1d" are 1-D operands
SHAPES = [((), (), s, s, s) for s in (256, 512, 1024, 2048, 3072, 4096, 8192, 16384)] + [
    ((), (), 4095, 4095, 4095), ((), (), 1000, 3000, 777), ((), (), 257, 4097, 1031),
    ((), (), 8192, 8192, 64), ((), (), 4096, 4096, 256), ((), (), 8192, 8192, 128),
    ((), (), 64, 4096, 4096), ((), (), 4096, 32, 4096), ((), (), 16, 8192, 8192),
    ((32,), (32,), 512, 512, 512), ((256,), (256,), 128, 128, 128), ((8,), (8,), 1024, 1024, 1024),
    ((64,), (), 256, 256, 64),
    ((), (), 1, 4096, 4096), ((), (), 4096, 1, 4096), ((), (), 1, 8192, 8192),
    ((), (), 16384, 1, 16384),
]  # fmt: skip
F64 = [SHAPES[i] for i in (2, 5, 9, 17, 21)]
SWEEP = {
    "square": [(1024, 1024, 1024), (2048, 2048, 2048)],
    "odd": [(1000, 3000, 777), (257, 4097, 1031)],
    "skinny_k": [(8192, 8192, 64), (4096, 4096, 256)],
    "skinny_mn": [(64, 4096, 4096), (4096, 32, 4096)],
    "batched": [(512, 512, 512), (128, 128, 128)],
    "vector": [(1, 4096, 4096), (4096, 1, 4096), (1, 8192, 8192), (8192, 1, 8192)],
}
SWEEP_BATCH = {"batched": (32,)}
MAX_CALL = 0.25  # seconds: explicit families predicted slower than this are skipped


def classify(ba, bb, m, n, k) -> str:
    batch = math.prod(np.broadcast_shapes(ba, bb)) if ba or bb else 1
    return tuning.shape_class(m, n, k, batch)


def operands(ba, bb, m, n, k, dtype, rng):
    """Host operands (1-D where m or n is 1 and there is no batch) and the float64 reference."""
    sa = (k,) if m == 1 and not ba else ba + (m, k)
    sb = (k,) if n == 1 and not bb else bb + (k, n)
    a = (rng.random(sa) * 2 - 1).astype(dtype)
    b = (rng.random(sb) * 2 - 1).astype(dtype)
    return a, b, np.matmul(a.astype(np.float64), b.astype(np.float64))


def timed(be, fn, budget: float = 0.15) -> float:
    first = be.timings(fn, repeat=1, warmup=2)[0]
    reps = int(min(50, max(3, budget / max(first, 1e-7))))
    return statistics.median(be.timings(fn, repeat=reps, warmup=0))


def sweep_operands(be, bshape, m, n, k, dtype, rng):
    """Device operands of one sweep product (a batch of ``bshape`` matrices, or one) and the
    float64 reference in the same shape."""
    a, b, ref = operands(bshape, bshape, m, n, k, dtype, rng)
    A = be.asarray(a.reshape(bshape + (m, k)), a.dtype)
    B = be.asarray(b.reshape(bshape + (k, n)), b.dtype)
    return A, B, ref.reshape(bshape + (m, n))


def check_then_time(be, plan, A, B, ref, bshape, dtype: str) -> float:
    """Seconds per call of ``plan`` on ``A``, ``B`` (one batched launch when ``bshape``), after
    one run into a NaN-poisoned output checked against ``ref``; raises when it is wrong or the
    backend declines the batch."""
    out = be.asarray(np.full(ref.shape, np.nan, dtype), np.dtype(dtype))

    def go():
        if not bshape:
            return be.run(plan, A, B, out)
        if not be.run_batched(plan, A, B, out):
            raise RuntimeError("run_batched declined")

    go()
    err = rel_error(be.to_numpy(out), ref)
    if not err <= tolerance(dtype, plan.k):
        raise RuntimeError(f"relative error {err:.3g}")
    return timed(be, go)


def best_per_family(gm: dict, family) -> list[tuple]:
    """(key, GFLOP/s, "BEST" or "best") of the fastest candidate of each family in ``gm``
    (candidate key -> geometric mean; ``family(key)`` its family): ``auto`` compares families."""
    top = max(gm.values(), default=None)
    out = []
    for fam in tiledmm.KERNEL_FAMILIES:
        mine = {key: g for key, g in gm.items() if family(key) == fam}
        if mine:
            key, g = max(mine.items(), key=lambda kv: kv[1])
            out.append((key, g, "BEST" if g == top else "best"))
    return out


def device_inputs(be, a, b):
    cp = sys.modules.get("cupy")
    if be.name == "numba-cuda" and cp is not None:  # as a user would: CuPy arrays in
        return cp.asarray(a), cp.asarray(b)
    return be.asarray(a, a.dtype), be.asarray(b, b.dtype)


def check(be, name, kernel, A, B, ref, dtype) -> float:
    out = be.asarray(np.full(ref.shape, np.nan, dtype), np.dtype(dtype))
    r = tiledmm.matmul(A, B, backend=name, kernel=kernel, out=out)
    return rel_error(be.to_numpy(r), ref)


def run_set(names, families, dtype, shapes, rows, vendor_be) -> None:
    rng = np.random.default_rng(11)
    for ba, bb, m, n, k in shapes:
        a, b, ref = operands(ba, bb, m, n, k, dtype, rng)
        batch = math.prod(ref.shape[:-2]) if ref.ndim > 2 else 1
        flops = 2 * batch * m * n * k
        cls = classify(ba, bb, m, n, k)
        vt = None
        if vendor_be is not None:
            va, vb = vendor_be.asarray(a, a.dtype), vendor_be.asarray(b, b.dtype)
            vt = timed(vendor_be, lambda va=va, vb=vb: vendor_be.vendor_matmul(va, vb))
        for name in names:
            be = tiledmm.get_backend(name)
            if dtype not in be.dtypes:
                continue
            A, B = device_inputs(be, a, b)
            for req in families:
                plan = plan_for(be, m, n, k, dtype, req, batch=batch)  # the tiles matmul runs
                fam, whole = plan.kernel, batch_plan(plan, batch)  # whole: the batch's launch
                if req != "auto" and whole.predicted_seconds > MAX_CALL:
                    continue
                try:
                    err = check(be, name, req, A, B, ref, dtype)
                    if not err <= tolerance(dtype, k):
                        print(f"WRONG {name} {req} {cls} {m}x{n}x{k}: {err:.3g}", flush=True)
                        continue
                    t = timed(be, lambda be=be, A=A, B=B, req=req: tiledmm.matmul(
                        A, B, backend=be.name, kernel=req))  # fmt: skip
                except Exception as exc:  # noqa: BLE001 - one failing row must not end the run
                    print(f"FAILED {name} {req} {cls} {m}x{n}x{k}: {exc}", flush=True)
                    continue
                s = np.dtype(dtype).itemsize
                moved = s * (a.size + b.size + ref.size)
                dev = plan.device
                roof = dev.level("DRAM")
                info = dict(
                    backend=name, kernel=fam, requested_kernel=req, device=dev.name,
                    device_kind=dev.kind, dtype=dtype, m=m, n=n, k=k, batch=batch,
                    batch_a=list(ba), batch_b=list(bb), shape_class=cls,
                    gflops=flops / t / 1e9, seconds=t,
                    vendor_gflops=flops / vt / 1e9 if vt else None, vendor_seconds=vt,
                    vendor_backend=vendor_be.name if vendor_be else None,
                    intensity=plan.intensity, predicted_seconds=whole.predicted_seconds,
                    predicted_batch=True,
                    block_tile=list(plan.block_tile), thread_tile=list(plan.thread_tile),
                    options=dict(plan.options), geometry_source=plan.geometry_source,
                    rel_error=err, bandwidth=dev.bandwidth, peak_flops=peak_of(plan, dtype),
                    dram_roof=roof, dram_fraction=moved / t / roof if roof else None,
                    engine=_engine(name),
                )  # fmt: skip
                rows.append(info)
                print(_line(info), flush=True)


def _engine(name: str) -> str | None:
    if name != "numba-cuda":
        return None
    mod = sys.modules.get("tiledmm_backends.numba_cuda.engine")
    return getattr(mod, "ENGINE", None)


def _line(r: dict) -> str:
    of = r["gflops"] / r["vendor_gflops"] if r.get("vendor_gflops") else float("nan")
    return (f"{r['backend']:<10} {r['requested_kernel']:>8}->{r['kernel']:<8} {r['dtype']} "
            f"{r['shape_class']:<9} {r['batch']}x{r['m']}x{r['n']}x{r['k']}: "
            f"{r['gflops']:9.1f} GFLOP/s, {of:5.2f} of vendor, "
            f"DRAM {r['dram_fraction']:.2f}")  # fmt: skip


def table(rows: list[dict]) -> str:
    """shape, class, auto family, auto / vendor per backend (vectors: of the DRAM roofline),
    and auto / the fastest configuration measured for that backend."""
    out = [
        "shape | class | "
        + " | ".join(
            f"{b} auto (fam) of vendor [of best]" for b in sorted({r["backend"] for r in rows})
        )
    ]
    keys = sorted({(r["dtype"], r["batch"], r["m"], r["n"], r["k"], r["shape_class"])
                   for r in rows})  # fmt: skip
    for key in keys:
        cells = []
        for be in sorted({r["backend"] for r in rows}):
            mine = [
                r
                for r in rows
                if (r["dtype"], r["batch"], r["m"], r["n"], r["k"], r["shape_class"]) == key
                and r["backend"] == be
            ]
            auto = next((r for r in mine if r["requested_kernel"] == "auto"), None)
            if auto is None:
                cells.append("-")
                continue
            best = max(r["gflops"] for r in mine)
            if key[-1] == "vector":
                val = f"{auto['dram_fraction']:.2f} DRAM"
            else:
                v = auto.get("vendor_gflops")
                val = f"{auto['gflops'] / v:.2f}" if v else "-"
            cells.append(f"{val} ({auto['kernel']}) [{auto['gflops'] / best:.2f}]")
        d, b, m, n, k, cls = key
        out.append(f"{d} {b}x{m}x{n}x{k} | {cls} | " + " | ".join(cells))
    return "\n".join(out)


def sweep(names, dtype, entries_path, save, classes=()) -> None:
    """Candidates per class (all, or ``classes``) on two shapes each; the best per class and
    backend."""
    from tiledmm_backends.kernels import shapes as cand

    rng = np.random.default_rng(5)
    found = []
    for name in names:
        be = tiledmm.get_backend(name)
        if name not in ("cupy", "opencl"):
            continue
        dev = be.device()
        for cls, probs in SWEEP.items():
            if classes and cls not in classes:
                continue
            bshape = SWEEP_BATCH.get(cls, ())
            scores: dict[tuple, list[float]] = {}
            for m, n, k in probs:
                A, B, ref = sweep_operands(be, bshape, m, n, k, dtype, rng)
                nb = math.prod(bshape or (1,))
                for fam in tiledmm.KERNEL_FAMILIES:
                    for geo in cand.candidates(fam, dtype, cls):
                        try:  # split_k="auto" resolved per shape; scores keyed by the candidate
                            run_geo = shapefit.resolve_split(geo, m, n, k, dev.compute_units, nb)
                            plan = tiledmm.make_plan(m, n, k, dtype=dtype, kernel=fam, device=dev,
                                                     geometry=run_geo, backend=name)  # fmt: skip
                            t = check_then_time(be, plan, A, B, ref, bshape, dtype)
                        except Exception as exc:  # noqa: BLE001
                            what = f"{fam} {geo.block_tile} {dict(geo.options)}"
                            print(f"  skip {name} {cls} {what}: {exc}")
                            continue
                        gf = 2 * nb * m * n * k / t / 1e9
                        key = (fam, geo.block_tile, geo.thread_tile, geo.options)
                        scores.setdefault(key, []).append(gf)
            full = {key: v for key, v in scores.items() if len(v) == len(probs)}
            if not full:
                continue
            gm = {key: math.exp(sum(map(math.log, v)) / len(v)) for key, v in full.items()}
            for (fam, bt, _, opts), g in sorted(gm.items(), key=lambda kv: -kv[1])[:10]:
                each = " ".join(f"{x:.0f}" for x in full[(fam, bt, _, opts)])
                print(f"  {name} {dtype} {cls}: {g:9.1f} GFLOP/s ({each}) {fam} {bt} {dict(opts)}")
            for (fam, bt, tt, opts), g, tag in best_per_family(gm, lambda key: key[0]):
                print(f"{tag} {name} {dtype} {cls}: {fam} {bt} {tt} {dict(opts)} {g:.1f} "
                      f"GFLOP/s (geomean over {probs})", flush=True)  # fmt: skip
                found.append(_entry(dev, name, dtype, fam, cls, bt, tt, opts, g, probs, bshape))
    if entries_path:
        tuning.write(Path(entries_path), found, "issue 11 shape sweep: best candidate per class")
        print(f"wrote {len(found)} entries to {entries_path}")
    if save and found:
        print(f"saved to the user tuning database: {tuning.save_entries(found)}")


def _entry(dev, name, dtype, fam, cls, bt, tt, opts, g, probs, bshape) -> dict:
    """A tuning-database entry for one measured candidate; with ``kernels`` and ``source`` it
    is also a ``backends/kernels/geometry.json`` entry as it stands (device + backend + class +
    measured.gflops: what ``kernel="auto"`` compares between families)."""
    where = f"{cls} shapes {[list(p) for p in probs]}"
    where += f" x batch {list(bshape)}" if bshape else ""
    return dict(
        kernels="gemm-c",
        source=f"benches/studies/shapes.py --sweep on {dev.name}, {dt.date.today().isoformat()}: "
        f"{g:.0f} GFLOP/s geomean over {where}",
        device=dev.name, backend=name, dtype=dtype, family=fam, shape_class=cls,
        block_tile=list(bt), thread_tile=list(tt), options=dict(opts),
        measured=dict(gflops=round(g, 1), date=dt.date.today().isoformat(),
                      shapes=[list(p) for p in probs], batch=list(bshape)),
    )  # fmt: skip


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="benches/results/h200-shapes.json")
    p.add_argument("--backends", default="cupy,opencl,numba-cuda")
    p.add_argument("--families", default="auto,naive,tiled,register")
    p.add_argument("--sizes", default="", help="comma list of indices into SHAPES (default all)")
    p.add_argument("--no-float64", action="store_true")
    p.add_argument("--sweep", action="store_true", help="time the per-class candidates")
    p.add_argument("--entries", default="", help="--sweep: write the best entries here")
    p.add_argument("--save", action="store_true", help="--sweep: add them to the user database")
    p.add_argument("--classes", default="", help="--sweep: only these classes (comma list)")
    p.add_argument("--dtype", default="float32", help="--sweep: the dtype swept")
    args = p.parse_args(argv)
    avail = {r.name for r in tiledmm.backends() if r.available}
    names = [b for b in args.backends.split(",") if b in avail]
    print(f"backends: {names} (available: {sorted(avail)})", flush=True)
    if args.sweep:
        only = tuple(c for c in args.classes.split(",") if c)
        sweep(names, args.dtype, args.entries, args.save, only)
        return 0
    vendor_be = tiledmm.get_backend("cupy") if "cupy" in avail else None
    shapes = SHAPES if not args.sizes else [SHAPES[int(i)] for i in args.sizes.split(",")]
    fams = args.families.split(",")
    rows: list[dict] = []
    for shape in shapes:  # the file is rewritten after each shape: a cut-off run keeps its rows
        run_set(names, fams, "float32", [shape], rows, vendor_be)
        write(rows, names, args)
    if not args.no_float64:
        for shape in [s for s in F64 if s in shapes] or F64[:1]:
            run_set(names[:1], ["auto", "register"], "float64", [shape], rows, vendor_be)
            write(rows, names, args)
    print(table(rows))
    return 0


def write(rows: list[dict], names: list[str], args) -> None:
    """The rows so far as pytest-benchmark JSON at ``args.out``."""
    st = SimpleNamespace(min_rounds=3, budget=0.15, warmup=2)
    benches = []
    for r in rows:
        e = results.benchmark_entry(r, [r["seconds"]], st)
        shape = f"{r['batch']}x{r['m']}x{r['n']}x{r['k']}"
        tag = f"{r['backend']}-{r['requested_kernel']}-{r['dtype']}-{shape}"
        e["name"], e["param"] = f"test_shapes[{tag}]", tag
        e["fullname"] = f"benches/studies/shapes.py::{e['name']}"
        benches.append(e)
    res = SimpleNamespace(benchmarks=benches, backends=[tiledmm.get_backend(n) for n in names],
                          skipped=[], failures=[])  # fmt: skip
    out = Path(args.out)
    results.write_results(res, out.parent, name=out.stem, command=" ".join(sys.argv))
    print(f"wrote {len(rows)} rows to {out}", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
