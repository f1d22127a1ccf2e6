"""Batched products on one GPU: CuPy and OpenCL beside cupy.matmul, and why they differ.

    python -m benches.probes.batched_check [--geometries auto,128x64,128x64mb3,128x128,64x64]

For each batched shape and backend it prints, in microseconds per product:
  ``event``  CUDA events (CuPy) / profiling events (OpenCL) around ONE call, as the benches
             time it: on CuPy this includes the host time before the kernel starts;
  ``loop``   20 calls back to back between two events, divided by 20 (the GPU's time when the
             host keeps ahead of it; OpenCL: first start to last end);
  ``host``   wall time of one call without waiting (the Python launch path);
and GFLOP/s of ``loop``, its fraction of cuBLAS (cupy.matmul, timed the same way), and the
registers of the compiled kernel: CuPy's (NVRTC) and OpenCL's own PTX loaded through CuPy,
whose time under CuPy's launch (``ocl-ptx@cupy``) says whether the code or the launch differs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

os.environ.setdefault("CUPY_TF32", "0")

import tiledmm
from tiledmm import Geometry, make_plan
from tiledmm.core import dispatch

# (batch of a, batch of b, m, n, k): b broadcast in the last two
SHAPES = [((32,), (32,), 512, 512, 512), ((8,), (8,), 1024, 1024, 1024),
          ((256,), (256,), 128, 128, 128), ((64,), (64,), 256, 256, 64),
          ((64,), (), 256, 256, 64), ((4, 8), (8,), 256, 256, 256)]  # fmt: skip
_REG = (("pad", 4), ("stages", 2), ("use_local", 1), ("vm", 4), ("vn", 4))
GEOS = {
    "128x64": Geometry((128, 64, 16), (8, 4), _REG),
    "128x64mb3": Geometry((128, 64, 16), (8, 4), tuple(sorted(_REG + (("min_blocks", 3),)))),
    "128x128": Geometry((128, 128, 16), (8, 8), _REG),
    "64x64": Geometry((64, 64, 16), (4, 4), _REG),
}


def cupy_times(cp, fn, reps=20):
    """(event around one call, per call of a back-to-back loop, host wall of one call), s."""
    fn()
    cp.cuda.Device().synchronize()
    s, e = cp.cuda.Event(), cp.cuda.Event()
    one = []
    for _ in range(5):
        s.record()
        fn()
        e.record()
        e.synchronize()
        one.append(cp.cuda.get_elapsed_time(s, e) / 1e3)
    s.record()
    for _ in range(reps):
        fn()
    e.record()
    e.synchronize()
    loop = cp.cuda.get_elapsed_time(s, e) / 1e3 / reps
    cp.cuda.Device().synchronize()
    t0 = time.perf_counter()
    fn()
    host = time.perf_counter() - t0
    cp.cuda.Device().synchronize()
    return statistics.median(one), loop, host


def opencl_times(be, fn, reps=20):
    one = statistics.median(be.timings(fn, repeat=5, warmup=2))
    st = be.state()
    st.events = []
    for _ in range(reps):
        fn()
    st.queue.finish()
    ev, st.events = st.events, None
    loop = (ev[-1].profile.end - ev[0].profile.start) * 1e-9 / reps
    t0 = time.perf_counter()
    fn()
    host = time.perf_counter() - t0
    st.queue.finish()
    return one, loop, host


def ocl_ptx_function(cp, ocl, plan):
    """OpenCL's compiled program for ``plan`` (PTX on NVIDIA) loaded as a CuPy function."""
    st = ocl.state()
    kern = st.launches.get(plan, st.device_id(), True)[0]
    ptx = kern.program.get_info(__import__("pyopencl").program_info.BINARIES)[0]
    mod = cp.cuda.function.Module()
    mod.load(bytes(ptx))
    return mod.get_function("gemm"), mod


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--geometries", default="auto,128x64,128x64mb3,128x128,64x64")
    args = p.parse_args(argv)
    import cupy as cp
    from tiledmm_backends.cupy_cuda.arrays import ARRAYS
    from tiledmm_backends.kernels import launch

    cu = tiledmm.get_backend("cupy")
    ocl = tiledmm.get_backend("opencl") if tiledmm.get_backend("opencl").available else None
    rng = np.random.default_rng(3)
    print("shape | backend geometry | event us | loop us | host us | GFLOP/s (loop) | of cuBLAS"
          " | regs")  # fmt: skip
    for ba, bb, m, n, k in SHAPES:
        a = rng.random(ba + (m, k), dtype=np.float32) * 2 - 1
        b = rng.random(bb + (k, n), dtype=np.float32) * 2 - 1
        ref = np.matmul(a.astype(np.float64), b)
        nb = ref.size // (m * n)
        flops = 2 * nb * m * n * k
        A, B = cp.asarray(a), cp.asarray(b)
        C = cp.empty(ref.shape, np.float32)
        ev, lp, ho = cupy_times(cp, lambda A=A, B=B, C=C: cp.matmul(A, B, out=C))
        vend = lp
        tag = f"{ba}@{bb} {m}x{n}x{k}"
        print(f"{tag} | cuBLAS | {ev * 1e6:.1f} | {lp * 1e6:.1f} | {ho * 1e6:.1f} | "
              f"{flops / lp / 1e9:.0f} | 1.00 | -", flush=True)  # fmt: skip
        for g in args.geometries.split(","):
            for be in [cu] + ([ocl] if ocl else []):
                try:
                    if g == "auto":
                        X, Y = (A, B) if be is cu else (be.asarray(a, a.dtype),
                                                        be.asarray(b, b.dtype))  # fmt: skip

                        def fn(X=X, Y=Y, be=be):
                            return tiledmm.matmul(X, Y, backend=be.name)

                        plan = dispatch.plan_for(be, m, n, k, "float32", batch=nb)
                        out = fn()
                    else:
                        plan = make_plan(m, n, k, dtype="float32", kernel="register",
                                         device=be.device(), geometry=GEOS[g],
                                         backend=be.name)  # fmt: skip
                        X, Y = (A, B) if be is cu else (be.asarray(a, a.dtype),
                                                        be.asarray(b, b.dtype))  # fmt: skip
                        out = be.empty(ref.shape, np.dtype("float32"))

                        def fn(X=X, Y=Y, out=out, be=be, plan=plan):
                            assert be.run_batched(plan, X, Y, out)

                        fn()
                    err = float(np.abs(be.to_numpy(out) - ref).max() / np.abs(ref).max())
                    times = cupy_times(cp, fn) if be is cu else opencl_times(be, fn)
                    regs = "-"
                    if be is cu and plan.kernel == "register":
                        regs = str(cu.function(plan, True).num_regs)
                    label = f"{be.name} {g}" + (f"->{plan.kernel}" if g == "auto" else "")
                    ev, lp, ho = times
                    print(f"{tag} | {label} | {ev * 1e6:.1f} | {lp * 1e6:.1f} | {ho * 1e6:.1f} |"
                          f" {flops / lp / 1e9:.0f} | {vend / lp:.2f} | {regs} | err {err:.1e}",
                          flush=True)  # fmt: skip
                    if be is ocl and g != "auto":  # the same source as OpenCL compiled it
                        fo, _mod = ocl_ptx_function(cp, ocl, plan)
                        call = (fo,) + cu.launches.get(plan, 0, True)[1:]

                        class Fixed:
                            def get(self, *a, call=call):
                                return call

                        out2 = cp.empty(ref.shape, np.float32)

                        def f2(out2=out2, plan=plan, A=A, B=B):
                            launch.run_batched(ARRAYS, Fixed(), plan, A, B, out2)

                        f2()
                        e2 = float(np.abs(out2.get() - ref).max() / np.abs(ref).max())
                        ev, lp, ho = cupy_times(cp, f2)
                        print(f"{tag} | ocl-ptx@cupy {g} | {ev * 1e6:.1f} | {lp * 1e6:.1f} | "
                              f"{ho * 1e6:.1f} | {flops / lp / 1e9:.0f} | {vend / lp:.2f} | "
                              f"{fo.num_regs} | err {e2:.1e}", flush=True)  # fmt: skip
                except Exception as exc:  # noqa: BLE001 - one row must not end the run
                    print(f"{tag} | {be.name} {g} | FAILED {type(exc).__name__}: {exc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
