"""Vectors and skinny products on one GPU: every shape-class candidate of the gemv path and the
register family, CuPy and OpenCL, beside cupy.matmul; time from back-to-back calls.

    python -m benches.probes.skinny_check [--bandwidth 4.06e12] [--backends cupy,opencl]
        [--timer loop|events] [--shapes 1x4096x4096,...]

Prints microseconds per product, GFLOP/s, fraction of cuBLAS, and the fraction of the DRAM
roofline (bytes of A, B and C once, over the time, of ``--bandwidth``), best first per shape.
``--timer events`` times each call as the benches do (``Backend.timings``: behind a spin
kernel, between device events, median of 30) instead of a back-to-back loop.
"""

from __future__ import annotations

import argparse
import os
import statistics

import numpy as np

os.environ.setdefault("CUPY_TF32", "0")

import tiledmm
from benches.probes.batched_check import cupy_times, opencl_times
from tiledmm import make_plan
from tiledmm.core import tuning
from tiledmm.planner import shapefit

SHAPES = [(1, 4096, 4096), (4096, 1, 4096), (1, 8192, 8192), (16384, 1, 16384),
          (64, 4096, 4096), (4096, 32, 4096), (16, 8192, 8192), (4096, 64, 4096)]  # fmt: skip


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bandwidth", type=float, default=4.06e12, help="DRAM bytes/s (measured)")
    p.add_argument("--backends", default="cupy,opencl")
    p.add_argument("--timer", choices=["loop", "events"], default="loop")
    p.add_argument("--shapes", default="", help="MxNxK list instead of the default set")
    args = p.parse_args(argv)
    shapes = SHAPES
    if args.shapes:
        shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    import cupy as cp
    from tiledmm_backends.kernels import shapes as cand

    rng = np.random.default_rng(7)
    for m, n, k in shapes:
        cls = tuning.shape_class(m, n, k)
        a = rng.random((m, k), dtype=np.float32) * 2 - 1
        b = rng.random((k, n), dtype=np.float32) * 2 - 1
        ref = a.astype(np.float64) @ b
        flops, moved = 2 * m * n * k, 4 * (m * k + k * n + m * n)
        A, B, C = cp.asarray(a), cp.asarray(b), cp.empty((m, n), np.float32)
        vend = timed(args.timer, cp, tiledmm.get_backend("cupy"),
                     lambda A=A, B=B, C=C: cp.matmul(A, B, out=C))  # fmt: skip
        rows = [("cuBLAS", vend, 0.0)]
        for name in args.backends.split(","):
            be = tiledmm.get_backend(name)
            if not be.available:
                continue
            X, Y = be.asarray(a, a.dtype), be.asarray(b, b.dtype)
            out = be.empty((m, n), np.dtype("float32"))

            def auto(name=name, X=X, Y=Y):  # as a user calls it
                return tiledmm.matmul(X, Y, backend=name)

            auto()
            rows.append((f"{name} auto {tiledmm.plan(m, n, k, backend=name).block_tile}",
                         timed(args.timer, cp, be, auto), 0.0))  # fmt: skip
            for fam in ("naive", "register"):
                for geo in cand.candidates(fam, "float32", cls):
                    label = f"{name} {fam} {geo.block_tile} {dict(geo.options)}"
                    try:
                        dev = be.device()
                        geo = shapefit.resolve_split(geo, m, n, k, dev.compute_units)
                        label += f" (split {dict(geo.options).get('split_k', 1)})"
                        plan = make_plan(m, n, k, dtype="float32", kernel=fam, device=dev,
                                         geometry=geo, backend=name)  # fmt: skip

                        def fn(be=be, plan=plan, X=X, Y=Y, out=out):
                            be.run(plan, X, Y, out)

                        fn()
                        err = float(np.abs(be.to_numpy(out) - ref).max() / np.abs(ref).max())
                        if not err < 1e-4:
                            print(f"WRONG {label}: {err:.2e}")
                            continue
                        rows.append((label, timed(args.timer, cp, be, fn), err))
                    except Exception as exc:  # noqa: BLE001 - one candidate must not end the run
                        print(f"FAILED {label}: {type(exc).__name__}: {exc}")
        print(f"== {m}x{n}x{k} ({cls}); DRAM-bound minimum {moved / args.bandwidth * 1e6:.1f} us")
        for label, t, _ in sorted(rows, key=lambda r: r[1]):
            print(f"  {t * 1e6:8.1f} us {flops / t / 1e9:8.0f} GFLOP/s  {vend / t:5.2f} of cuBLAS "
                  f" {moved / t / args.bandwidth:5.2f} of DRAM  {label}", flush=True)  # fmt: skip
    return 0


def timed(timer: str, cp, be, fn) -> float:
    """Seconds per call of ``fn`` on ``be``: the median of 30 device-timed calls
    (``Backend.timings``, ``timer`` "events"), else the per-call time of a back-to-back loop."""
    if timer == "events":
        return statistics.median(be.timings(fn, repeat=30, warmup=3))
    return (cupy_times(cp, fn) if be.name == "cupy" else opencl_times(be, fn))[1]


if __name__ == "__main__":
    raise SystemExit(main())
