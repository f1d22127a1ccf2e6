"""Per-call cost of tiledmm.matmul at 64^3 on device arrays, against the yardsticks.

    python3 benches/dispatch_overhead.py > benches/results/h200-dispatch.json

CuPy: tiledmm.matmul(a, b, backend="cuda") against cupy.matmul (cuBLAS) on the same CuPy arrays.
Numba: tiledmm.matmul against a bare launch of the same compiled kernel (numba_cuda_probe.py).
Wall time over many calls with one synchronize at the end (what an application pays), median of
five rounds, in microseconds.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

import tiledmm


def per_call_us(fn, sync, calls: int = 2000, rounds: int = 5, warmup: int = 50) -> float:
    """Median over ``rounds`` of the wall time per call of ``fn`` (one ``sync`` per round)."""
    for _ in range(warmup):
        fn()
    sync()
    samples = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        samples.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(samples)


def cupy_rows() -> dict:
    import cupy as cp

    rng = np.random.default_rng(0)
    a = cp.asarray(rng.standard_normal((64, 64)).astype("float32"))
    b = cp.asarray(rng.standard_normal((64, 64)).astype("float32"))
    sync = cp.cuda.Device().synchronize
    res = {
        "cupy.matmul_us": per_call_us(lambda: cp.matmul(a, b), sync),
        "tiledmm.matmul_cuda_us": per_call_us(lambda: tiledmm.matmul(a, b, backend="cuda"), sync),
        "backend": tiledmm.get_backend("cuda").name,
    }
    res["ratio"] = res["tiledmm.matmul_cuda_us"] / res["cupy.matmul_us"]
    return res


def numba_rows() -> dict:
    sys.path.insert(0, str(Path(__file__).parent))
    from numba import cuda
    from numba_cuda_probe import overhead  # the probe's bare-launch comparison
    from tiledmm_backends.numba_cuda import _numba as nb

    be = tiledmm.get_backend("numba-cuda")
    return overhead(tiledmm, be, nb, cuda, np.random.default_rng(0))


def main() -> None:
    out = {"shape": [64, 64, 64], "dtype": "float32"}
    for name, fn in (("cupy", cupy_rows), ("numba-cuda", numba_rows)):
        try:
            out[name] = fn()
        except Exception as exc:  # noqa: BLE001 - report what could not be measured
            out[name] = {"error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
