"""Per-call cost of tiledmm.matmul at 64^3 on device arrays, against the yardsticks.

    python3 -m benches.studies.dispatch_overhead > benches/data/h200-dispatch.json
    python3 -m benches.studies.dispatch_overhead --profile     # + CuPy breakdown and a cProfile

CuPy: tiledmm.matmul(a, b, backend="cuda") against cupy.matmul (cuBLAS) on the same CuPy arrays.
Numba: tiledmm.matmul against a bare launch of the same compiled kernel (numba-cuda's engine).
Wall time over many calls with one synchronize at the end (what an application pays), median of
five rounds, in microseconds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

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


def cupy_rows(profile: bool = False) -> dict:
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
    if profile:
        res.update(cupy_breakdown(a, b, sync))
    return res


def cupy_breakdown(a, b, sync) -> dict:
    """Where a call goes: matmul by alias, by name, the backend's run alone, and a cProfile."""
    import cProfile
    import io
    import pstats

    import cupy as cp

    be = tiledmm.get_backend("cupy")
    plan = tiledmm.plan(64, 64, 64, backend="cupy", kernel="register")
    c = cp.empty((64, 64), np.float32)
    cases = {
        "tiledmm.matmul_auto_us": lambda: tiledmm.matmul(a, b),
        "tiledmm.matmul_cupy_register_us": lambda: tiledmm.matmul(a, b, backend="cupy",
                                                                  kernel="register"),
        "backend.run_us": lambda: be.run(plan, a, b, c),
    }  # fmt: skip
    res = {name: per_call_us(fn, sync, calls=3000, rounds=3, warmup=200)
           for name, fn in cases.items()}  # fmt: skip
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(2000):
        tiledmm.matmul(a, b)
    pr.disable()
    buf = io.StringIO()
    pstats.Stats(pr, stream=buf).sort_stats("tottime").print_stats(14)
    res["profile"] = buf.getvalue()[-3500:]
    return res


def numba_rows(calls: int = 2000, size: int = 64, warmup: int = 20) -> dict:
    """tiledmm.matmul on Numba device arrays against bare launches of the same kernel."""
    from numba import cuda
    from tiledmm_backends.numba_cuda import engine

    be = tiledmm.get_backend("numba-cuda")
    m = n = k = size
    rng = np.random.default_rng(0)
    a = cuda.to_device(rng.standard_normal((m, k)).astype("float32"))
    b = cuda.to_device(rng.standard_normal((k, n)).astype("float32"))
    c = cuda.device_array((m, n), "float32")
    plan = tiledmm.plan(m, n, k, backend="numba-cuda", kernel="register")
    launch = be.launcher(plan)
    fa, fb, fc = a.reshape(m * k), b.reshape(k * n), c.reshape(m * n)
    disp, u = engine.load(launch.spec), np.uint32
    cfg = disp[launch.grid, launch.block]
    rest = tuple(u(v) for v in engine.NOBATCH[1:])  # the kernels' batch arguments: one product

    def us(fn):
        return per_call_us(fn, engine.synchronize, calls=calls, rounds=3, warmup=warmup)

    out = {
        "bare_dispatcher_launch_us": us(lambda: cfg(fa, fb, fc, u(m), u(n), u(k), *rest)),
        "bare_kernel_syntax_us": us(
            lambda: disp[launch.grid, launch.block](fa, fb, fc, u(m), u(n), u(k), *rest)
        ),  # noqa: E501
        "launcher_only_us": us(lambda: launch(a, b, c, m, n, k)),
        "matmul_out_us": us(
            lambda: tiledmm.matmul(a, b, backend="numba-cuda", kernel="register", out=c)
        ),  # noqa: E501
        "matmul_alloc_us": us(
            lambda: tiledmm.matmul(a, b, backend="numba-cuda", kernel="register")
        ),  # noqa: E501
        # the fair yardstick for matmul without out=: the bare launch plus Numba's allocation
        "bare_launch_alloc_us": us(
            lambda: cfg(fa, fb, cuda.device_array(m * n, "float32"), u(m), u(n), u(k), *rest)
        ),  # noqa: E501
    }
    out["fast_launch"] = launch.fast
    out["ratio_matmul_out_vs_bare"] = out["matmul_out_us"] / out["bare_dispatcher_launch_us"]
    out["ratio_matmul_alloc_vs_bare_alloc"] = out["matmul_alloc_us"] / out["bare_launch_alloc_us"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", action="store_true", help="CuPy breakdown and cProfile")
    args = ap.parse_args()
    out = {"shape": [64, 64, 64], "dtype": "float32"}
    for name, fn in (("cupy", lambda: cupy_rows(args.profile)), ("numba-cuda", numba_rows)):
        try:
            out[name] = fn()
        except Exception as exc:  # noqa: BLE001 - report what could not be measured
            out[name] = {"error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
