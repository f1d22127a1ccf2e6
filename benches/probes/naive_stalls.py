"""Why the naive kernel runs slower than its L1 level once the operands outgrow the L2 (issue 12:
the three naive rows of tests/test_model.py KNOWN_OUTSIDE, docs/model.md "still wrong").

Run on the H200 (CuPy backend; Nsight Compute as ``ncu``), about two minutes:

    python3 -m benches.probes.naive_stalls -o $OUT

Profiles one launch of the naive kernel per case (the cases where the model holds, 1024^3
float64 and 4096^3 float32, beside those where it does not, 2048^3 and 4096^3 float64 and
8192^3 float32) with ``ncu --clock-control none`` and prints, per case, the profiled time over
the model's L1 level, the L1 and L2 sector hit rates, the DRAM and L2 bytes, the L1 data-pipe
wavefronts, and the share of warp cycles stalled on long scoreboard (a global load's data),
LG throttle (the load queue full) and MIO throttle; writes ``naive-stalls.json`` to the output
folder. Reading: long scoreboard up with the DRAM bytes while the L1 wavefronts stay at the
model's count means the missing time is the latency of the lines that miss (a latency term
per DRAM miss); LG throttle up means the L1's miss queue fills (a bytes-in-flight limit).

    python3 -m benches.probes.naive_stalls --latency -o $OUT

is the follow-up (docs/model.md, "Where the model is still wrong"): gemm-c float64 1024^3 and
4096^3 beside Numba's naive kernel at float64 1024^3 / 4096^3 and float32 8192^3, with the
wait per global load (long-scoreboard stall cycles per issued instruction x instructions /
global load instructions) and the L2's read hits and misses from the SMs (hit-on-miss
counted as hits); writes ``naive-latency.json``. Reading: the gemm-c float64 loads wait ~2x
per load at 4096^3 what they wait at 1024^3 while Numba's do not (its time per K step is the
same at both): whichever of these counters differs between the two at 4096^3 is the term.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import subprocess
import sys
from pathlib import Path

from benches.probes.ncu_counters import parse

METRICS = (
    "gpu__time_duration.sum",
    "dram__bytes_read.sum",
    "lts__t_bytes.sum",
    "l1tex__t_sector_hit_rate.pct",
    "lts__t_sector_hit_rate.pct",
    "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__data_pipe_lsu_wavefronts.sum",
    "smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct",
    "smsp__warp_issue_stalled_lg_throttle_per_warp_active.pct",
    "smsp__warp_issue_stalled_mio_throttle_per_warp_active.pct",
    "smsp__warps_active.avg.pct_of_peak_sustained_active",
    "sm__cycles_elapsed.avg.per_second",
)
CASES = [
    ("float64", (1024,) * 3),
    ("float64", (2048,) * 3),
    ("float64", (4096,) * 3),
    ("float32", (4096,) * 3),
    ("float32", (8192,) * 3),
]


#: ncu's time units (``ncu_counters.parse`` scales "nsecond" but not "ns", which this ncu
#: prints: the session-6 JSON holds the time in nanoseconds).
TIME_UNITS = {"ns": 1e-9, "nsecond": 1e-9, "us": 1e-6, "usecond": 1e-6, "ms": 1e-3,
              "msecond": 1e-3, "s": 1.0, "second": 1.0}  # fmt: skip


def _seconds(text: str) -> float:
    """The profiled kernel's gpu__time_duration.sum in seconds, read with its unit."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    head, units, values = list(csv.reader(io.StringIO("\n".join(lines))))[:3]
    i = head.index("gpu__time_duration.sum")
    return float(values[i].replace(",", "")) * TIME_UNITS[units[i]]


def line(row: dict) -> str:
    """One case's summary line (``row["counters"]["gpu__time_duration.sum"]`` in seconds)."""
    c, shape = row["counters"], row["shape"]
    return (
        f"naive {row['dtype']} {shape[0]}^3 {tuple(row['block_tile'])}: time / L1 level "
        f"{c['gpu__time_duration.sum'] / row['model_L1_seconds']:.2f}; L1 hits "
        f"{c['l1tex__t_sector_hit_rate.pct']:.0f}%, L2 hits "
        f"{c['lts__t_sector_hit_rate.pct']:.0f}%; DRAM {c['dram__bytes_read.sum'] / 1e9:.2f}"
        f" GB (model {row['model_DRAM_read'] / 1e9:.2f}), L2 "
        f"{c['lts__t_bytes.sum'] / 1e9:.2f} GB; stalls long scoreboard "
        f"{c['smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct']:.0f}%, "
        f"LG throttle {c['smsp__warp_issue_stalled_lg_throttle_per_warp_active.pct']:.0f}%"
        f", MIO {c['smsp__warp_issue_stalled_mio_throttle_per_warp_active.pct']:.0f}%"
    )


def reprint(path: Path) -> None:
    """The summary lines of a written JSON. Files whose rows lack ``time_unit`` (the session-6
    run, 2026-12-01) hold the time as ncu printed it, in nanoseconds."""
    for row in json.loads(path.read_text())["rows"]:
        scale = {"s": 1.0}.get(row.get("time_unit", "ns"), 1e-9)
        c = dict(row["counters"])
        c["gpu__time_duration.sum"] *= scale
        print(line(dict(row, counters=c)))


#: The follow-up: the wait per load and the L2's read hits/misses, gemm-c against Numba.
LATENCY_METRICS = (
    *METRICS,
    "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",
    "smsp__inst_executed.sum",
    "smsp__inst_executed_op_global_ld.sum",
    "lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum",
    "lts__t_sectors_srcunit_tex_op_read_lookup_miss.sum",
)
LATENCY_CASES = [
    ("cupy", "float64", (1024,) * 3),
    ("cupy", "float64", (4096,) * 3),
    ("numba-cuda", "float64", (1024,) * 3),
    ("numba-cuda", "float64", (4096,) * 3),
    ("numba-cuda", "float32", (8192,) * 3),
]
#: ncu's kernel filter per backend (CuPy's gemm-c kernel is ``gemm``; Numba's generated
#: kernel function is ``kernel``; its inputs are made with NumPy, so no CuPy kernel matches).
KERNEL_NAME = {"cupy": "gemm", "numba-cuda": "regex:kernel"}


def child(backend: str, dtype: str, m: int, n: int, k: int) -> None:
    """Two launches of the naive kernel (ncu profiles the second: --launch-skip 1)."""
    import numpy as np

    import tiledmm

    rng = np.random.default_rng(0)
    a = (rng.random((m, k)) * 2 - 1).astype(dtype)
    b = (rng.random((k, n)) * 2 - 1).astype(dtype)
    if backend == "cupy":
        import cupy as cp

        a, b = cp.asarray(a), cp.asarray(b)
    for _ in range(2):
        tiledmm.matmul(a, b, backend=backend, kernel="naive")
    if backend == "cupy":
        cp.cuda.Device().synchronize()
    else:
        from numba import cuda

        cuda.synchronize()


def per_load(c: dict) -> dict:
    """Derived: long-scoreboard stall cycles per global load instruction (the wait per load,
    at the SM clock) and the L2 read miss share from the SMs."""
    loads = c.get("smsp__inst_executed_op_global_ld.sum", 0.0)
    ratio = c.get("smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio")
    hit = c.get("lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum", 0.0)
    miss = c.get("lts__t_sectors_srcunit_tex_op_read_lookup_miss.sum", 0.0)
    out = {}
    if loads and ratio is not None:
        out["wait_cycles_per_load"] = ratio * c["smsp__inst_executed.sum"] / loads
    if hit + miss:
        out["l2_read_miss_share"] = miss / (hit + miss)
    return out


def latency(ncu: str, out: Path) -> int:
    """The follow-up run (module docstring): writes ``naive-latency.json``."""
    import tiledmm
    from tiledmm.device.nvidia import reference_h200

    rows = []
    for backend, dtype, shape in LATENCY_CASES:
        plan = tiledmm.plan(*shape, dtype=dtype, backend=backend, kernel="naive")
        cmd = [ncu, "--target-processes", "all", "--clock-control", "none", "--kernel-name",
               KERNEL_NAME[backend], "--launch-skip", "1", "--launch-count", "1", "--csv",
               "--page", "raw", "--metrics", ",".join(LATENCY_METRICS), sys.executable,
               "-m", __spec__.name, "--child", backend, dtype, *map(str, shape)]  # fmt: skip
        res = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if res.returncode:
            print(" ".join(cmd), res.stdout[-2000:], res.stderr[-2000:], file=sys.stderr)
            return 1
        c = parse(res.stdout, LATENCY_METRICS)
        c["gpu__time_duration.sum"] = _seconds(res.stdout)
        geo = tiledmm.Geometry(plan.block_tile, plan.thread_tile, tuple(plan.options.items()))
        model = tiledmm.make_plan(*shape, dtype=dtype, kernel="naive", device=reference_h200(),
                                  geometry=geo, backend=backend)  # fmt: skip
        levels = {lv.name: lv.seconds for lv in model.levels}
        row = {"backend": backend, "dtype": dtype, "shape": shape, "time_unit": "s",
               "block_tile": list(plan.block_tile), "counters": c, "derived": per_load(c),
               "model_levels": levels}  # fmt: skip
        rows.append(row)
        d = row["derived"]
        print(f"{backend} naive {dtype} {shape[0]}^3 {tuple(plan.block_tile)}: "
              f"{c['gpu__time_duration.sum'] * 1e3:.3g} ms (L1 level "
              f"{levels.get('L1', 0) * 1e3:.3g}, latency {levels.get('latency', 0) * 1e3:.3g});"
              f" wait per load {d.get('wait_cycles_per_load', float('nan')):.0f} cycles; L2 "
              f"read misses {100 * d.get('l2_read_miss_share', float('nan')):.1f}%; DRAM "
              f"{c['dram__bytes_read.sum'] / 1e9:.2f} GB; L1 hits "
              f"{c['l1tex__t_sector_hit_rate.pct']:.0f}%", flush=True)  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"metrics": LATENCY_METRICS, "rows": rows}, indent=1)
    (out / "naive-latency.json").write_text(text + "\n")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--out", default=".", help="output folder")
    ap.add_argument("--ncu", default="ncu")
    ap.add_argument("--from-json", type=Path, help="reprint the lines of a written JSON")
    ap.add_argument("--latency", action="store_true", help="the follow-up run (docstring)")
    ap.add_argument("--child", nargs=5, metavar=("BACKEND", "DTYPE", "M", "N", "K"),
                    help=argparse.SUPPRESS)  # fmt: skip
    args = ap.parse_args()
    if args.child:
        backend, dtype, *mnk = args.child
        child(backend, dtype, *map(int, mnk))
        return 0
    if args.latency:
        return latency(args.ncu, Path(args.out))
    if args.from_json:
        reprint(args.from_json)
        return 0
    import tiledmm
    from tiledmm.device.nvidia import reference_h200

    rows = []
    for dtype, shape in CASES:
        plan = tiledmm.plan(*shape, dtype=dtype, backend="cupy", kernel="naive")
        cmd = [args.ncu, "--target-processes", "all", "--clock-control", "none",
               "--kernel-name", "gemm", "--launch-skip", "1", "--launch-count", "1", "--csv",
               "--page", "raw", "--metrics", ",".join(METRICS), sys.executable, "-m",
               "benches.probes.ncu_counters", "--child", "naive", dtype,
               *map(str, shape)]  # fmt: skip
        res = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if res.returncode:
            print(res.stdout[-2000:], res.stderr[-2000:], file=sys.stderr)
            return 1
        c = parse(res.stdout, METRICS)
        c["gpu__time_duration.sum"] = _seconds(res.stdout)
        model = tiledmm.make_plan(*shape, dtype=dtype, kernel="naive", device=reference_h200(),
                                  geometry=tiledmm.Geometry(plan.block_tile, plan.thread_tile,
                                                            tuple(plan.options.items())),
                                  backend="cupy")  # fmt: skip
        l1 = model.level("L1").seconds
        rows.append({"dtype": dtype, "shape": shape, "time_unit": "s",
                     "block_tile": list(plan.block_tile), "counters": c, "model_L1_seconds": l1,
                     "model_DRAM_read": dict(model.level("DRAM").parts)["read"]})  # fmt: skip
        print(line(rows[-1]), flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "naive-stalls.json").write_text(json.dumps({"metrics": METRICS, "rows": rows},
                                                      indent=1) + "\n")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
