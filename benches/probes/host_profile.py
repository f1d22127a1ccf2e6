"""Host time of one tiledmm.matmul call (float16, CuPy arrays; a decode shape by default): wall
time per call beside cupy.matmul's, the same calls between two CUDA events, and cProfile's top
entries over 300 calls, to find where the host time goes.

    python -m benches.probes.host_profile [M N K]
"""

import cProfile
import pstats
import sys
import time

import numpy as np

import tiledmm


def main() -> None:
    import cupy as cp

    m, n, k = (int(x) for x in (sys.argv[1:] or ["8", "14336", "4096"]))
    rng = np.random.default_rng(0)
    a = cp.asarray(rng.standard_normal((m, k)).astype(np.float16))
    b = cp.asarray(rng.standard_normal((k, n)).astype(np.float16))
    for _ in range(20):
        tiledmm.matmul(a, b)
        cp.matmul(a, b)
    cp.cuda.runtime.deviceSynchronize()
    for name, fn in (("tiledmm", lambda: tiledmm.matmul(a, b)), ("cupy", lambda: cp.matmul(a, b))):
        t0 = time.perf_counter()
        for _ in range(200):
            fn()
        host = (time.perf_counter() - t0) / 200
        cp.cuda.runtime.deviceSynchronize()
        s, e = cp.cuda.Event(), cp.cuda.Event()
        s.record()
        for _ in range(200):
            fn()
        e.record()
        e.synchronize()
        print(
            f"{name:8s} {m}x{n}x{k}: host {host * 1e6:7.1f} us/call, loop "
            f"{cp.cuda.get_elapsed_time(s, e) / 200 * 1e3:7.1f} us/call"
        )
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(300):
        tiledmm.matmul(a, b)
    pr.disable()
    cp.cuda.runtime.deviceSynchronize()
    pstats.Stats(pr).sort_stats("tottime").print_stats(22)


if __name__ == "__main__":
    main()
