"""x @ A or A @ x through tiledmm on CuPy, 3 launches (ncu profiles the third); with a second
argument, also the timer's floor (an empty kernel between the same device events).

    python vec_child.py 1x4096x4096 [t]
"""

import statistics
import sys

import cupy as cp
import numpy as np

import tiledmm


def main() -> None:
    m, n, k = map(int, sys.argv[1].split("x"))
    rng = cp.random.default_rng(0)
    a = (rng.random((m, k)) * 2 - 1).astype("float32")
    b = (rng.random((k, n)) * 2 - 1).astype("float32")
    for _ in range(3):
        tiledmm.matmul(a, b, backend="cupy")
    cp.cuda.Device().synchronize()
    if len(sys.argv) > 2:
        be = tiledmm.get_backend("cupy")
        spin = be._spin()
        floor = be.timings(lambda: spin((1,), (1,), (np.uint64(0),)), repeat=50, warmup=5)
        t = be.timings(lambda: tiledmm.matmul(a, b, backend="cupy"), repeat=50, warmup=5)
        print(f"TIMER floor (one empty kernel between events): "
              f"{statistics.median(floor) * 1e6:.2f} us; {sys.argv[1]}: "
              f"{statistics.median(t) * 1e6:.2f} us")  # fmt: skip


if __name__ == "__main__":
    main()
