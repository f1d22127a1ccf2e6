# ruff: noqa: E501 - a one-shot bench script; long log/table lines stay readable
"""One-shot probe of the numba-cuda backend on a GPU: correctness, registers, sweep, overhead.

    bash .whl/setup.sh && . /tmp/tiledmm-env && python3 benches/numba_cuda_probe.py

Compiles every kernel variant in parallel worker processes first (Numba's compile is slow and
single-threaded; ``cache=True`` hands the result to this process), then: correctness of all
three families on odd shapes (float32/float64, NaN-poisoned outputs), registers/local memory
per kernel, a register-kernel sweep at 4096^3 against cupy.matmul (FP32, CUDA events, medians
after warm-up), the best variant at 2048/8192/4095, and tiledmm.matmul per-call cost at 64^3
against a bare launch of the same compiled kernel. Writes $OUT/h200-numba-probe.json and prints
a short table last. ``--small`` shrinks everything (simulator smoke test); ``--stages`` compares
the committed register kernel with double-buffered ones (writes h200-numba-probe-stages.json).
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import multiprocessing as mp
import os
import platform
import statistics
import sys
import time

import numpy as np

SMALL = "--small" in sys.argv
STAGES = "--stages" in sys.argv  # single- against double-buffered register kernels
T0 = time.time()


def log(*a):
    print(f"[{time.time() - T0:6.1f}s]", *a, flush=True)


def specs():
    from tiledmm_backends.numba_cuda.kernels import KernelSpec as K

    reg = [
        K("register", "float32", 128, 128, 8, 8, 8, unroll_k=False),
        K("register", "float32", 128, 128, 8, 8, 8, unroll_k=True),
        K("register", "float32", 128, 128, 16, 8, 8, unroll_k=False),
        K("register", "float32", 128, 128, 8, 8, 8, pad=4, unroll_k=False),
        K("register", "float32", 128, 128, 8, 8, 8, layout="contig", unroll_k=False),
        K("register", "float32", 128, 64, 8, 8, 4, unroll_k=False),
        K("register", "float32", 128, 128, 16, 8, 8, pad=4, unroll_k=False),
        K("register", "float32", 64, 64, 8, 4, 4, unroll_k=False),
    ]
    if STAGES:
        reg = [
            K("register", "float32", 128, 128, 8, 8, 8, unroll_k=True),  # the committed one
            K("register", "float32", 128, 128, 8, 8, 8, unroll_k=True, stages=2),
            K("register", "float32", 128, 128, 8, 8, 8, pad=4, unroll_k=True, stages=2),
            K("register", "float32", 128, 128, 8, 8, 8, unroll_k=False, stages=2),
            K("register", "float32", 128, 128, 16, 8, 8, unroll_k=False, stages=2),
        ]
    tiled = [K("tiled", "float32", 16, 16, 16), K("tiled", "float32", 32, 32, 32)]
    naive = [K("naive", "float32", 16, 16, 1), K("naive", "float32", 8, 32, 1)]
    if SMALL:
        reg = [K("register", "float32", 16, 16, 4, 4, 4)]
        tiled, naive = [K("tiled", "float32", 8, 8, 8)], [K("naive", "float32", 8, 8, 1)]
    return reg, tiled, naive


def _compile(spec):
    t = time.time()
    from tiledmm_backends.numba_cuda import _numba as nb

    nb.load(spec)
    return spec.name, time.time() - t


def compile_all(all_specs, deadline_s):
    done = {}
    ctx = mp.get_context("spawn")
    with cf.ProcessPoolExecutor(
        max_workers=min(len(all_specs), os.cpu_count() or 2), mp_context=ctx
    ) as ex:
        futs = {ex.submit(_compile, s): s for s in all_specs}
        try:
            for f in cf.as_completed(futs, timeout=deadline_s):
                try:
                    name, dt = f.result()
                    done[name] = round(dt, 1)
                    log(f"compiled {name} in {dt:.1f}s")
                except Exception as exc:  # noqa: BLE001
                    log(f"compile failed {futs[f].name}: {exc!r}"[:400])
        except cf.TimeoutError:
            log("compile deadline hit; skipping", [s.name for s in all_specs if s.name not in done])
            for p in ex._processes.values():  # noqa: SLF001 - our own workers
                p.kill()
    return done


def main():
    from numba import cuda
    from tiledmm_backends.numba_cuda import _numba as nb

    import tiledmm

    out_dir = os.environ.get("OUT", "/tmp")
    res = {"machine": {}, "compile_s": {}, "correct": [], "kernels": [], "sweep": [], "sizes": []}
    be = tiledmm.registry.get_backend("numba-cuda")
    dev = be.device()
    import numba

    res["machine"] = {
        "gpu": dev.name, "sms": dev.compute_units, "extra": dict(dev.extra),
        "python": platform.python_version(), "numpy": np.__version__, "numba": numba.__version__,
        "numba_cuda": _ver("numba-cuda"), "cupy": _ver("cupy-cuda13x") or _ver("cupy"),
        "cpu": platform.processor(), "host": platform.node(), "date": time.strftime("%Y-%m-%d %H:%M"),
        "simulator": nb.SIMULATOR, "backends": [(b.name, b.available, b.reason) for b in tiledmm.backends()],
    }  # fmt: skip
    log("machine", res["machine"])
    reg, tiled, naive = specs()
    fam_specs = [be.launcher(tiledmm.plan(64, 64, 64, backend="numba-cuda", kernel=f, dtype=d)).spec
                 for f in ("naive", "tiled", "register") for d in ("float32", "float64")]  # fmt: skip
    res["compile_s"] = compile_all(list(dict.fromkeys(reg + tiled + naive + fam_specs)), 170)

    # ---- correctness: all families, both dtypes, odd shapes, poisoned out on the device
    rng = np.random.default_rng(0)
    shapes = [(1, 1, 1), (1, 300, 5), (129, 257, 67), (300, 100, 0), (1000, 777, 333)]
    if SMALL:
        shapes = [(1, 9, 5), (17, 9, 13), (8, 8, 0)]
    for fam in ("naive", "tiled", "register"):
        for dt in ("float32", "float64"):
            for m, n, k in shapes:
                a, b = (
                    rng.standard_normal((m, k)).astype(dt),
                    rng.standard_normal((k, n)).astype(dt),
                )
                c = cuda.to_device(np.full((m, n), np.nan, dt))
                tiledmm.matmul(
                    cuda.to_device(a), cuda.to_device(b), backend="numba-cuda", kernel=fam, out=c
                )
                h = c.copy_to_host()
                ref = a.astype(np.float64) @ b.astype(np.float64)
                err = (
                    float(np.linalg.norm(h - ref) / max(np.linalg.norm(ref), 1e-30))
                    if h.size
                    else 0.0
                )
                res["correct"].append(dict(fam=fam, dtype=dt, shape=[m, n, k], rel_error=err,
                                           nan=bool(np.isnan(h).any())))  # fmt: skip
    bad = [
        c
        for c in res["correct"]
        if c["nan"] or c["rel_error"] > (1e-5 if c["dtype"] == "float32" else 1e-12)
    ]
    log(f"correctness: {len(res['correct'])} cases, {len(bad)} bad", bad[:5])

    for s in reg + tiled + naive + fam_specs:
        if s.name in res["compile_s"]:
            try:
                res["kernels"].append(nb.kernel_report(s))
            except Exception as exc:  # noqa: BLE001
                res["kernels"].append({"kernel": s.name, "error": repr(exc)})
    log("kernels", res["kernels"])

    # ---- timing
    try:
        import cupy
    except ImportError:
        cupy = None

    def bench(spec, m, n, k, reps=10):
        a = cuda.to_device(rng.standard_normal((m, k)).astype(spec.dtype))
        b = cuda.to_device(rng.standard_normal((k, n)).astype(spec.dtype))
        c = cuda.device_array((m, n), spec.dtype)
        launch = nb.Launcher(spec, (-(-n // spec.bn), -(-m // spec.bm)))
        t = statistics.median(nb.event_seconds(lambda: launch(a, b, c, m, n, k), reps, 2))
        ref = (
            a.copy_to_host().astype(np.float64) @ b.copy_to_host().astype(np.float64)
            if m <= 4096
            else None
        )
        err = (
            None
            if ref is None
            else float(np.linalg.norm(c.copy_to_host() - ref) / np.linalg.norm(ref))
        )
        return 2 * m * n * k / t / 1e9, err

    vendor = {}

    def vendor_gflops(m, n, k):
        if cupy is None:
            return None
        if (m, n, k) not in vendor:
            a = cupy.asarray(rng.standard_normal((m, k)).astype("float32"))
            b = cupy.asarray(rng.standard_normal((k, n)).astype("float32"))
            t = statistics.median(nb.event_seconds(lambda: cupy.matmul(a, b), 10, 3))
            vendor[(m, n, k)] = 2 * m * n * k / t / 1e9
        return vendor[(m, n, k)]

    N = 16 if SMALL else 4096
    v = vendor_gflops(N, N, N)
    for s in reg + tiled + naive:
        if s.name not in res["compile_s"]:
            continue
        g, err = bench(s, N, N, N, reps=3 if s.family == "naive" else 10)
        res["sweep"].append(dict(kernel=s.name, family=s.family, m=N, n=N, k=N, gflops=g,
                                 vendor_gflops=v, ratio=g / v if v else None, rel_error=err))  # fmt: skip
        log(
            f"{s.name:45s} {g:9.0f} GFLOP/s  {g / v if v else float('nan'):.3f} of cuBLAS  err {err}"
        )
    regs = [r for r in res["sweep"] if r["family"] == "register"]
    if regs and not SMALL:
        best = max(regs, key=lambda r: r["gflops"])
        spec = next(s for s in reg if s.name == best["kernel"])
        for m, n, k in [(2048, 2048, 2048), (8192, 8192, 8192), (4095, 4095, 4095)]:
            g, err = bench(spec, m, n, k)
            vv = vendor_gflops(m, n, k)
            res["sizes"].append(dict(kernel=spec.name, m=m, n=n, k=k, gflops=g, vendor_gflops=vv,
                                     ratio=g / vv if vv else None, rel_error=err))  # fmt: skip
            log(f"{spec.name} {m}x{n}x{k}: {g:.0f} GFLOP/s, {g / vv if vv else 0:.3f} of cuBLAS")

    res["overhead"] = overhead(tiledmm, be, nb, cuda, rng)
    log("overhead", res["overhead"])
    res["wall_s"] = round(time.time() - T0, 1)
    path = os.path.join(out_dir, "h200-numba-probe" + ("-stages" if STAGES else "") + ".json")
    with open(path, "w") as f:
        json.dump(res, f, indent=1, default=str)
    table(res)


def overhead(tiledmm, be, nb, cuda, rng, calls=2000):
    m = n = k = 16 if SMALL else 64
    calls, warm = (2, 1) if SMALL else (calls, 20)
    a = cuda.to_device(rng.standard_normal((m, k)).astype("float32"))
    b = cuda.to_device(rng.standard_normal((k, n)).astype("float32"))
    c = cuda.device_array((m, n), "float32")
    plan = tiledmm.plan(m, n, k, backend="numba-cuda", kernel="register")
    launch = be.launcher(plan)
    fa, fb, fc = a.reshape(m * k), b.reshape(k * n), c.reshape(m * n)
    disp, u = nb.load(launch.spec), np.uint32
    cfg = disp[launch.grid, launch.block]

    def per_call(fn):
        for _ in range(warm):
            fn()
        nb.synchronize()
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        nb.synchronize()
        return (time.perf_counter() - t) / calls * 1e6

    out = {}
    for _ in range(2):  # second round is the one reported (warm caches)
        out = {
            "bare_dispatcher_launch_us": per_call(lambda: cfg(fa, fb, fc, u(m), u(n), u(k))),
            "bare_kernel_syntax_us": per_call(lambda: disp[launch.grid, launch.block](fa, fb, fc, u(m), u(n), u(k))),
            "launcher_only_us": per_call(lambda: launch(a, b, c, m, n, k)),
            "matmul_out_us": per_call(lambda: tiledmm.matmul(a, b, backend="numba-cuda", kernel="register", out=c)),
            "matmul_alloc_us": per_call(lambda: tiledmm.matmul(a, b, backend="numba-cuda", kernel="register")),
            # the fair yardstick for matmul without out=: the bare launch plus Numba's allocation
            "bare_launch_alloc_us": per_call(lambda: cfg(fa, fb, cuda.device_array(m * n, "float32"), u(m), u(n), u(k))),
        }  # fmt: skip
    out["fast_launch"] = launch._fast is not None
    out["ratio_matmul_out_vs_bare"] = out["matmul_out_us"] / out["bare_dispatcher_launch_us"]
    out["ratio_matmul_alloc_vs_bare_alloc"] = out["matmul_alloc_us"] / out["bare_launch_alloc_us"]
    return out


def _ver(name):
    import importlib.metadata as md

    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


def table(res):
    print("\n==== numba-cuda probe summary ====")
    print(
        f"device {res['machine']['gpu']}  numba-cuda {res['machine']['numba_cuda']}  numpy {res['machine']['numpy']}"
    )
    bad = [
        c
        for c in res["correct"]
        if c["nan"] or c["rel_error"] > (1e-5 if c["dtype"] == "float32" else 1e-12)
    ]
    print(f"correctness: {len(res['correct']) - len(bad)}/{len(res['correct'])} ok")
    for r in res["kernels"]:
        print(
            f"  {r.get('kernel'):45s} regs {r.get('registers')} local {r.get('local_bytes')} shared {r.get('shared_bytes')}"
        )
    print(f"{'kernel':45s} {'size':>15s} {'GFLOP/s':>9s} {'vs cuBLAS':>9s}")
    for r in res["sweep"] + res["sizes"]:
        ratio = f"{r['ratio']:.3f}" if r.get("ratio") else "-"
        print(f"{r['kernel']:45s} {r['m']}x{r['n']}x{r['k']:>5d} {r['gflops']:9.0f} {ratio:>9s}")
    o = res["overhead"]
    print(
        "per call at 64^3 (us): "
        + ", ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in o.items())
    )
    print(f"wall {res['wall_s']} s")


if __name__ == "__main__":
    main()
