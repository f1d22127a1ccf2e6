"""The kernel ladder on an OpenCL device (PoCL's CPU device here) against numpy.matmul.

    python -m benches.studies.ladder_opencl [--sizes 512 1024] [--rounds 3] [--out FILE]

Rounds interleave the kernels so background load hits them alike; each figure is the best of
its rounds (median of 3 calls per round). Ratios are to numpy.matmul (OpenBLAS) in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

import numpy as np

import tiledmm


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[512, 1024])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    be = tiledmm.get_backend("opencl")
    dev = be.device()
    rows = []
    for n in args.sizes:
        rng = np.random.default_rng(0)
        a = rng.standard_normal((n, n)).astype(args.dtype)
        b = rng.standard_normal((n, n)).astype(args.dtype)
        A, B = be.asarray(a, a.dtype), be.asarray(b, b.dtype)
        ref = a.astype(np.float64) @ b.astype(np.float64)
        cases = {"numpy": lambda a=a, b=b: np.matmul(a, b)}
        for fam in be.kernels:
            cases[fam] = lambda fam=fam, A=A, B=B: tiledmm.matmul(
                A, B, backend="opencl", kernel=fam
            )  # noqa: E501
        best: dict[str, float] = {}
        for _ in range(args.rounds):
            for name, fn in cases.items():
                reps = 1 if name == "naive" and n > 512 else 3
                t = statistics.median(be.timings(fn, repeat=reps, warmup=1))
                best[name] = min(best.get(name, float("inf")), t)
        for name, t in best.items():
            g = 2 * n**3 / t / 1e9
            row = dict(backend="numpy" if name == "numpy" else "opencl", kernel=name,
                       device=dev.name, dtype=args.dtype, m=n, n=n, k=n, gflops=g,
                       vendor_gflops=2 * n**3 / best["numpy"] / 1e9)  # fmt: skip
            if name != "numpy":
                plan = tiledmm.plan(n, n, n, dtype=args.dtype, backend="opencl", kernel=name)
                c = be.to_numpy(cases[name]())
                err = float(np.linalg.norm(c - ref) / np.linalg.norm(ref))
                row.update(block_tile=plan.block_tile, thread_tile=plan.thread_tile,
                           intensity=plan.intensity, predicted_seconds=plan.predicted_seconds,
                           rel_error=err)  # fmt: skip
            row["ratio"] = row["gflops"] / row["vendor_gflops"]
            rows.append(row)
            print(f"{n:5} {name:9} {g:8.2f} GFLOP/s  {row['ratio']:.3f} of numpy", flush=True)
    info = dict(cpu=dev.name, opencl=dict(dev.extra).get("opencl", ""),
                python=platform.python_version(), numpy=np.__version__,
                loadavg=os.getloadavg(), date=time.strftime("%Y-%m-%dT%H:%M:%S"))  # fmt: skip
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"machine_info": info, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
