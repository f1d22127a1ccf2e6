"""GPU smoke test of the CUDA-capable paths (cupy, opencl, numba-cuda) after a refactor.

    mkdir -p /tmp/icd; echo /usr/lib/libnvidia-opencl.so.1 > /tmp/icd/nvidia.icd
    OCL_ICD_VENDORS=/tmp/icd TILEDMM_OPENCL_DEVICE=NVIDIA CUPY_TF32=0 python3 -m benches.gpu_smoke

For each backend that is available: every family through the tests' own checks
(``tests/gemm_checks.py``: ``check_shapes`` on odd shapes into NaN-poisoned outputs, here with
one large odd shape added, and ``check_layouts``: transposed / sliced operands, a strided
``out``, a batch; the one error metric, ``tiledmm.util.accuracy``); the tiles each family
resolves to on this device; the register kernel at 4096^3 as a fraction of ``cupy.matmul``
(the backends' ``timings()``: CUDA events or OpenCL profiling, median of 10) next to the
committed H200 figure; and that the launch cache stays bounded. numba-cuda also returns the
caller's array kind (CuPy in -> CuPy out, Numba in -> Numba out) in a mixed sequence. Prints
one line per check and exits 1 if any check failed. Run it as a module from the checkout (it
imports ``tests.gemm_checks``).
"""

from __future__ import annotations

import statistics
import sys

import numpy as np

import tiledmm
from tests.gemm_checks import SHAPES, check_layouts, check_shapes

BIG = [(257, 4097, 1031)]  # odd in every dimension, a grid of many blocks
COMMITTED = {"cupy": 0.92, "opencl": 0.92, "numba-cuda": 0.70}  # register / cuBLAS, 4096^3
FAILED: list[str] = []


def check(what: str, ok: bool, detail: str = "") -> None:
    print(f"{'ok  ' if ok else 'FAIL'} {what} {detail}", flush=True)
    if not ok:
        FAILED.append(what)


def correctness(name: str) -> None:
    be = tiledmm.get_backend(name)
    for dtype in ("float32", "float64"):
        for fam in be.kernels:
            if fam == "mma" and dtype == "float32":  # tensor cores only when TF32 is asked for
                continue
            try:  # the tests' checks: they assert, with the case that failed
                worst = max(check_shapes(name, fam, dtype, [*SHAPES, *BIG]),
                            check_layouts(name, fam, dtype))  # fmt: skip
                ok, what = True, f"worst error {worst:.1e}"
            except AssertionError as exc:
                ok, what = False, f"failed {exc}"
            geo = tiledmm.plan(4096, 4096, 4096, dtype=dtype, backend=name, kernel=fam)
            check(f"{name} {fam} {dtype}", ok,
                  f"{what}; tiles {geo.block_tile}/{geo.thread_tile} "
                  f"({geo.geometry_source[:60]})")  # fmt: skip


def speed(name: str) -> None:
    import cupy as cp

    be = tiledmm.get_backend(name)
    n = 4096
    rs = cp.random.RandomState(1)
    ha = rs.standard_normal((n, n), dtype=np.float32)
    hb = rs.standard_normal((n, n), dtype=np.float32)
    plan = tiledmm.plan(n, n, n, backend=name, kernel="register")
    if name == "cupy":
        a, b, c = ha, hb, cp.empty((n, n), np.float32)
    else:
        f32 = np.dtype(np.float32)
        a, b, c = be.asarray(ha.get(), f32), be.asarray(hb.get(), f32), be.empty((n, n), f32)
    t = statistics.median(be.timings(lambda: be.run(plan, a, b, c), repeat=10, warmup=2))
    cub = tiledmm.get_backend("cupy")
    tv = statistics.median(cub.timings(lambda: cp.matmul(ha, hb), repeat=10, warmup=2))
    ratio = tv / t
    what = f"{2 * n**3 / t / 1e12:.1f} TF/s, {ratio:.2f} of cuBLAS (committed {COMMITTED[name]})"
    check(f"{name} register 4096^3 speed", ratio > COMMITTED[name] - 0.08, what)


def launch_cache(name: str) -> None:
    be = tiledmm.get_backend(name)
    rng = np.random.default_rng()
    for m in range(1, 300):
        a = rng.standard_normal((m, 3)).astype(np.float32)
        tiledmm.matmul(a, a.T, backend=name, kernel="naive")
    launches = be.state().launches if name == "opencl" else be.launches
    cache = getattr(launches, "cache", launches)  # numba-cuda keeps a plain LRUCache
    check(f"{name} launch cache bounded", len(cache) <= cache.maxsize, f"{len(cache)} entries")


def numba_kinds() -> None:
    import cupy as cp
    from numba import cuda

    h = np.random.default_rng().standard_normal((33, 17)).astype(np.float32)
    kinds = []
    for x in (cp.asarray(h), cuda.to_device(h), cp.asarray(h), cuda.to_device(h)):
        r = tiledmm.matmul(x, x.T, backend="numba-cuda")
        kinds.append("cupy" if isinstance(r, cp.ndarray) else type(r).__name__)
    check("numba-cuda result kind follows the caller", kinds[0] == kinds[2] == "cupy"
          and "cupy" not in (kinds[1], kinds[3]), str(kinds))  # fmt: skip


def main() -> None:
    rows = {r.name: r for r in tiledmm.backends()}
    for name in ("cupy", "opencl", "numba-cuda"):
        r = rows.get(name)
        if r is None or not r.available:
            check(f"{name} available", False, r.reason if r else "not registered")
            continue
        print(f"== {name}: {tiledmm.get_backend(name).device().name}", flush=True)
        for step in (correctness, launch_cache, speed):
            try:
                step(name)
            except Exception as exc:  # noqa: BLE001 - report and go on
                check(f"{name} {step.__name__}", False, f"{type(exc).__name__}: {exc}")
    if rows.get("numba-cuda") and rows["numba-cuda"].available:
        try:
            numba_kinds()
        except Exception as exc:  # noqa: BLE001
            check("numba-cuda kinds", False, f"{type(exc).__name__}: {exc}")
    print(f"\n{len(FAILED)} failed: {FAILED}" if FAILED else "\nall checks passed")
    sys.exit(1 if FAILED else 0)


if __name__ == "__main__":
    main()
