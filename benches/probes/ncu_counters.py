"""Hardware counters of the three families beside the planner's per-level bytes (issue 12).

Run on the H200 (CuPy backend; Nsight Compute as ``ncu``):

    python3 -m benches.probes.ncu_counters -o $OUT
    python3 -m benches.probes.ncu_counters --cases naive:float64:4096x4096x4096 -o $OUT
    python3 -m benches.probes.ncu_counters --cases naive:float32:8192x8192x8192:4x64 -o $OUT

A case's optional fourth field is the block tile (thread tile 1x1, the naive family's): the
same source with another launch layout, e.g. the one another backend's geometry runs.

For each case (family, dtype, shape) the script re-runs itself under
``ncu --target-processes all --clock-control none --metrics ...`` with ``--child``, profiling
one launch of the ``gemm`` kernel (after a warm-up launch), parses the CSV and writes
``h200-counters.json`` to the output folder: per case the plan (tiles, options), the counters
and the model's numbers for the same plan (``tiledmm.report.modelcheck.model_counters``).
``tests/test_model.py`` holds the committed file to the model (30% for tiled and register).

    python3 -m benches.probes.ncu_counters --probes -o $OUT

profiles the calibration probes instead (``tiledmm.tune.calibrate.probe_runs``, one launch each)
and writes ``h200-probe-counters.json``: per probe the bytes it claims to read, the counters
(DRAM and L2 bytes, L1 hit rate, shared-load wavefronts and bank conflicts) and its rate in
the profiled time, so each ceiling is checked to come from the level it names (DRAM probe:
DRAM bytes = its bytes; L2 probe: L2 bytes = its bytes, almost no DRAM, no L1 hits; shared:
its bytes / 128 wavefronts, no conflicts).
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
    # the shared/L1 data pipe as a whole (shared loads + shared stores + global data) and the
    # warp instructions issued: the model's "shared memory" and "issue" levels (docs/model.md)
    "l1tex__data_pipe_lsu_wavefronts.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
    # the SRAM's own accesses: a staged global line is written on its return (a bank write)
    # and read out (a bank read); the model counts both (warps.FILL_ACCESSES, docs/model.md)
    "l1tex__data_bank_reads.sum",
    "l1tex__data_bank_writes.sum",
    "smsp__inst_executed.sum",
    "sm__cycles_elapsed.avg.per_second",
    "gpu__time_duration.sum",
)
PROBE_METRICS = (
    "dram__bytes_read.sum",
    "lts__t_bytes.sum",
    "l1tex__t_sector_hit_rate.pct",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "sm__cycles_elapsed.avg.per_second",
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


def child(family: str, dtype: str, m: int, n: int, k: int, block: str = "") -> None:
    """Two launches of the family's kernel (ncu profiles the second: --launch-skip 1);
    ``block`` ("4x64") overrides the block tile."""
    import cupy as cp

    import tiledmm

    rng = cp.random.default_rng(0)
    a = (rng.random((m, k)) * 2 - 1).astype(dtype)
    b = (rng.random((k, n)) * 2 - 1).astype(dtype)
    be = tiledmm.get_backend("cupy")
    geo = _geometry(family, dtype, (m, n, k), block)
    plan = tiledmm.make_plan(m, n, k, dtype=dtype, kernel=family, device=be.device(),
                             geometry=geo, backend="cupy")  # fmt: skip
    out = cp.empty((m, n), dtype)
    for _ in range(2):
        be.run(plan, a, b, out)
    cp.cuda.Device().synchronize()


def probe_child() -> None:
    """Each calibration probe once (ncu profiles every launch of a probe kernel)."""
    import cupy as cp

    import tiledmm
    from tiledmm.tune.calibrate import probe_runs

    for table, name, run, amount in probe_runs(tiledmm.get_backend("cupy")):
        run()
        cp.cuda.Device().synchronize()
        print(f"PROBE {table} {name} {amount}", flush=True)


def parse(text: str, metrics=METRICS, row: int = 0) -> dict[str, float]:
    """Metric values from ``ncu --csv --page raw`` output (the ``row``-th profiled kernel)."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    if len(rows) < 3 + row:
        raise RuntimeError(f"no ncu rows in:\n{text[-2000:]}")
    head, units, values = rows[0], rows[1], rows[2 + row]
    out = {}
    for name, unit, value in zip(head, units, values, strict=False):
        if name in metrics:
            scale = {"Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "Tbyte": 1e12, "KB": 1e3,
                     "MB": 1e6, "GB": 1e9, "usecond": 1e-6, "msecond": 1e-3, "nsecond": 1e-9,
                     "second": 1.0, "ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0,
                     "cycle/nsecond": 1e9, "cycle/usecond": 1e6,
                     "cycle/second": 1.0, "Ghz": 1e9, "GHz": 1e9, "Mhz": 1e6,
                     "MHz": 1e6}.get(unit, 1.0)  # fmt: skip
            out[name] = float(value.replace(",", "")) * scale
    return out


def parse_case(text: str) -> tuple[str, str, tuple[int, int, int], str]:
    """``naive:float64:4096x4096x4096[:4x64]`` -> ("naive", "float64", (4096, 4096, 4096),
    "4x64" or "")."""
    family, dtype, shape, *block = text.split(":")
    m, n, k = (int(v) for v in shape.lower().split("x"))
    return family, dtype, (m, n, k), (block[0].lower() if block else "")


def _geometry(family: str, dtype: str, shape: tuple[int, int, int], block: str = ""):
    """The plan's geometry, with the block tile ``block`` ("4x64") where one is given."""
    import tiledmm

    plan = tiledmm.plan(*shape, dtype=dtype, backend="cupy", kernel=family)
    tile = tuple(int(v) for v in block.split("x")) if block else plan.block_tile[:2]
    return tiledmm.Geometry((*tile, *plan.block_tile[2:]), plan.thread_tile,
                            tuple(sorted(plan.options.items())))  # fmt: skip


def measure(
    family: str, dtype: str, shape: tuple[int, int, int], ncu: str, block: str = ""
) -> dict[str, float]:
    cmd = [ncu, "--target-processes", "all", "--clock-control", "none", "--kernel-name",
           "gemm", "--launch-skip", "1", "--launch-count", "1", "--csv", "--page", "raw",
           "--metrics", ",".join(METRICS), sys.executable, "-m", __spec__.name, "--child", family,
           dtype, *map(str, shape), block or "-"]  # fmt: skip
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if res.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{res.stdout[-2000:]}{res.stderr[-2000:]}")
    return parse(res.stdout)


def probes(ncu: str, out: Path) -> Path:
    """Profile the calibration probes; write and print their bytes beside the counters."""
    cmd = [ncu, "--target-processes", "all", "--clock-control", "none", "--kernel-name",
           "regex:^(stream|shared|fma)_probe$", "--csv", "--page", "raw", "--metrics",
           ",".join(PROBE_METRICS), sys.executable, "-m", __spec__.name,
           "--probe-child"]  # fmt: skip
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if res.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{res.stdout[-2000:]}{res.stderr[-2000:]}")
    claims = [ln.split()[1:] for ln in res.stdout.splitlines() if ln.startswith("PROBE ")]
    rows = []
    for i, (table, *name, amount) in enumerate(claims):
        c = parse(res.stdout, PROBE_METRICS, i)
        t = c["gpu__time_duration.sum"]
        rows.append({"table": table, "name": " ".join(name), "amount": float(amount),
                     "counters": c, "rate": float(amount) / t})  # fmt: skip
        print(
            f"{' '.join(name):>14}: {float(amount) / t / 1e12:7.2f} T/s in {t * 1e6:.0f} us; "
            f"DRAM {c['dram__bytes_read.sum'] / float(amount):.2f}x, "
            f"L2 {c['lts__t_bytes.sum'] / float(amount):.2f}x its bytes, "
            f"L1 hits {c['l1tex__t_sector_hit_rate.pct']:.1f}%, shared wavefronts x128 "
            f"{c['l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum'] * 128 / float(amount):.2f}x, "  # noqa: E501
            f"conflicts {c['l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum']:.0f}, "
            f"SM clock {c['sm__cycles_elapsed.avg.per_second'] / 1e9:.2f} GHz",
            flush=True,
        )
    meta = {"date": dt.date.today().isoformat(), "metrics": list(PROBE_METRICS),
            "source": f"measured: {' '.join(sys.argv)} (ncu --clock-control none)"}  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    path = out / "h200-probe-counters.json"
    path.write_text(json.dumps({"metadata": meta, "rows": rows}, indent=1) + "\n")
    print(f"wrote {path}")
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--out", default="benches/data", help="output folder")
    ap.add_argument("--ncu", default="ncu")
    ap.add_argument("--child", nargs=6, metavar=("FAMILY", "DTYPE", "M", "N", "K", "BLOCK"))
    ap.add_argument("--probes", action="store_true", help="profile the calibration probes")
    ap.add_argument("--probe-child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--cases", help="FAMILY:DTYPE:MxNxK,... instead of the default set; "
                    "writes h200-counters-cases.json")  # fmt: skip
    args = ap.parse_args()
    if args.probe_child:
        probe_child()
        return 0
    if args.probes:
        probes(args.ncu, Path(args.out))
        return 0
    if args.child:
        f, d, *mnk, block = args.child
        child(f, d, *map(int, mnk), block="" if block == "-" else block)
        return 0
    import tiledmm
    from tiledmm.device.nvidia import reference_h200
    from tiledmm.report.modelcheck import model_counters

    be = tiledmm.get_backend("cupy")
    rows = []
    cases = [parse_case(c) for c in args.cases.split(",")] if args.cases else CASES
    for family, dtype, shape, *block in cases:
        geo = _geometry(family, dtype, shape, *block)
        counters = measure(family, dtype, shape, args.ncu, *block)
        rows.append({
            "backend": "cupy", "kernel": family, "dtype": dtype,
            "m": shape[0], "n": shape[1], "k": shape[2],
            **geo.to_dict(), "counters": counters,
            "model": model_counters(tiledmm.make_plan(
                *shape, dtype=dtype, kernel=family, device=reference_h200(),
                geometry=geo, backend="cupy")),
        })  # fmt: skip
        print(family, dtype, shape, counters, flush=True)
    dev = be.device().name
    meta = {
        "device": dev,
        "date": dt.date.today().isoformat(),
        "source": f"measured: {' '.join(sys.argv)} (ncu --clock-control none)",
        "metrics": list(METRICS),
        "measured_in": "Nsight Compute on this device (real counters, not seeded)",
        "model": "tiledmm.report.modelcheck.model_counters on "
        "tiledmm.device.nvidia.reference_h200()",
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / ("h200-counters-cases.json" if args.cases else "h200-counters.json")
    path.write_text(json.dumps({"metadata": meta, "rows": rows}, indent=1) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
