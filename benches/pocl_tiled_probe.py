"""The tiled family's local-memory layouts on an OpenCL CPU device (PoCL), geometry by geometry.

    python benches/pocl_tiled_probe.py [--sizes 512 1024] [--out FILE]

Times the GPU layout (``Bs[k][n]``, K loop unrolled) against the CPU layout (``b_transposed``:
``Bs[n][k]``, rolled K loop) over a few group shapes, with the naive kernel as the baseline;
OpenCL profiling events, median of 3 calls after one warm-up. docs/kernels.md explains the gap.
"""

from __future__ import annotations

import argparse
import json
import statistics

import tiledmm
from tiledmm.bench import Inputs, rel_error

GEOMETRIES = [  # (block tile, options)
    ((8, 8, 32), {"vec_smem": 1, "split": 4}),  # the old PoCL default
    ((16, 16, 16), {"vec_smem": 0}),
    ((16, 16, 64), {"b_transposed": 1, "split": 8}),
    ((32, 32, 32), {"b_transposed": 1, "split": 8}),
    ((32, 32, 64), {"b_transposed": 1, "split": 8}),  # the committed default
    ((64, 32, 32), {"b_transposed": 1, "split": 8}),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[512, 1024])
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    be = tiledmm.get_backend("opencl")
    dev = be.device()
    rows = []
    for n in args.sizes:
        x = Inputs(n, n, n, "float32")
        A, B = be.asarray(x.a, x.a.dtype), be.asarray(x.b, x.b.dtype)
        C = be.empty((n, n), x.a.dtype)
        cases = [("naive", None, {})] + [("tiled", bt, opt) for bt, opt in GEOMETRIES]
        for kernel, bt, opt in cases:
            geo = tiledmm.Geometry(bt, (1, 1), tuple(opt.items())) if bt else None
            plan = tiledmm.make_plan(n, n, n, dtype="float32", kernel=kernel, device=dev,
                                     geometry=geo or be.geometry(kernel, "float32", dev),
                                     backend="opencl")  # fmt: skip
            call = lambda p=plan, A=A, B=B, C=C: be.run(p, A, B, C)  # noqa: E731
            t = statistics.median(be.timings(call, repeat=3, warmup=1))
            err = rel_error(be.to_numpy(C), x.ref)
            row = dict(n=n, kernel=kernel, block_tile=plan.block_tile, options=opt,
                       gflops=2 * n**3 / t / 1e9, rel_error=err)  # fmt: skip
            rows.append(row)
            tile = f"{plan.block_tile!s:15} {opt!s:40}"
            print(f"{n:5} {kernel:6} {tile} {row['gflops']:6.2f} GFLOP/s", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": dev.name, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
