"""The tensor-core rung as users get it: ``kernel="mma"`` through tiledmm's planner and launch
path, beside the vendor GEMM, as pytest-benchmark rows (issue 14).

    python -m benches.studies.mma_results --out benches/results/h200-mma.json
    CUPY_TF32=1 python -m benches.studies.mma_results --precision tf32 --out .../h200-mma-tf32.json

``benches/probes/mma.py`` screens tile configurations with its own builds; this script runs what the
planner picks (the tuning database's tiles) for float64 and float16 through ``Backend.run``,
checked first (NaN-poisoned output, float64 reference), timed with device events after warm-up
beside ``cupy.matmul`` on the same arrays. With ``--precision tf32`` it runs float32 on tensor
cores against cuBLAS with TF32 enabled (set ``CUPY_TF32=1`` for the vendor); those rows carry
``extra_info.precision = "tf32"`` (the report keeps them out of the IEEE float32 tables).
Ours and the vendor are timed in ``ROUNDS`` rounds, the order swapped each round (medians over
all of them): a long GEMM warms the GPU, and whichever runs second runs hotter (session 9:
float16, vendor first, sat 4-8% under bfloat16, ours first, on the same kernel).

``bfloat16`` in ``--dtypes`` (CuPy has no bfloat16 arrays) runs the way users reach it: torch
bfloat16 CUDA tensors through ``tiledmm.matmul(..., kernel="mma")`` (``tiledmm.interop.halfprec``),
beside ``torch.matmul`` on the same tensors (``vendor_backend`` "torch"), both timed by the
backend's device events after warm-up; the error is against a float64 product of the bfloat16
inputs, the result checked in a NaN-poisoned ``out=`` first:

    python -m benches.studies.mma_results --dtypes float16,bfloat16 --out
    benches/results/h200-mma-16.json
"""

from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path
from types import SimpleNamespace

import tiledmm
from tiledmm.bench import results
from tiledmm.bench.pace import time_fn
from tiledmm.bench.sweep import (
    Case,
    Inputs,
    Settings,
    extra_info,
    measure_case,
    peak_of,
    vendor_call,
    vendor_result,
)
from tiledmm.core import dispatch
from tiledmm.tune import first_calibration

#: alternating rounds of ours and the vendor (see the module docstring)
ROUNDS = 3

SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (1024, 1024, 1024), (4095, 4095, 4095),
          (1000, 3000, 777), (2048, 2048, 2048)]  # fmt: skip


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="cupy")
    p.add_argument("--dtypes", default="float64,float16")
    p.add_argument("--precision", choices=["tf32"], help="float32 on tensor cores")
    p.add_argument("--out", default="h200-mma.json")
    args = p.parse_args(argv)
    if args.precision and os.environ.get("CUPY_TF32") != "1":
        p.error("--precision tf32 compares with cuBLAS in TF32: set CUPY_TF32=1")
    be = tiledmm.get_backend(args.backend)
    # what tiledmm.matmul's first call does: the device's own ceilings before anything is
    # planned (Backend.run skips the engine's hook, and without this the rows were predicted on
    # the datasheet's tensor rate; session 20, docs/mma.md)
    first_calibration.prepare(be)
    dtypes = ["float32"] if args.precision else args.dtypes.split(",")
    settings = Settings(budget=0.3, min_rounds=5, max_rounds=30, warmup=3)
    rows = []
    for dtype in dtypes:
        if dtype == "bfloat16":
            rows += bf16_rows(be, settings)
            continue
        for m, n, k in SHAPES:
            case = Case(be, Inputs(m, n, k, dtype, seed=7))
            try:
                plan = dispatch.plan_for(be, m, n, k, dtype, "mma", precision=args.precision)
                vendor = vendor_result(case, settings)
                # TF32 rounds inputs to 10 bits: judged against cuBLAS's own TF32 error
                tol = max(4 * vendor["rel_error"], 1e-3) if args.precision else None
                err, times = measure_case(case, plan, settings, tol)
                if times:
                    vendor, times = _alternate(case, plan, settings, vendor, times)
            except Exception as exc:  # noqa: BLE001 - one broken case must not end the run
                print(f"{dtype} {m}x{n}x{k}: {type(exc).__name__}: {exc}", flush=True)
                continue
            if not times:
                print(f"{dtype} {m}x{n}x{k}: WRONG (relative error {err:.3g})", flush=True)
                continue
            info = extra_info(case, plan, err, statistics.median(times), vendor)
            info.update(options=dict(plan.options), precision=args.precision or dtype)
            rows.append(results.benchmark_entry(info, times, settings))
            print(f"{dtype:8s} {m}x{n}x{k:<5d} {info['gflops'] / 1e3:8.2f} TFLOP/s = "
                  f"{info['gflops'] / info['vendor_gflops']:.2f} of the vendor "
                  f"({info['vendor_gflops'] / 1e3:.1f}); error {err:.2e} "
                  f"(vendor {info['vendor_rel_error']:.2e}); predicted "
                  f"{info['predicted_seconds'] * 1e3:.3f} ms, measured "
                  f"{info['seconds'] * 1e3:.3f} ms; {plan.block_tile} {plan.thread_tile}",
                  flush=True)  # fmt: skip
    results.write_document(Path(args.out), rows, [be])
    return 0


def _alternate(case, plan, settings, vendor: dict, times: list[float]) -> tuple[dict, list]:
    """ROUNDS - 1 more rounds after the first (vendor, then ours with its check), the order
    swapped each round; the vendor's median over its rounds' medians, ours over all times."""
    be, (vbe, vfn) = case.backend, vendor_call(case)
    medians = [vendor["seconds"]]
    for r in range(ROUNDS - 1):
        for ours in (True, False) if r % 2 == 0 else (False, True):
            if ours:
                times = times + time_fn(be, lambda: be.run(plan, case.A, case.B, case.out),
                                        settings)  # fmt: skip
            else:
                medians.append(statistics.median(time_fn(vbe, vfn, settings)))
    case.vendor = dict(vendor, seconds=statistics.median(medians))
    return case.vendor, times


#: accepted relative error of bfloat16 results (float32 sums, one rounding to 8 bits: ~1e-3)
BF16_TOL = 4e-3


def bf16_rows(be, settings: Settings) -> list[dict]:
    """bfloat16 rows through the torch path (see the module docstring)."""
    import torch

    rows = []
    for m, n, k in SHAPES:
        try:
            row = _bf16_row(torch, be, settings, m, n, k)
        except Exception as exc:  # noqa: BLE001 - one broken case must not end the run
            print(f"bfloat16 {m}x{n}x{k}: {type(exc).__name__}: {exc}", flush=True)
            continue
        if row is not None:
            rows.append(row)
    return rows


def _bf16_row(torch, be, settings: Settings, m: int, n: int, k: int) -> dict | None:
    dev = torch.device("cuda", be.device_key())
    g = torch.Generator(device=dev).manual_seed(7)
    ta, tb = ((torch.rand(s, generator=g, device=dev) * 2 - 1).to(torch.bfloat16)
              for s in ((m, k), (k, n)))  # fmt: skip
    ref = torch.matmul(ta.double(), tb.double())

    def err(c) -> float:
        if not bool(torch.isfinite(c).all()):
            return float("inf")  # an element left unwritten in the poisoned out
        return float(torch.linalg.norm(c.double() - ref) / torch.linalg.norm(ref))

    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device=dev)
    assert tiledmm.matmul(ta, tb, backend=be.name, kernel="mma", out=out) is out
    e, verr = err(out), err(torch.matmul(ta, tb))
    del out
    plan = dispatch.plan_for(be, m, n, k, "bfloat16", "mma")  # the plan the torch path runs
    tol = max(2 * verr, BF16_TOL)
    if not e <= tol:
        print(f"bfloat16 {m}x{n}x{k}: WRONG (relative error {e:.3g}, torch {verr:.3g})",
              flush=True)  # fmt: skip
        return None
    times, vtimes = [], []
    for r in range(ROUNDS):  # alternating, the order swapped each round (module docstring)
        for ours in (True, False) if r % 2 == 0 else (False, True):
            if ours:
                times += time_fn(be, lambda: tiledmm.matmul(ta, tb, backend=be.name,
                                                            kernel="mma"), settings)  # fmt: skip
            else:
                vtimes += time_fn(be, lambda: torch.matmul(ta, tb), settings)
    vendor = {"seconds": statistics.median(vtimes), "rel_error": verr, "backend": "torch"}
    # extra_info reads the case's backend and shape only: a 2-byte stand-in, then bfloat16
    case = SimpleNamespace(backend=be, inputs=SimpleNamespace(m=m, n=n, k=k, dtype="float16"))
    info = extra_info(case, plan, e, statistics.median(times), vendor)
    info.update(dtype="bfloat16", tolerance=tol, peak_flops=peak_of(plan, "bfloat16"),
                options=dict(plan.options), precision="bfloat16", path="torch",
                timer=f"{info['timer']}; tiledmm.matmul on torch tensors (host cost shows "
                "where it exceeds the spin ahead of each call)")  # fmt: skip
    print(f"bfloat16 {m}x{n}x{k:<5d} {info['gflops'] / 1e3:8.2f} TFLOP/s = "
          f"{info['gflops'] / info['vendor_gflops']:.2f} of torch.matmul "
          f"({info['vendor_gflops'] / 1e3:.1f}); error {e:.2e} (torch {verr:.2e}); "
          f"{plan.block_tile} {plan.thread_tile}", flush=True)  # fmt: skip
    return results.benchmark_entry(info, times, settings)


if __name__ == "__main__":
    raise SystemExit(main())
