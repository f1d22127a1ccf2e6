"""16-bit ``auto`` as users call it (issue 38): ``tiledmm.matmul(a, b)`` on CuPy float16 arrays
(kernel "auto", no ``out=``) beside ``cupy.matmul`` (cuBLAS) on the same arrays, in one process.
``--dtype`` float32 or float64 runs the same shapes in that dtype; bfloat16 is not a CuPy dtype
(on an H100, session 22, it ran some other product at 0.06-0.29 of cuBLAS with error 0): its
rows come from ``benches.studies.mma_results --dtypes bfloat16`` on torch tensors.

    python -m benches.studies.half_auto --out benches/data/h200-half-auto.json [--shapes set]

The shapes are issue 38's: the large squares, the prefill shapes, odd shapes, decode (M = 1,
8, 32) and the batches (16 x 512^3, 48 x 384^3 in one call). Each result is checked first
against a float32 product of the same inputs (relative Frobenius error, beside cuBLAS's own).
Times are CUDA events around one call after warm-up, medians over alternating rounds (ours,
then the vendor, the order swapped each round); the table gives TFLOP/s and ours / cuBLAS,
then the geometric mean. Writes JSON with the card, the driver and the commit.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

import numpy as np

import tiledmm
from tiledmm.bench.machine import commit_info, machine_info
from tiledmm.core import dispatch
from tiledmm.planner.make import batch_plan

# (batch, m, n, k)
SHAPES = {
    "large": [(1, 4096, 4096, 4096), (1, 6144, 6144, 6144), (1, 8192, 8192, 8192)],
    "prefill": [(1, 2048, 6144, 4096), (1, 2048, 14336, 4096), (1, 2048, 4096, 14336)],
    "odd": [(1, 3000, 5000, 1000), (1, 4095, 4095, 4095), (1, 1000, 3000, 777)],
    "decode": [(1, 1, 14336, 4096), (1, 8, 14336, 4096), (1, 32, 14336, 4096)],
    "batched": [(16, 512, 512, 512), (48, 384, 384, 384)],
}


def _events(cp, fn, reps: int) -> list[float]:
    """Seconds per call between two CUDA events, the GPU idle before each: the host time of
    the call is inside (as users meet it), unlike the backends' ``timings``, which keep the GPU
    busy with a spin kernel meanwhile to measure the device time alone."""
    out = []
    for _ in range(reps):
        s, e = cp.cuda.Event(), cp.cuda.Event()
        s.record()
        fn()
        e.record()
        e.synchronize()
        out.append(cp.cuda.get_elapsed_time(s, e) / 1e3)
    return out


def measure(cp, batch: int, m: int, n: int, k: int, dtype: str, rounds: int = 4) -> dict:
    rng = np.random.default_rng(m * 7 + n * 3 + k + batch)
    lead = (batch,) if batch > 1 else ()
    a = cp.asarray(rng.standard_normal((*lead, m, k)).astype(dtype))
    b = cp.asarray(rng.standard_normal((*lead, k, n)).astype(dtype))
    ref = cp.matmul(a.astype(cp.float32), b.astype(cp.float32))
    nrm = float(cp.linalg.norm(ref)) or 1.0
    got = tiledmm.matmul(a, b)
    again = tiledmm.matmul(a, b)  # the hot path (a bound launch where there is one)
    vend = cp.matmul(a, b)
    err = max(float(cp.linalg.norm(x.astype(cp.float32) - ref)) / nrm for x in (got, again))
    verr = float(cp.linalg.norm(vend.astype(cp.float32) - ref)) / nrm
    flops = 2.0 * batch * m * n * k
    reps = max(3, min(50, int(0.2 / max(flops / 5e14, 1e-6))))
    ours, vendor = [], []
    for r in range(rounds):
        pair = [(ours, lambda: tiledmm.matmul(a, b)), (vendor, lambda: cp.matmul(a, b))]
        for sink, fn in pair if r % 2 == 0 else pair[::-1]:
            _events(cp, fn, 2)  # warm-up
            sink += _events(cp, fn, reps)
    t, tv = statistics.median(ours), statistics.median(vendor)
    be = tiledmm.get_backend("cupy")
    plan = dispatch.plan_for(be, m, n, k, dtype, batch=batch)
    if batch > 1:
        plan = batch_plan(plan, batch)
    return dict(batch=batch, m=m, n=n, k=k, dtype=dtype, seconds=t, vendor_seconds=tv,
                tflops=flops / t / 1e12, vendor_tflops=flops / tv / 1e12, of_vendor=tv / t,
                rel_error=err, vendor_rel_error=verr, ok=err <= 2 * verr + 1e-3,
                kernel=plan.kernel, options=dict(plan.options),
                predicted_seconds=plan.predicted_seconds)  # fmt: skip


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dtype", default="float16", choices=["float16", "float32", "float64"],
                   help="CuPy arrays of this dtype (bfloat16, which CuPy lacks, runs on torch "
                   "tensors: benches.studies.mma_results --dtypes bfloat16)")
    p.add_argument("--shapes", default=",".join(SHAPES), help="classes: " + ",".join(SHAPES))
    p.add_argument("--out", default="half-auto.json")
    args = p.parse_args(argv)
    import cupy as cp

    rows = []
    for cls in args.shapes.split(","):
        for bt, m, n, k in SHAPES[cls]:
            try:
                row = dict(measure(cp, bt, m, n, k, args.dtype), shape_class=cls)
            except Exception as exc:  # noqa: BLE001 - one broken shape must not end the run
                print(f"{bt}x{m}x{n}x{k}: {type(exc).__name__}: {exc}", flush=True)
                continue
            rows.append(row)
            print(f"{cls:8s} {bt:3d} x {m}x{n}x{k:<6d} {row['tflops']:7.1f} TFLOP/s "
                  f"{row['of_vendor']:5.2f} of cuBLAS ({row['vendor_tflops']:.1f}); error "
                  f"{row['rel_error']:.1e} (cuBLAS {row['vendor_rel_error']:.1e})"
                  f"{'' if row['ok'] else ' WRONG'}; predicted/measured "
                  f"{row['predicted_seconds'] / row['seconds']:.2f}", flush=True)  # fmt: skip
    gm = math.exp(statistics.fmean(math.log(r["of_vendor"]) for r in rows)) if rows else 0
    print(f"geometric mean {gm:.3f} of cuBLAS over {len(rows)} shapes; lowest "
          f"{min((r['of_vendor'] for r in rows), default=0):.2f}")  # fmt: skip
    doc = dict(about=__doc__.splitlines()[0], machine_info=machine_info(),
               commit=commit_info(), rows=rows, geomean_of_vendor=gm)  # fmt: skip
    Path(args.out).write_text(json.dumps(doc, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
