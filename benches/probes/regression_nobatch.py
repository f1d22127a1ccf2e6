"""The register kernel before batching landed (commit 75c1f994) against HEAD's, with and without
the batch prologue (``NO_BATCH``): same defines, same data, beside cuBLAS, on a CUDA GPU.

    python -m benches.probes.regression_nobatch     (from a git checkout; the H200 log of
    2026-12-01 is
                                              benches/results/logs/h200-regress-nobatch.log)

Each kernel is checked on 64 rows against a float64 product, then timed through the CuPy
backend's ``timings()`` (median of 15) in three alternating rounds with cuBLAS and
``tiledmm.matmul``.
"""

from __future__ import annotations

import os
import statistics
import subprocess

os.environ.setdefault("CUPY_TF32", "0")

import cupy as cp
import numpy as np
from tiledmm_backends import kernels as K

import tiledmm

OLD = "75c1f994"  # the last commit before the batch prologue
DEFS = dict(REAL_BYTES=4, BM=128, BN=128, BK=16, TM=8, TN=8, THREADS=256, SPLIT_K=1,
            USE_LOCAL=1, VM=4, VN=4, PAD=4, GROUP_M=1, STAGES=2, ALIGNED=1)  # fmt: skip


def old_source() -> str:
    def show(name: str) -> str:
        return subprocess.run(["git", "show", f"{OLD}:backends/kernels/{name}"], check=True,
                              capture_output=True, text=True).stdout  # fmt: skip

    head = "".join(f"#define {k} {v}\n" for k, v in sorted(DEFS.items()))
    return head + show("register.cl").replace('#include "gemm_common.h"', show("gemm_common.h"))


def event_median(fn, reps: int = 15) -> float:
    """Median device seconds of ``reps`` calls after 2 warm-ups (the CuPy backend's
    ``timings()``: CUDA events, each call behind its spin kernel)."""
    return statistics.median(tiledmm.get_backend("cupy").timings(fn, repeat=reps, warmup=2))


def measure(n: int, kernels: dict) -> None:
    """Check, then time each kernel, cuBLAS and ``tiledmm.matmul`` at n^3."""
    rng = np.random.default_rng(1)
    a = cp.asarray((rng.random((n, n)) * 2 - 1).astype(np.float32))
    b = cp.asarray((rng.random((n, n)) * 2 - 1).astype(np.float32))
    c = cp.empty((n, n), np.float32)
    i32 = np.int32
    args = (i32(n), i32(n), i32(n), a, i32(0), i32(n), b, i32(0), i32(n), c, i32(0), i32(n))
    batch = (i32(1),) + (i32(0),) * 7  # the batch descriptor of one product
    grid = (n // 128, n // 128, 1)
    calls = {name: (lambda f=f, x=args + batch * new: f(grid, (256,), x))
             for name, (f, new) in kernels.items()}  # fmt: skip
    ref = cp.asnumpy(a[:64]).astype(np.float64) @ cp.asnumpy(b).astype(np.float64)
    for name, call in calls.items():
        c.fill(cp.nan)
        call()
        got = cp.asnumpy(c[:64]).astype(np.float64)
        print(n, name, "rel err", float(np.abs(got - ref).max() / np.abs(ref).max()))
    calls["cublas"] = lambda: cp.matmul(a, b, out=c)
    calls["api"] = lambda: tiledmm.matmul(a, b, backend="cupy", kernel="register")
    rounds: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(3):
        for name, call in calls.items():
            rounds[name].append(event_median(call))
    cub = statistics.median(rounds["cublas"])
    for name, v in rounds.items():
        t = statistics.median(v)
        print(
            f"{n}^3 {name:9s} {t * 1e3:8.3f} ms  {2 * n**3 / t / 1e12:6.1f} TFLOP/s  "
            f"of cuBLAS {cub / t:.3f}  rounds {[round(x * 1e3, 3) for x in v]}"
        )


def main() -> None:
    kernels = {
        "old": (cp.RawModule(code=old_source()).get_function("gemm"), False),
        "new": (cp.RawModule(code=K.source("register", DEFS)).get_function("gemm"), True),
        "no_batch": (
            cp.RawModule(code=K.source("register", {**DEFS, "NO_BATCH": 1})).get_function("gemm"),
            True,
        ),  # fmt: skip
    }
    for n in (4096, 8192):
        measure(n, kernels)


if __name__ == "__main__":
    main()
