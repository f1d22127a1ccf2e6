"""Per-call cost of small products through Numba CUDA with CuPy inputs, beside cupy.matmul and
the CuPy backend, and the warnings a user sees (issue 11: within 1.5x of cupy.matmul at 64^3).

    python -m benches.studies.numba_overhead [--sizes 64,128,256] [--calls 2000]

Per size: microseconds per call (wall time of ``--calls`` calls back to back, then one
synchronize: what a Python loop of small products costs), for cupy.matmul, tiledmm cupy,
tiledmm numba-cuda (CuPy in, no out=; CuPy in with out=; Numba arrays in), and whether the
numba-cuda launcher took the fast path. Last: the NumbaPerformanceWarnings raised during the
tiledmm calls (expected 0) and during one small launch of the user's own kernel (expected 1:
the filter is scoped to tiledmm's launches).
"""

from __future__ import annotations

import argparse
import os
import time
import warnings

import numpy as np

os.environ.setdefault("CUPY_TF32", "0")

import tiledmm


def per_call(fn, calls: int, sync) -> float:
    for _ in range(20):
        fn()
    sync()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    sync()
    return (time.perf_counter() - t0) / calls


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="64,128,256")
    p.add_argument("--calls", type=int, default=2000)
    args = p.parse_args(argv)
    import cupy as cp
    from numba import cuda
    from tiledmm_backends.numba_cuda import engine as nb

    sync = cp.cuda.Device().synchronize
    be = tiledmm.get_backend("numba-cuda")
    print(f"numba engine {nb.ENGINE}; columns: us per call")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for s in map(int, args.sizes.split(",")):
            rng = np.random.default_rng(s)
            a = cp.asarray(rng.random((s, s), dtype=np.float32))
            b = cp.asarray(rng.random((s, s), dtype=np.float32))
            out = cp.empty((s, s), np.float32)
            na, nbb, nout = cuda.as_cuda_array(a), cuda.as_cuda_array(b), cuda.as_cuda_array(out)
            ref = cp.matmul(a, b)
            got = tiledmm.matmul(a, b, backend="numba-cuda")
            err = float(cp.abs(got - ref).max() / cp.abs(ref).max())
            rows = {
                "cupy.matmul": lambda a=a, b=b: cp.matmul(a, b),
                "tiledmm cupy": lambda a=a, b=b: tiledmm.matmul(a, b, backend="cupy"),
                "numba-cuda (cupy in)": lambda a=a, b=b: tiledmm.matmul(a, b, backend="numba-cuda"),
                "numba-cuda (cupy in, out=)": lambda a=a, b=b, o=out: tiledmm.matmul(
                    a, b, backend="numba-cuda", out=o
                ),
                "numba-cuda (numba in, out=)": lambda a=na, b=nbb, o=nout: tiledmm.matmul(
                    a, b, backend="numba-cuda", out=o
                ),
            }
            t = {k: per_call(f, args.calls, sync) for k, f in rows.items()}
            plan = tiledmm.plan(s, s, s, backend="numba-cuda")
            fast = be.launcher(plan).fast
            base = t["cupy.matmul"]
            print(f"{s}^3 (rel err {err:.1e}, fast launch {fast}, {plan.kernel} {plan.grid}):")
            for k, v in t.items():
                print(f"  {k:<30} {v * 1e6:8.1f} us  {v / base:5.2f}x cupy.matmul")
        ours = [w for w in seen if issubclass(w.category, nb.PERF_WARNING)]
        print(f"NumbaPerformanceWarnings during tiledmm calls: {len(ours)} (expected 0)")
        for w in ours[:3]:
            print(f"  {w.message}")
        seen.clear()

        @cuda.jit
        def users_kernel(x):  # the user's own kernel, configured with one block
            x[0] = 1.0

        users_kernel[1, 32]
        user = [w for w in seen if issubclass(w.category, nb.PERF_WARNING)]
        print(f"...for a user's own 1-block launch: {len(user)} (expected 1)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
