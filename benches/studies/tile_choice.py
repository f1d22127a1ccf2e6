"""Register tiles against the grid they make: which tile wins at which size (issue 11).

    python -m benches.studies.tile_choice --backends cupy,opencl --out $OUT/tile-choice.json
        [--shapes 512x512x512,1024x1024x1024] [--candidates 128x64,64x64]

Every shape (squares and odd sizes from one wave of 128x128 blocks to many) runs every
candidate geometry through ``make_plan`` + ``Backend.run`` on the same arrays, checked first
(NaN-poisoned output, float64 reference), then timed with the backend's device events beside
the vendor library. Prints one line per shape: each candidate's fraction of the vendor and the
number of 128x128 blocks per SM, the quantity the choice should follow.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path

os.environ.setdefault("CUPY_TF32", "0")

import tiledmm
from tiledmm import Geometry
from tiledmm.bench.sweep import Case, Inputs, Settings, measure_case, vendor_result
from tiledmm.planner import shapefit

REG = (("pad", 4), ("stages", 2), ("use_local", 1), ("vm", 4), ("vn", 4))
#: every halving fit_grid chooses among (128x128 -> 32x32, as shapefit.halvings makes them),
#: beside split-K, min_blocks and group_m variants
HALVED = {"x".join(map(str, g.block_tile[:2])): g
          for g in shapefit.halvings(Geometry((128, 128, 16), (8, 8), REG))}  # fmt: skip
CANDIDATES = {
    "128x128": HALVED["128x128"],
    "128x128/auto-split": Geometry((128, 128, 16), (8, 8), REG + (("split_k", "auto"),)),
    "128x64": HALVED["128x64"],
    "128x64/mb3": Geometry((128, 64, 16), (8, 4), REG + (("min_blocks", 3),)),
    "128x64/auto-split": Geometry((128, 64, 16), (8, 4), REG + (("split_k", "auto"),)),
    "128x128/g8": Geometry((128, 128, 16), (8, 8), REG + (("group_m", 8),)),
    "64x64": HALVED["64x64"],
    "64x32": HALVED["64x32"],
    "32x32": HALVED["32x32"],
}
SHAPES = [(1024, 1024, 1024), (1536, 1536, 1536), (2048, 2048, 2048), (3072, 3072, 3072),
          (4096, 4096, 4096), (1000, 3000, 777), (257, 4097, 1031), (2000, 2000, 2000),
          (3000, 3000, 3000), (4095, 4095, 4095), (6000, 6000, 6000)]  # fmt: skip


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backends", default="cupy,opencl")
    p.add_argument("--out", default="tile-choice.json")
    p.add_argument("--shapes", default=None, help="MxNxK,... (default: the built-in set)")
    p.add_argument("--candidates", default=None, help="labels, comma-separated (default: all)")
    args = p.parse_args(argv)
    settings = Settings(budget=0.2, min_rounds=5, max_rounds=30, warmup=2)
    shapes = SHAPES
    if args.shapes:
        shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    chosen = {k: v for k, v in CANDIDATES.items()
              if not args.candidates or k in args.candidates.split(",")}  # fmt: skip
    rows = []
    for name in args.backends.split(","):
        be = tiledmm.get_backend(name)
        dev = be.device()
        for m, n, k in shapes:
            case = Case(be, Inputs(m, n, k, "float32", seed=3))
            vend = vendor_result(case, settings)["seconds"]
            per_sm = -(-m // 128) * -(-n // 128) / dev.compute_units
            line = [f"{name:6s} {m}x{n}x{k:<5d} {per_sm:5.2f} blocks/SM:"]
            for label, geo in chosen.items():
                geo = shapefit.resolve_split(geo, m, n, k, dev.compute_units)
                try:
                    plan = tiledmm.make_plan(m, n, k, dtype="float32", kernel="register",
                                             device=dev, geometry=geo, backend=name)  # fmt: skip
                    err, times = measure_case(case, plan, settings)
                except Exception as exc:  # noqa: BLE001
                    line.append(f"{label} failed ({type(exc).__name__})")
                    continue
                if not times:
                    line.append(f"{label} WRONG ({err:.2g})")
                    continue
                t = statistics.median(times)
                rows.append(dict(backend=name, m=m, n=n, k=k, candidate=label, seconds=t,
                                 vendor_seconds=vend, of_vendor=vend / t, rel_error=err,
                                 split_k=dict(geo.options).get("split_k", 1),
                                 blocks_per_sm_128=per_sm))  # fmt: skip
                line.append(f"{label} {vend / t:.2f}")
            print("  ".join(line), flush=True)
    Path(args.out).write_text(json.dumps({"rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
