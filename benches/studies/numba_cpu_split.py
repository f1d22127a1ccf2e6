"""Split numba-cpu's tiled and register kernels into their two phases, against the model.

    python -m benches.studies.numba_cpu_split [--sizes 1024,2048] [--dtype float32] [--rounds 7]
    [-o F]

The planner models these kernels as a packing phase (each block copies its A and B tiles
before every K step: ``NUMBA_PACK_CLOCKS`` per element, serial) followed by the loop over the
packed tiles (docs/model.md). This times the whole kernel through the backend and the packing
alone (the plugin's ``kernel("packing")``: its own packing for every block and K step, in
the kernels' ``prange`` order and with their read-only layout-generic signature); the loop
is the difference. Rounds alternate the two, and the figure is each one's minimum (other
processes only add time). Prints measured / modelled time per phase and the packing's clocks
per element on this CPU; ``-o`` writes them as JSON with the machine.
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import numpy as np
from tiledmm_numba_cpu.kernels import kernel

import tiledmm
from tiledmm.model.cpu import NUMBA_PACK_CLOCKS


def split(family: str, n: int, dtype: str, rounds: int) -> dict:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype(dtype)
    b = rng.standard_normal((n, n)).astype(dtype)
    c = np.empty((n, n), dtype)
    be = tiledmm.get_backend("numba-cpu")
    plan = tiledmm.plan(n, n, n, dtype=dtype, backend="numba-cpu", kernel=family)
    bm, bn, bk = plan.block_tile
    pack = kernel("packing", dtype)

    def whole() -> None:
        be.run(plan, a, b, c)

    def packing() -> None:
        pack(a, b, c, bm, bn, bk, plan.thread_tile[1])

    whole(), packing()  # compile
    assert np.allclose(c, a.astype(np.float64) @ b, rtol=1e-3, atol=1e-3 * n**0.5)
    times: dict[str, list[float]] = {"whole": [], "packing": []}
    for _ in range(rounds):
        for name, fn in (("whole", whole), ("packing", packing)):
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    measured = {k: min(v) for k, v in times.items()}
    measured["loop"] = measured["whole"] - measured["packing"]
    pack_model = max(lv.serial for lv in plan.levels)
    model = {"whole": plan.predicted_seconds, "packing": pack_model,
             "loop": plan.predicted_seconds - pack_model}  # fmt: skip
    return {
        "family": family, "n": n, "dtype": dtype, "block_tile": list(plan.block_tile),
        "measured": measured, "model": model, "bound": plan.bound,
        "pack_clocks_per_element": NUMBA_PACK_CLOCKS * measured["packing"] / pack_model,
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1024,2048")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("-o", "--output")
    args = ap.parse_args()
    rows = []
    for n in (int(x) for x in args.sizes.split(",")):
        for family in ("tiled", "register"):
            r = split(family, n, args.dtype, args.rounds)
            rows.append(r)
            m, p = r["measured"], r["model"]
            phases = "  ".join(
                f"{k} {m[k] * 1e3:7.1f} ms (model {p[k] * 1e3:7.1f}, {m[k] / p[k]:.2f})"
                for k in ("whole", "packing", "loop")
            )
            clocks = f"packing {r['pack_clocks_per_element']:.2f} clocks/element"
            print(f"{family:8s} {n}^3 {r['block_tile']}: {phases}  {clocks}", flush=True)
    if args.output:
        info = {"cpu": platform.processor() or platform.machine(), "node": platform.node(),
                "python": platform.python_version(), "date": time.strftime("%Y-%m-%d")}  # fmt: skip
        try:
            import cpuinfo  # py-cpuinfo, pytest-benchmark's dependency

            info["cpu"] = cpuinfo.get_cpu_info().get("brand_raw", info["cpu"])
        except ImportError:
            pass
        with open(args.output, "w") as f:
            json.dump({"machine": info, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
