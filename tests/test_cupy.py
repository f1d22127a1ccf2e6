"""The CuPy backend: GPU checks (skipped without cupy/GPU), nvcc builds of the CUDA dialect
(skipped without nvcc: this is how CI checks the CUDA side), and the unavailable path."""

from __future__ import annotations

import shutil
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
from tiledmm_backends import kernels as K

import tiledmm
from tests.conftest import requires_backend
from tests.helpers import nvcc_build
from tiledmm.util.accuracy import matmul_error

from ._probe_checks import check_fma, check_levels, check_shared, check_stream
from .gemm_checks import (
    FAMILIES,
    STAGES2,
    check_batched,
    check_batched_api,
    check_geometry,
    check_layouts,
    check_nonfinite,
    check_shapes,
)

gpu = requires_backend("cupy")


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("family", FAMILIES)
def test_gpu_families(family, dtype):
    check_shapes("cupy", family, dtype)
    check_layouts("cupy", family, dtype)
    check_nonfinite("cupy", family, dtype)


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("geo", STAGES2, ids=str)
def test_gpu_double_buffering(geo):
    check_geometry("cupy", "register", geo, "float32")


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("family", FAMILIES)
def test_gpu_batched_one_launch(family, dtype):
    check_batched("cupy", family, dtype)
    check_batched_api("cupy", dtype)


def _candidates():
    from tiledmm_backends.kernels import shapes

    return [(cls, fam, g) for cls in shapes.CANDIDATES for fam in shapes.CANDIDATES[cls]
            for g in shapes.candidates(fam, "float32", cls)]  # fmt: skip


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("cand", _candidates(), ids=lambda c: f"{c[0]}-{c[1]}-{c[2].options}")
def test_gpu_shape_candidates(cand):
    """Every per-class candidate (split-K, gemv, small tiles): odd 2-D shapes, K = 0, batches
    (split_k="auto" as it resolves for 64x4096x4096 on 132 SMs: 8 slices)."""
    _, fam, g = cand
    g = tiledmm.planner.shapefit.resolve_split(g, 64, 4096, 4096, 132)
    geo = (g.block_tile, g.thread_tile, dict(g.options))
    check_geometry("cupy", fam, geo, "float32")
    check_batched("cupy", fam, "float32", geo)


@pytest.mark.gpu
@gpu
def test_device_arrays_stay_on_device():
    import cupy as cp

    a = cp.asarray(np.random.default_rng().standard_normal((3, 4)), dtype=cp.float32)
    c = tiledmm.matmul(a, a.T)
    assert isinstance(c, cp.ndarray)
    assert matmul_error(cp.asnumpy(c), cp.asnumpy(a), cp.asnumpy(a).T) < 1e-6
    assert tiledmm.get_backend("cuda").name == "cupy"


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize(("sa", "sb"), [((4100,), (4100, 300)), ((300, 4100), (4100,)),
                                        ((1027,), (1027, 77)), ((77, 1027), (1027,)),
                                        ((64,), (64, 64)), ((5, 6, 7), (7,))])  # fmt: skip
def test_gpu_hot_path_results(sa, sb):
    """Calls after the first take the hot path (bound launches for 2-D and 1-D): every call's
    result is right, on fresh data (the benches time the hot path, but check the full one)."""
    import cupy as cp

    rng = np.random.default_rng(12)
    for _ in range(3):
        a, b = rng.standard_normal(sa), rng.standard_normal(sb)
        A, B = cp.asarray(a, np.float32), cp.asarray(b, np.float32)
        for kernel in ("auto", "register"):
            got = cp.asnumpy(tiledmm.matmul(A, B, backend="cupy", kernel=kernel))
            ref = np.matmul(cp.asnumpy(A).astype(np.float64), cp.asnumpy(B).astype(np.float64))
            assert got.shape == ref.shape
            assert matmul_error(got, cp.asnumpy(A), cp.asnumpy(B)) < 1e-5, (kernel, sa, sb)


@pytest.mark.gpu
@gpu
def test_gpu_launch_cache_is_bounded_and_keyed_by_launch():
    be = tiledmm.get_backend("cupy")
    rng = np.random.default_rng()
    for n in range(1, 40):
        a = rng.standard_normal((n, n + 1)).astype("float32")
        assert matmul_error(tiledmm.matmul(a, a.T, backend="cupy"), a, a.T) < 1e-5
    assert 0 < len(be.launches.cache) <= be.launches.cache.maxsize


@pytest.mark.gpu
@gpu
def test_gpu_overlapping_out_is_computed_in_a_temporary():
    import cupy as cp

    a = cp.asarray(np.random.default_rng().standard_normal((16, 16)), dtype=cp.float32)
    ha = cp.asnumpy(a)
    tiledmm.get_backend("cupy").run(tiledmm.plan(16, 16, 16, backend="cupy"), a, a, a)
    assert matmul_error(cp.asnumpy(a), ha, ha) < 1e-5


@pytest.mark.gpu
@gpu
def test_gpu_probes_compute_and_measure():
    """The calibration probes on the GPU: outputs against NumPy, then measure_gpu_levels."""
    be = tiledmm.get_backend("cupy")
    check_stream(be)
    check_shared(be)
    for dtype in ("float32", "float64"):
        check_fma(be, dtype)
    print(check_levels(be))


# ----------------------------------------------------------------------- CUDA builds via nvcc

CONFIGS = [
    ("naive", "float32", (2, 128, 1), (1, 1), {}),
    ("tiled", "float32", (16, 16, 32), (1, 1), {"vec_smem": 1}),
    ("tiled", "float64", (16, 16, 16), (1, 1), {"vec_smem": 0}),
    ("tiled", "float32", (8, 8, 32), (1, 1), {"vec_smem": 1, "split": 4}),
    ("tiled", "float32", (32, 32, 64), (1, 1), {"b_transposed": 1, "split": 8}),
    ("tiled", "float64", (32, 32, 64), (1, 1), {"b_transposed": 1, "split": 4}),
    ("register", "float32", (128, 128, 16), (8, 8), {"vm": 4, "vn": 4, "pad": 4}),
    ("register", "float32", (128, 128, 8), (8, 8), {"vm": 8, "vn": 8, "group_m": 8,
                                                     "stages": 2, "min_blocks": 2}),
    ("register", "float64", (64, 64, 8), (4, 4), {"vm": 2, "vn": 2, "pad": 2}),
    ("register", "float32", (64, 64, 16), (4, 4), {"vm": 4, "vn": 4, "pad": 4, "split_k": 4}),
    ("naive", "float32", (1, 64, 1), (1, 1), {"gemv": 1, "ks": 8}),  # M short (x @ B)
    ("naive", "float64", (2, 32, 1), (1, 1), {"gemv": 1, "ks": 16, "split_k": 2, "n": 1}),
    ("naive", "float32", (1, 16, 1), (1, 1), {"gemv": 1, "ks": 32, "n": 1}),  # A @ x
    ("naive", "float32", (1, 32, 1), (1, 1), {"gemv": 1, "ks": 16, "gu": 8}),  # 8 in flight
    ("naive", "float32", (1, 16, 1), (1, 1), {"gemv": 1, "ks": 16, "gu": 8, "n": 1}),
    ("naive", "float32", (4, 16, 1), (1, 1), {"gemv": 1, "ks": 16}),  # skinny x @ B
    ("register", "float32", (128, 64, 16), (8, 4), {"vm": 4, "vn": 4, "pad": 4, "stages": 2}),
    ("register", "float32", (128, 64, 16), (8, 4), {"vm": 4, "vn": 4, "pad": 4, "stages": 2,
                                                    "prefetch": 1}),
    ("register", "float64", (64, 64, 8), (4, 4), {"vm": 2, "vn": 2, "pad": 2, "prefetch": 1}),
]  # fmt: skip


@pytest.mark.gpu
@gpu
def test_gpu_timings_are_device_time():
    """Host work inside the timed call (shorter than the spin ahead of it) is not counted; a
    kernel is: a 3 ms product times at least its FLOPs at the vendor's pace."""
    import time

    import cupy as cp

    be = tiledmm.get_backend("cupy")

    def host_only():
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 1e-4:
            pass

    assert max(be.timings(host_only, repeat=5)) < 3e-5
    a = cp.asarray(np.random.default_rng(3).random((2048, 2048), np.float32))
    t = min(be.timings(lambda: be.vendor_matmul(a, a), repeat=3))
    assert 2 * 2048**3 / t < 100e12  # a real kernel's time, not zero


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: f"{c[0]}-{c[1]}-{c[2]}")
@pytest.mark.parametrize("aligned", [True, False])
def test_cuda_dialect_compiles(cfg, aligned, tmp_path):
    family, dtype, bt, tt, opts = cfg
    threads = (bt[0] // tt[0]) * (bt[1] // tt[1])
    opts = dict(opts)
    n = opts.pop("n", 1000)  # gemv: N short with "n": 1
    plan = SimpleNamespace(
        kernel=family, dtype=dtype, block_tile=bt, thread_tile=tt, options=opts,
        threads_per_block=threads, m=100, n=n,
    )  # fmt: skip
    # aligned builds are also the single-product variant (NO_BATCH): both prologues compile
    nvcc_build(K.source(family, K.defines(plan, aligned, single=aligned)), tmp_path)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_cuda_dialect_compiles_reduce(dtype, tmp_path):
    nvcc_build(K.reduce_source(dtype), tmp_path)


# ----------------------------------------------------------------------- without cupy


def test_unavailable_without_cupy():
    code = (
        "import sys; sys.modules['cupy'] = None\n"
        "import tiledmm\n"
        "row = [b for b in tiledmm.backends() if b.name == 'cupy'][0]\n"
        "assert not row.available and 'cupy is not installed' in row.reason, row\n"
        "print(row.reason)\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert "pip install" in res.stdout


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("real_bytes", [4, 8])
def test_cuda_dialect_compiles_probes(real_bytes, tmp_path):
    """The calibration probes as CuPy's ``compile_probe`` hands them to NVRTC."""
    from tiledmm_backends.kernels.probe import probe_source

    text = probe_source(None, {"REAL_BYTES": real_bytes, "THREADS": 256})
    assert "#include" not in text
    nvcc_build(text, tmp_path)


def test_compile_probe_launch_shape(monkeypatch):
    """Without a GPU: the probe goes to RawModule complete (header inlined, defines first),
    is compiled once per source and device, and launches grid (groups,), block (THREADS,)."""
    import tiledmm_backends.cupy_cuda as cc
    import tiledmm_backends.cupy_cuda.arrays as ca

    calls, built = [], []

    class Module:
        def __init__(self, code):
            built.append(code)

        def get_function(self, name):
            return lambda grid, block, args: calls.append((name, grid, block, args))

    runtime = SimpleNamespace(getDevice=lambda: 0)
    fake = SimpleNamespace(RawModule=Module, cuda=SimpleNamespace(runtime=runtime))
    monkeypatch.setattr(ca, "_CP", fake)
    be = cc.CupyBackend()
    defs = {"REAL_BYTES": 4, "THREADS": 96}
    launch = be.compile_probe("p", defs, '#include "gemm_common.h"\nKERNEL p() {}\n')
    be.compile_probe("p", defs, '#include "gemm_common.h"\nKERNEL p() {}\n')
    args = (np.int32(7), np.float32(0.5))
    launch(5, args)
    assert len(built) == 1 and built[0].startswith("#define REAL_BYTES 4\n#define THREADS 96\n")
    assert "#include" not in built[0] and "TILEDMM_GEMM_COMMON_H" in built[0]
    assert calls == [("p", (5,), (96,), args)]
