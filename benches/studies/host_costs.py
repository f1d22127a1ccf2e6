"""Small and skinny products on this machine's CPU backends, measured against the model with
and without the calibration (issue 37: the per-call host cost in every prediction).

    python -m benches.studies.host_costs --cache before=EMPTY_DIR --cache after=CALIBRATED_DIR \
        [--cache host-cost-only=DIR]

Each ``--cache NAME=DIR`` is a cache folder the rows are predicted with: one with no
calibration (estimated ceilings, each backend's estimated ``launch_overhead``), one where
``tiledmm calibrate --quick --backend B`` ran for each backend, and (``--host-only-from``)
the latter's host costs alone, written to a new folder, to tell the host costs' effect from
the ceilings'. The folders' own tuning databases decide the tiles; first use is off. Each row
is ``tiledmm.matmul`` as users call it (the backend's own arrays, ``kernel="auto"``, the hot
path after the first call, each call waited for), the median wall time of many calls, against
the plan that call ran under each cache. The table is ``modelcheck``'s, every row held to the
CPU band (modelcheck holds only M*N*K >= 1024^3); the counts per backend come last.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

os.environ["TILEDMM_FIRST_USE_TUNING"] = "0"  # the tiles the caches hold, nothing timed

import tiledmm  # noqa: E402
from tiledmm.core import dispatch  # noqa: E402
from tiledmm.report.modelcheck import CPU_BAND, Row, format_table  # noqa: E402

SMALL = [(n, n, n) for n in (4, 16, 32, 64, 128, 256)]
SKINNY = [(1, 512, 512), (512, 1, 512), (16, 2048, 256), (2048, 16, 256), (1024, 1024, 16),
          (512, 512, 32), (64, 64, 4096)]  # fmt: skip
BACKENDS = ("numpy", "numba-cpu", "opencl")


def median_wall(be, fn, budget: float = 0.3, most: int = 300) -> float:
    """Median wall seconds per call of ``fn`` (each waited for), after three untimed calls."""
    for _ in range(3):
        fn()
    be.synchronize()
    out: list[float] = []
    end = time.perf_counter() + budget
    while len(out) < most and (len(out) < 7 or time.perf_counter() < end):
        t0 = time.perf_counter()
        fn()
        be.synchronize()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def use(cache: str) -> None:
    os.environ["TILEDMM_CACHE_DIR"] = cache
    dispatch.clear_caches()


def rows_for(be, shapes, caches: dict[str, str], rng) -> dict[str, list[Row]]:
    """Each shape's row under each cache; a launch two caches plan alike is timed once (the
    same measurement beside both predictions: only the model differs)."""
    out: dict[str, list[Row]] = {name: [] for name in caches}
    dt = np.dtype("float32")
    for m, n, k in shapes:
        a = be.asarray((rng.random((m, k)) * 2 - 1).astype(dt), dt)
        b = be.asarray((rng.random((k, n)) * 2 - 1).astype(dt), dt)
        timed: dict[tuple, float] = {}
        for name, cache in caches.items():
            use(cache)
            plan = dispatch.plan_for(be, m, n, k, "float32")
            if plan.launch_key not in timed:
                call = lambda a=a, b=b: tiledmm.matmul(a, b, backend=be.name)  # noqa: E731
                timed[plan.launch_key] = median_wall(be, call)
            label = f"{plan.kernel} (host cost {plan.device.host_cost(be.name) * 1e6:.3g} us)"
            out[name].append(Row(f"small-skinny {name}", be.name, label, "float32", (m, n, k),
                                 timed[plan.launch_key], plan.predicted_seconds,
                                 plan.bound))  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", action="append", required=True, help="NAME=DIR, repeated")
    ap.add_argument("--host-only-from", help="also a cache with DIR's host costs alone")
    ap.add_argument("--backend", action="append", help="default: numpy, numba-cpu, opencl")
    args = ap.parse_args(argv)
    caches = dict(c.split("=", 1) for c in args.cache)
    if args.host_only_from:
        data = json.loads(Path(args.host_only_from, "calibration.json").read_text())
        folder = tempfile.mkdtemp(prefix="tiledmm-host-only-")
        Path(folder, "calibration.json").write_text(json.dumps(
            {dev: {"host_cost": rec["host_cost"]} for dev, rec in data.items()
             if "host_cost" in rec}))  # fmt: skip
        caches["host-cost-only"] = folder
    rng = np.random.default_rng(0)
    found: dict[str, list[Row]] = {name: [] for name in caches}
    for name in args.backend or BACKENDS:
        try:
            be = tiledmm.get_backend(name)
        except (RuntimeError, ValueError) as exc:
            print(f"skipped {name}: {exc}")
            continue
        for cfg, rows in rows_for(be, SMALL + SKINNY, caches, rng).items():
            found[cfg] += rows
    for cfg, rows in found.items():
        print(f"\n## {cfg} ({caches[cfg]})\n")
        print(format_table([(r, CPU_BAND) for r in rows]))
        for be in dict.fromkeys(r.backend for r in rows):
            mine = [r for r in rows if r.backend == be]
            inside = sum(CPU_BAND[0] <= r.ratio <= CPU_BAND[1] for r in mine)
            print(f"{cfg}: {be}: {inside}/{len(mine)} inside {CPU_BAND}")
    print(f"\nload average at the end: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
