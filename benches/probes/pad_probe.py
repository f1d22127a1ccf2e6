"""Odd leading dimensions on the H200 (CuPy, float32): the register kernel's unaligned variant
against copies into 16-byte-aligned rows plus the aligned variant, per shape: the figures
behind ``tiledmm.model.hierarchy.pad_pays`` (benches/results/logs/h200-pad-probe-s13.txt).

    python3 -m benches.probes.pad_probe

Columns: what ``pad_pays`` says for the plan, the call as shipped (``out=`` given), each
copy alone, the aligned kernel on operands copied beforehand, their sum, cuBLAS.
"""

from __future__ import annotations

import statistics

import numpy as np

import tiledmm
from tiledmm.core.dispatch import plan_for

SHAPES = [(1000, 3000, 777), (257, 4097, 1031), (4095, 4095, 4095), (1009, 1013, 1019),
          (511, 513, 515), (2047, 2049, 2051), (100, 5000, 333), (3001, 3001, 3001),
          (8191, 8191, 257)]  # fmt: skip


def main() -> None:
    import cupy as cp
    from tiledmm_backends import kernels as K
    from tiledmm_backends.cupy_cuda.arrays import ARRAYS

    cu = tiledmm.get_backend("cupy")

    def med(fn, repeat: int = 30) -> float:
        return statistics.median(cu.timings(fn, repeat=repeat, warmup=3)) * 1e6

    def padded(x):  # the launch's own copy into aligned rows
        return ARRAYS.aligned_copy(x, K.aligned_ld(x.shape[1], 4), "probe")

    rng = np.random.default_rng(2)
    print("shape | pad_pays | shipped us | copies us (A, B) | aligned kernel us | copies + "
          "aligned | cuBLAS")  # fmt: skip

    def row(m: int, n: int, k: int) -> str:
        a = cp.asarray(rng.standard_normal((m, k), dtype=np.float32))
        b = cp.asarray(rng.standard_normal((k, n), dtype=np.float32))
        out = cp.empty((m, n), cp.float32)
        plan = plan_for(cu, m, n, k, "float32", "auto")
        pays = K.pad_pays(plan, k % 4 != 0, n % 4 != 0)
        shipped = med(lambda: tiledmm.matmul(a, b, backend="cupy", out=out))
        ap, bp = padded(a), padded(b)
        ca = med(lambda: padded(a)) if k % 4 else 0.0
        cb = med(lambda: padded(b)) if n % 4 else 0.0
        aligned = med(lambda: tiledmm.matmul(ap, bp, backend="cupy", out=out))
        vendor = med(lambda: cp.matmul(a, b))
        return (f"{m}x{n}x{k} | {plan.kernel} {pays} | {shipped:.1f} | {ca:.1f}, {cb:.1f} | "
                f"{aligned:.1f} | {ca + cb + aligned:.1f} | {vendor:.1f}")  # fmt: skip

    for m, n, k in SHAPES:
        print(row(m, n, k), flush=True)


if __name__ == "__main__":
    main()
