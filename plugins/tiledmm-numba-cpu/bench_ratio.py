"""Ratio of numba-cpu's families to numpy.matmul, measured in one run.

    python plugins/tiledmm-numba-cpu/bench_ratio.py [--n 1024] [--dtype float32] [--rounds 5]

Rounds alternate between the contenders (each timed ``--reps`` times per round, after a
warm-up that also compiles), so load from other processes hits all of them; the figure is the
median over every timed call. Prints GFLOP/s, the ratio to numpy.matmul and the speedups.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np

import tiledmm


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--naive-n", type=int, default=512, help="naive is slow: time it at this N")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    be = tiledmm.get_backend("numba-cpu")

    def case(n: int, kernel: str | None):
        a = rng.standard_normal((n, n)).astype(args.dtype)
        b = rng.standard_normal((n, n)).astype(args.dtype)
        c = np.empty((n, n), args.dtype)
        if kernel is None:
            return a, b, (lambda: np.matmul(a, b, out=c))
        plan = tiledmm.plan(n, n, n, dtype=args.dtype, backend="numba-cpu", kernel=kernel)
        return a, b, (lambda: be.run(plan, a, b, c)), c, plan

    n, nn = args.n, args.naive_n
    cases = {
        f"numpy@{n}": case(n, None),
        f"numpy@{nn}": case(nn, None),
        f"naive@{nn}": case(nn, "naive"),
        f"tiled@{n}": case(n, "tiled"),
        f"register@{n}": case(n, "register"),
    }
    for key, cs in cases.items():
        cs[2]()  # warm-up + JIT
        if len(cs) > 3:
            ref = cs[0].astype(np.float64) @ cs[1]
            err = np.linalg.norm(cs[3] - ref) / np.linalg.norm(ref)
            print(f"{key}: plan {cs[4].block_tile} {cs[4].thread_tile}, rel_error {err:.2e}")
    times: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(args.rounds):
        for key, cs in cases.items():
            for _ in range(args.reps):
                t0 = time.perf_counter()
                cs[2]()
                times[key].append(time.perf_counter() - t0)
    gf = {}
    for key, ts in times.items():
        size = int(key.split("@")[1])
        gf[key] = 2 * size**3 / float(np.median(ts)) / 1e9
    print(
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cpus, {args.dtype}, "
        f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}, "
        f"median of {args.rounds}x{args.reps}"
    )
    for key, g in gf.items():
        size = key.split("@")[1]
        print(f"  {key:14} {g:8.2f} GFLOP/s  {g / gf['numpy@' + size]:.3f} of numpy.matmul")
    print(
        f"  speedups: naive->tiled {gf[f'tiled@{n}'] / gf[f'naive@{nn}']:.1f}x, "
        f"tiled->register {gf[f'register@{n}'] / gf[f'tiled@{n}']:.2f}x"
    )


if __name__ == "__main__":
    main()
