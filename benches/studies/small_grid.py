"""How far a small grid's register tile should shrink (issue 11): ``min_tile`` on a GPU.

    python -m benches.studies.small_grid [--write]

``shapefit.fit_grid`` halves the shared C sources' 128x128 register tile once (to 128x64) when
the grid is under 1.5 blocks per SM; with the option ``min_tile`` it keeps halving (longer side
first) down to that size. For each backend (cupy, opencl) and each small-grid product (256^3,
512^3, 1024^3, 257x4097x1031), the shipped tile of the product's class runs as dispatch would
run it with ``min_tile`` absent, 64 and 32; each is checked (NaN-poisoned output, float64
reference), then timed (device time) beside cuBLAS on the same arrays. Prints the table and the
geometric mean per choice; ``--write`` puts the best choice into the H200 float32 register
entries of ``geometry.json`` (square and odd classes, and the class-free entry) when it beats
the current rule by 3% or more on both backends' geometric mean.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
from dataclasses import replace

import numpy as np

os.environ.setdefault("CUPY_TF32", "0")

import tiledmm
from tiledmm.core import tuning
from tiledmm.planner import shapefit
from tiledmm.util.accuracy import rel_error

SHAPES = [(256, 256, 256), (512, 512, 512), (1024, 1024, 1024), (257, 4097, 1031)]
CHOICES = (None, 64, 32)


def with_min_tile(geo, mt):
    opts = {k: v for k, v in geo.options if k != "min_tile"}
    if mt:
        opts["min_tile"] = mt
    return replace(geo, options=tuple(sorted(opts.items())))


def median_time(be, fn, reps: int = 20) -> float:
    return statistics.median(be.timings(fn, repeat=reps, warmup=3))


def measure(names) -> dict:
    """{(backend, choice): [fraction of cuBLAS per shape]}"""
    cub = tiledmm.get_backend("cupy")
    rng = np.random.default_rng(4)
    out: dict = {}
    for m, n, k in SHAPES:
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        ref = a.astype(np.float64) @ b
        ca, cb = cub.asarray(a, a.dtype), cub.asarray(b, b.dtype)
        tv = median_time(cub, lambda ca=ca, cb=cb: cub.vendor_matmul(ca, cb))
        for name in names:
            be = tiledmm.get_backend(name)
            dev = be.device()
            cls = tuning.shape_class(m, n, k)
            base = tuning.select(be, "register", "float32", dev, cls)
            A, B = be.asarray(a, a.dtype), be.asarray(b, b.dtype)
            for mt in CHOICES:
                geo = shapefit.for_product(with_min_tile(base, mt), "register", m, n, k, dev, cls,
                                          1, "float32", name)  # fmt: skip
                plan = tiledmm.make_plan(m, n, k, dtype="float32", kernel="register", device=dev,
                                         geometry=geo, backend=name)  # fmt: skip
                C = be.asarray(np.full((m, n), np.nan, np.float32), np.dtype(np.float32))
                be.run(plan, A, B, C)
                err = rel_error(be.to_numpy(C), ref)
                if not err < 1e-5:
                    print(f"WRONG {name} {m}x{n}x{k} min_tile={mt}: {err:.3g}")
                    continue
                t = median_time(be, lambda p=plan, C=C, A=A, B=B, be=be: be.run(p, A, B, C))
                out.setdefault((name, mt), []).append(tv / t)
                print(f"{name:7s} {m}x{n}x{k:<5d} min_tile={mt!s:4s} {plan.block_tile} "
                      f"{plan.thread_tile}: {t * 1e6:7.1f} us, cuBLAS {tv * 1e6:7.1f} us, "
                      f"{tv / t:.2f} of cuBLAS", flush=True)  # fmt: skip
    return out


def write(choice: int, path) -> int:
    """Set ``min_tile`` on the H200 gemm-c float32 register entries (square, odd, no class)."""
    from tiledmm_backends import kernels as K

    entries = K.geometry_entries(path)
    n = 0
    for e in entries:
        if (e.get("kernels"), e.get("device"), e.get("family")) == ("gemm-c", "NVIDIA H200",
                                                                   "register") and \
                e.get("dtype", "float32") == "float32" and e.get("shape_class") in (
                    None, "square", "odd"):  # fmt: skip
            e["options"] = dict(e.get("options", {}), min_tile=choice)
            n += 1
    K.write_geometry(path, entries)
    return n


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backends", default="cupy,opencl")
    p.add_argument("--write", action="store_true")
    args = p.parse_args(argv)
    names = args.backends.split(",")
    res = measure(names)
    gm = {}
    for mt in CHOICES:
        vals = [v for name in names for v in res.get((name, mt), [])]
        if len(vals) == len(names) * len(SHAPES):
            gm[mt] = math.exp(statistics.fmean(map(math.log, vals)))
    print("geometric mean of cuBLAS over", SHAPES, {str(k): round(v, 3) for k, v in gm.items()})
    best = max(gm, key=gm.get) if gm else None
    if args.write and best is not None and None in gm and gm[best] >= 1.03 * gm[None]:
        from tiledmm_backends import kernels as K

        print(f"min_tile={best} written to {write(best, K.DATABASE)} entries of {K.DATABASE}")
    else:
        print(f"kept the current rule (best: min_tile={best})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
