"""Hardware counters of the three families beside the planner's per-level bytes (issue 12).

Run on the H200 (CuPy backend; Nsight Compute as ``ncu``):

    python3 benches/ncu_counters.py -o $OUT

For each case (family, dtype, shape) the script re-runs itself under
``ncu --target-processes all --clock-control none --metrics ...`` with ``--child``, profiling
one launch of the ``gemm`` kernel (after a warm-up launch), parses the CSV and writes
``h200-counters.json`` to the output folder: per case the plan (tiles, options), the counters
and the model's numbers for the same plan (``tiledmm.modelcheck.model_counters``).
``tests/test_model.py`` holds the committed file to the model (30% for tiled and register).
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import io
import json
import subprocess
import sys
from pathlib import Path

METRICS = (
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "lts__t_bytes.sum",
    "l1tex__t_bytes.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_dfma_pred_on.sum",
    "gpu__time_duration.sum",
)
CASES = [
    (family, dtype, shape)
    for family in ("naive", "tiled", "register")
    for dtype, shape in (
        ("float32", (2048,) * 3),
        ("float32", (4096,) * 3),
        ("float64", (2048,) * 3),
    )
]


def child(family: str, dtype: str, m: int, n: int, k: int) -> None:
    """Two launches of the family's kernel (ncu profiles the second: --launch-skip 1)."""
    import cupy as cp

    import tiledmm

    rng = cp.random.default_rng(0)
    a = (rng.random((m, k)) * 2 - 1).astype(dtype)
    b = (rng.random((k, n)) * 2 - 1).astype(dtype)
    for _ in range(2):
        tiledmm.matmul(a, b, backend="cupy", kernel=family)
    cp.cuda.Device().synchronize()


def parse(text: str) -> dict[str, float]:
    """Metric values from ``ncu --csv --page raw`` output (first profiled kernel)."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    if len(rows) < 3:
        raise RuntimeError(f"no ncu rows in:\n{text[-2000:]}")
    head, units, values = rows[0], rows[1], rows[2]
    out = {}
    for name, unit, value in zip(head, units, values, strict=False):
        if name in METRICS:
            scale = {"Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "Tbyte": 1e12, "KB": 1e3,
                     "MB": 1e6, "GB": 1e9, "usecond": 1e-6, "msecond": 1e-3, "nsecond": 1e-9,
                     "second": 1.0}.get(unit, 1.0)  # fmt: skip
            out[name] = float(value.replace(",", "")) * scale
    return out


def measure(family: str, dtype: str, shape: tuple[int, int, int], ncu: str) -> dict[str, float]:
    cmd = [ncu, "--target-processes", "all", "--clock-control", "none", "--kernel-name",
           "gemm", "--launch-skip", "1", "--launch-count", "1", "--csv", "--page", "raw",
           "--metrics", ",".join(METRICS), sys.executable, __file__, "--child", family, dtype,
           *map(str, shape)]  # fmt: skip
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if res.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{res.stdout[-2000:]}{res.stderr[-2000:]}")
    return parse(res.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--out", default="benches/results", help="output folder")
    ap.add_argument("--ncu", default="ncu")
    ap.add_argument("--child", nargs=5, metavar=("FAMILY", "DTYPE", "M", "N", "K"))
    args = ap.parse_args()
    if args.child:
        f, d, *mnk = args.child
        child(f, d, *map(int, mnk))
        return 0
    import tiledmm
    from tiledmm.device import reference_h200
    from tiledmm.modelcheck import model_counters

    be = tiledmm.get_backend("cupy")
    rows = []
    for family, dtype, shape in CASES:
        plan = tiledmm.plan(*shape, dtype=dtype, backend="cupy", kernel=family)
        counters = measure(family, dtype, shape, args.ncu)
        rows.append({
            "backend": "cupy", "kernel": family, "dtype": dtype,
            "m": shape[0], "n": shape[1], "k": shape[2],
            "block_tile": list(plan.block_tile), "thread_tile": list(plan.thread_tile),
            "options": dict(plan.options), "counters": counters,
            "model": model_counters(tiledmm.make_plan(
                *shape, dtype=dtype, kernel=family, device=reference_h200(),
                geometry=tiledmm.Geometry(plan.block_tile, plan.thread_tile,
                                          tuple(sorted(plan.options.items()))),
                backend="cupy")),
        })  # fmt: skip
        print(family, dtype, shape, counters, flush=True)
    dev = be.device().name
    meta = {
        "device": dev,
        "date": dt.date.today().isoformat(),
        "source": f"measured: {' '.join(sys.argv)} (ncu --clock-control none)",
        "metrics": list(METRICS),
        "measured_in": "Nsight Compute on this device (real counters, not seeded)",
        "model": "tiledmm.modelcheck.model_counters on tiledmm.device.reference_h200()",
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "h200-counters.json"
    path.write_text(json.dumps({"metadata": meta, "rows": rows}, indent=1) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
