"""numba-cuda's per-class candidates (issue 11): each candidate geometry on the shape sweep's two
shapes per class, as ``kernel="auto"`` would run it (the tile turned to a skinny product's short
side, halved for a small grid, ``split_k="auto"`` resolved per shape), checked against a
float64 reference into a NaN-poisoned output, then timed (device time, CUDA events). Prints the
best per class and family and writes them as ``backends/kernels/geometry.json`` entries
(``kernels: "numba"`` with ``measured.gflops``, which ``kernel="auto"`` compares between families).

    python -m benches.studies.numba_classes --entries numba-classes.json [--classes
    vector,skinny_mn]

The candidates are :data:`CANDIDATES` (one place; float32), the shapes :data:`PROBLEMS`. Each
distinct tile, split and gemv orientation compiles once (Numba, cached on disk): the first run
pays the compiles.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
from pathlib import Path

import numpy as np

import tiledmm
from benches.studies.shapes import (
    SWEEP,
    SWEEP_BATCH,
    best_per_family,
    check_then_time,
    sweep_operands,
)
from tiledmm import Geometry
from tiledmm.core import tuning
from tiledmm.planner import shapefit

_REG = dict(layout="strided", pad=4, unroll_k=True, stages=2)


def _g(fam, bt, tt=(1, 1), **opts):
    return fam, Geometry(tuple(bt), tuple(tt), tuple(sorted(opts.items())), source="candidate")


_SQUARE = [
    _g("register", (128, 128, 8), (8, 8), **_REG),  # no small-grid halving
    _g("register", (128, 128, 8), (8, 8), **_REG, min_tile=32),  # the shipped rule
    _g("register", (128, 128, 8), (8, 8), **_REG, min_tile=64),
    _g("register", (128, 128, 8), (8, 8), **_REG, split_k="auto"),
    _g("tiled", (16, 16, 16)),
]
_SKINNY = [
    _g("register", (32, 128, 8), (4, 8), **_REG, split_k="auto", min_tile=32),  # shipped
    _g("register", (32, 64, 8), (4, 4), **_REG, split_k="auto", min_tile=32),
    _g("register", (64, 64, 8), (4, 4), **_REG, split_k="auto", min_tile=32),
    _g("register", (16, 64, 8), (2, 4), **_REG, split_k="auto", min_tile=16),
    _g("register", (32, 128, 8), (4, 8), **_REG, min_tile=32),  # no split
    _g("naive", (4, 32, 1), gemv=1, ks=8),
    _g("naive", (8, 16, 1), gemv=1, ks=16),
    _g("tiled", (16, 16, 16)),
]
_VECTOR = [
    _g("naive", (1, 16, 1), gemv=1, ks=32),  # shipped
    _g("naive", (1, 32, 1), gemv=1, ks=16),
    _g("naive", (1, 32, 1), gemv=1, ks=32),
    _g("naive", (1, 64, 1), gemv=1, ks=8),
    _g("naive", (1, 8, 1), gemv=1, ks=32),
    _g("naive", (1, 16, 1), gemv=1, ks=32, split_k=2),
    _g("tiled", (16, 16, 16)),
    _g("register", (32, 128, 8), (4, 8), **_REG, split_k="auto", min_tile=32),
]
_BATCHED = [
    _g("register", (128, 128, 8), (8, 8), **_REG, min_tile=32),
    _g("register", (128, 64, 8), (8, 4), **_REG),
    _g("register", (64, 64, 8), (4, 4), **_REG),
]
#: the shapes per class: the shape sweep's, and the small squares the halving is for
PROBLEMS = dict(SWEEP, square=[(256, 256, 256), (512, 512, 512)] + SWEEP["square"])
#: class -> (family, geometry) candidates for numba-cuda (float32, GPU)
CANDIDATES = {"square": _SQUARE, "odd": _SQUARE, "skinny_k": _SQUARE[:3], "skinny_mn": _SKINNY,
              "batched": _BATCHED, "vector": _VECTOR}  # fmt: skip


def sweep(classes: list[str], dtype: str = "float32") -> list[dict]:
    be = tiledmm.get_backend("numba-cuda")
    dev = be.device()
    rng = np.random.default_rng(5)
    found = []
    for cls in classes:
        probs, bshape = PROBLEMS[cls], SWEEP_BATCH.get(cls, ())
        nb = math.prod(bshape or (1,))
        scores: dict[int, list[float]] = {}
        for m, n, k in probs:
            A, B, ref = sweep_operands(be, bshape, m, n, k, dtype, rng)
            for i, (fam, geo) in enumerate(CANDIDATES[cls]):
                try:
                    run_geo = shapefit.for_product(geo, fam, m, n, k, dev, cls, nb, dtype, be.name)
                    plan = tiledmm.make_plan(m, n, k, dtype=dtype, kernel=fam, device=dev,
                                             geometry=run_geo, backend=be.name)  # fmt: skip
                    t = check_then_time(be, plan, A, B, ref, bshape, dtype)
                except Exception as exc:  # noqa: BLE001
                    print(f"  skip {cls} {fam} {geo.block_tile} {dict(geo.options)}: {exc}")
                    continue
                gf = 2 * nb * m * n * k / t / 1e9
                what = f"{fam} {plan.block_tile} {plan.thread_tile} {dict(plan.options)}"
                print(f"  {cls} {(m, n, k)} {what}: {t * 1e6:.1f} us, {gf:.0f} GFLOP/s", flush=True)
                scores.setdefault(i, []).append(gf)
        gm = {i: math.exp(sum(map(math.log, v)) / len(v))
              for i, v in scores.items() if len(v) == len(probs)}  # fmt: skip
        cands = CANDIDATES[cls]
        for i, g, tag in best_per_family(gm, lambda i, c=cands: c[i][0]):
            fam, geo = cands[i]
            print(f"{tag} {cls}: {fam} {geo.block_tile} {geo.thread_tile} {dict(geo.options)} "
                  f"{g:.0f} GFLOP/s (geomean over {probs})", flush=True)  # fmt: skip
            found.append(_entry(dev.name, dtype, fam, cls, geo, g, probs, bshape))
    return found


def _entry(device: str, dtype: str, fam: str, cls: str, geo: Geometry, g: float, probs,
           bshape) -> dict:  # fmt: skip
    today = dt.date.today().isoformat()
    where = f"{cls} shapes {[list(p) for p in probs]}"
    where += f" x batch {list(bshape)}" if bshape else ""
    return dict(
        kernels="numba", device=device, dtype=dtype, shape_class=cls, family=fam,
        **geo.to_dict(),
        source=f"benches/studies/numba_classes.py on {device}, {today}: {g:.0f} GFLOP/s geomean "
        f"over {where}",
        measured=[dict(backend="numba-cuda", gflops=round(g, 1), date=today,
                       shapes=[list(p) for p in probs], batch=list(bshape))],
    )  # fmt: skip


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--classes", default=",".join(CANDIDATES))
    p.add_argument("--entries", default="", help="write the best entries here (JSON)")
    args = p.parse_args(argv)
    found = sweep(args.classes.split(","))
    if args.entries:
        note = "benches/studies/numba_classes.py: best per class/family"
        tuning.write(Path(args.entries), found, note)
        print(f"wrote {len(found)} entries to {args.entries}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
