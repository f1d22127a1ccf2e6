"""Vector products on a CPU through OpenCL (PoCL): the barrier-free gemv path (``gemv_cpu.cl``,
what ``kernel="auto"`` runs) against the register tiles and NumPy's matmul (the vendor BLAS),
per orientation; seconds are medians of device-side timings (PoCL's profiling events) after a
warm-up, NumPy's of wall time. Fraction of DRAM: bytes of A, B and C over time over the
device's DRAM bandwidth (``tiledmm calibrate --backend opencl`` measures it; else estimated).

    python -m benches.studies.cpu_vectors [--sizes 4096,8192]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import tiledmm
from tiledmm.core.dispatch import plan_for


def row(be, m: int, n: int, k: int, dtype: str, rng) -> str:
    """One table row: auto's family and times, the register tiles', NumPy's."""
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    A, B = be.asarray(a, a.dtype), be.asarray(b, b.dtype)
    out = be.empty((m, n), a.dtype)
    fam = plan_for(be, m, n, k, dtype, "auto").kernel

    def dev_ms(kernel: str) -> float:
        def fn():
            return tiledmm.matmul(A, B, backend="opencl", kernel=kernel, out=out)

        return statistics.median(be.timings(fn, repeat=7, warmup=2)) * 1e3

    auto, reg = dev_ms("auto"), dev_ms("register")
    walls = []
    for _ in range(9):
        t0 = time.perf_counter()
        a @ b
        walls.append(time.perf_counter() - t0)
    ref = statistics.median(walls) * 1e3
    frac = (a.size + b.size + m * n) * a.itemsize / (auto / 1e3) / be.device().bandwidth
    return (f"{m}x{n}x{k} | {fam} | {auto:.2f} | {reg:.2f} | {ref:.2f} | {frac:.2f} | "
            f"{auto / ref:.2f}")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="4096")
    ap.add_argument("--dtype", default="float32")
    args = ap.parse_args(argv)
    be = tiledmm.get_backend("opencl")
    dev = be.device()
    print(f"{dev.name} ({dev.kind}), DRAM {dev.bandwidth / 1e9:.1f} GB/s, {args.dtype}")
    print("shape | auto family | auto ms | register ms | numpy ms | auto of DRAM | auto / numpy")
    rng = np.random.default_rng(3)
    for size in (int(s) for s in args.sizes.split(",")):
        for m, n in ((1, size), (size, 1)):
            print(row(be, m, n, size, args.dtype, rng), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
