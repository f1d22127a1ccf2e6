"""The OpenCL backend on whatever OpenCL device is present (PoCL's CPU device in CI).

This is also how CI exercises the kernel logic that the CuPy backend runs as CUDA: the
sources are shared. The local-memory (GPU) variant of the register family is run here too.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

import tiledmm
from tests.conftest import backend_reason
from tiledmm.util.accuracy import matmul_error

from ._probe_checks import check_fma, check_levels, check_shared, check_stream, poisoned, probe
from .gemm_checks import (
    PREFETCH,
    STAGES2,
    check_geometry,
    check_layouts,
    check_nonfinite,
    check_shapes,
    tol,
)  # fmt: skip

if backend_reason("opencl"):  # every test here needs the device (requires_backend's reason)
    pytest.skip(f"opencl unavailable: {backend_reason('opencl')}", allow_module_level=True)
BE = tiledmm.get_backend("opencl")
FAMILIES = BE.kernels  # the families this backend declares
DTYPES = [d for d in ("float32", "float64") if d in BE.dtypes]
#: (family, dtype) pairs run with default precision: float32 mma needs precision="tf32"
#: (tests/test_mma.py runs it), so NVIDIA's OpenCL tests mma in float64 here
PAIRS = [(f, d) for f in FAMILIES for d in DTYPES if (f, d) != ("mma", "float32")]


@pytest.mark.parametrize(("family", "dtype"), PAIRS)
def test_odd_shapes(family, dtype):
    check_shapes("opencl", family, dtype)


@pytest.mark.parametrize(("family", "dtype"), PAIRS)
def test_layouts_and_batches(family, dtype):
    check_layouts("opencl", family, dtype)


@pytest.mark.parametrize(("family", "dtype"), PAIRS)
def test_nan_inf_propagate(family, dtype):
    check_nonfinite("opencl", family, dtype)


GPU_STYLE = [  # the local-memory register variant, as the GPUs run it, on odd tiles
    ((32, 32, 8), (4, 4), dict(use_local=1, vm=4, vn=4, pad=4, group_m=3)),
    ((32, 16, 8), (8, 4), dict(use_local=1, vm=1, vn=1, pad=0, group_m=1)),
    ((16, 32, 8), (4, 8), dict(use_local=1, vm=4, vn=8, pad=0, group_m=2)),
]


TILED_LAYOUTS = [  # both local-memory layouts of the tiled family, whatever the device default
    ((8, 8, 16), (1, 1), dict(vec_smem=1, split=2)),  # GPU layout: Bs[k][n], 16-byte A reads
    ((4, 16, 8), (1, 1), dict(vec_smem=0)),  # GPU layout, scalar reads (padded A rows)
    ((16, 8, 16), (1, 1), dict(b_transposed=1, split=4)),  # CPU layout: Bs[n][k]
    ((8, 8, 32), (1, 1), dict(b_transposed=1, split=16)),  # CPU layout, AVX-512 width
]

CPU_STYLE = [  # the barrier-free register variant at the vector widths of SSE/NEON .. AVX-512
    ((24, 32, 1), (6, 16), dict(use_local=0, cpu_vec=4)),
    ((12, 32, 1), (6, 16), dict(use_local=0, cpu_vec=16)),
    ((8, 16, 1), (4, 8), dict(use_local=0, cpu_vec=2)),
    ((24, 32, 1), (6, 16), dict(use_local=0, cpu_vec=8, kc=8)),  # K blocks with barriers
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("geo", GPU_STYLE, ids=str)
def test_register_local_memory_variant(geo, dtype):
    bt, tt, opts = geo
    if dtype == "float64":
        opts = {**opts, "vm": min(opts["vm"], 2), "vn": min(opts["vn"], 2), "pad": 0}
    check_geometry("opencl", "register", (bt, tt, opts), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("geo", CPU_STYLE, ids=str)
def test_register_vector_widths(geo, dtype):
    if BE.device().is_gpu:  # the planner sizes GPU micro-tiles by registers; this is the CPU kernel
        pytest.skip("the barrier-free register variant is the CPU kernel")
    check_geometry("opencl", "register", geo, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("geo", TILED_LAYOUTS, ids=str)
def test_tiled_local_layouts(geo, dtype):
    check_geometry("opencl", "tiled", geo, dtype)


def test_device_selection(monkeypatch):
    names = [d.name for d in BE.devices()]
    assert names and BE.device().name in names
    monkeypatch.setenv("TILEDMM_OPENCL_DEVICE", "0")
    assert BE.device().name == names[0]
    monkeypatch.setenv("TILEDMM_OPENCL_DEVICE", "no-such-device-xyz")
    with pytest.raises(RuntimeError, match="matches no OpenCL device"):
        BE.state()


def test_kernels_are_cached():
    a = np.random.default_rng().standard_normal((33, 17)).astype(np.float32)
    tiledmm.matmul(a, a.T, backend="opencl", kernel="tiled")
    st = BE.state()
    before = len(st.kernels)
    for _ in range(3):
        tiledmm.matmul(a, a.T, backend="opencl", kernel="tiled")
    assert len(st.kernels) == before


def test_launch_cache_is_bounded(monkeypatch):
    """Issue 16.9: one launch per distinct shape was kept forever."""
    from tiledmm.util.lru import LRUCache

    st = tiledmm.get_backend("opencl").state()  # the registered instance (tests may reload)
    monkeypatch.setattr(st.launches, "cache", LRUCache(4))
    rng = np.random.default_rng()
    for n in range(1, 12):
        a, b = rng.standard_normal((n, 3)).astype(np.float32), rng.standard_normal((3, 5))
        b = b.astype(np.float32)
        assert matmul_error(tiledmm.matmul(a, b, backend="opencl", kernel="naive"), a, b) < 1e-5
    assert len(st.launches.cache) == 4


def test_too_large_for_32_bit_indexing_fails_before_any_copy():
    """Issue 16.10: a clear ValueError before the host copy or the buffer (no 8 GiB here:
    the operand is a broadcast view, and pyopencl's INVALID_BUFFER_SIZE must not be reached)."""
    huge = np.broadcast_to(np.float32(1), (1 << 16, (1 << 15) + 1))
    small = np.ones(((1 << 15) + 1, 2), np.float32)
    with pytest.raises(ValueError, match="too large for the OpenCL backend's 32-bit indexing"):
        BE.asarray(huge, np.dtype(np.float32))
    with pytest.raises(ValueError, match="split the product"):
        BE.empty((1 << 16, (1 << 15) + 1), np.dtype(np.float32))
    with pytest.raises(ValueError, match="32-bit"):
        tiledmm.matmul(huge, small, backend="opencl")


def test_launch_path_checks_extents_before_copies():
    from tiledmm_backends.kernels import launch

    with pytest.raises(ValueError, match="operand A .* too large for the 32-bit indexing"):
        launch.check_extent("A", (1 << 16) + 1, 8, 0, 1 << 15)
    launch.check_extent("A", 1 << 15, 8, 0, 1 << 15)  # 2**30 elements: fine


def test_out_overlapping_an_input_is_computed_in_a_temporary():
    rng = np.random.default_rng()
    h = rng.standard_normal((24, 24)).astype(np.float32)
    a = BE.asarray(h, h.dtype)
    plan = tiledmm.plan(24, 24, 24, backend="opencl", kernel="tiled")
    BE.run(plan, a, a, a)  # out is A and B
    assert matmul_error(BE.to_numpy(a), h, h) < 1e-5


def test_geometry_follows_device_kind():
    dev = BE.device()
    g = BE.geometry("register", "float32", dev)
    assert g is not None
    assert dict(g.options)["use_local"] == (1 if dev.is_gpu else 0)
    t = BE.geometry("tiled", "float32", dev)
    assert dict(t.options).get("b_transposed", 0) == (0 if dev.is_gpu else 1)


def test_timings_read_profiling_events():
    a = np.random.default_rng().standard_normal((64, 64)).astype(np.float32)
    A, C = BE.asarray(a, a.dtype), BE.empty((64, 64), a.dtype)
    plan = tiledmm.plan(64, 64, 64, backend="opencl", kernel="tiled")
    # host time before the first enqueue is not device time: the events exclude it
    times = BE.timings(lambda: (time.sleep(0.05), BE.run(plan, A, A, C)), repeat=2, warmup=0)
    assert len(times) == 2 and all(0 < t < 0.05 for t in times)
    # a call that enqueues nothing is timed on the host clock
    assert all(t >= 0.02 for t in BE.timings(lambda: time.sleep(0.02), repeat=2, warmup=0))


def test_vendor_yardstick_runs_without_buffer_copies():
    dev = BE.device()
    vendor = BE.vendor_backend()
    if not dev.is_gpu:  # numpy.matmul on host arrays, not through OpenCL buffers
        assert vendor.name == "numpy"
    cupy = any(b.name == "cupy" and b.available for b in tiledmm.backends())
    if dev.is_gpu and "NVIDIA" in dev.vendor.upper() and cupy:
        assert vendor.name == "cupy"


@pytest.mark.parametrize("geo", STAGES2, ids=str)
def test_double_buffering_off_pocl(geo):
    if BE.state().pocl:
        pytest.skip("PoCL refuses stages=2 (next test)")
    check_geometry("opencl", "register", geo, "float32")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("geo", PREFETCH, ids=str)
def test_fragment_prefetch(geo, dtype):
    """Step kk + 1's fragments loaded before step kk's FMAs: same result, odd shapes too."""
    check_geometry("opencl", "register", geo, dtype)


def test_pocl_refuses_double_buffering():
    if not BE.state().pocl:
        pytest.skip("PoCL only")
    geo = tiledmm.Geometry((32, 32, 8), (4, 4), (("use_local", 1), ("stages", 2)))
    plan = tiledmm.make_plan(32, 32, 16, dtype="float32", kernel="register", device=BE.device(),
                             geometry=geo)  # fmt: skip
    rng = np.random.default_rng()
    a = BE.asarray(rng.standard_normal((32, 16)).astype(np.float32), np.dtype(np.float32))
    b = BE.asarray(rng.standard_normal((16, 32)).astype(np.float32), np.dtype(np.float32))
    with pytest.raises(ValueError, match="use stages=1 on PoCL"):
        BE.run(plan, a, b, BE.empty((32, 32), np.dtype(np.float32)))


def test_calibrate_measures_through_the_yardstick(tmp_path, monkeypatch):
    from tiledmm.tune import calibrate

    if BE.device().is_gpu:
        pytest.skip("CPU devices: the host's ceilings are the ones OpenCL plans read")
    monkeypatch.setenv("TILEDMM_CACHE_DIR", str(tmp_path))
    monkeypatch.setitem(calibrate._SIZES, ("cpu", True), (64,))
    monkeypatch.setitem(calibrate._COPY_BYTES, ("cpu", True), 1 << 20)
    [(name, rec, _)] = list(calibrate.calibrate("opencl", quick=True))
    assert name == tiledmm.host_cpu().name and rec["backend"] == "opencl"
    assert tiledmm.host_cpu().ceilings_measured
    # OpenCL's own host cost (enqueue, buffers, the wait), from device-array and host-array
    # calls, reaches its device spec in this process (PoCL's spec is the host's)
    cost = rec["host_cost"]["opencl"]
    assert "device time" in cost["kernel_from"] and cost["host_arrays"] >= 0
    assert BE.device().host_cost("opencl") == cost["seconds"]
    # the accumulator probe: the vector FMA chains that fill a core's pipes, in the host's
    # record, which PoCL's spec (and the register micro-kernel's model) reads
    assert rec["fma_accumulators"] in calibrate.ACC_CHAINS
    assert BE.device().fma_accumulators == rec["fma_accumulators"]
    # the FMA peaks are the pipes' (the probe's best rate where the vendor GEMM is slower)
    for dt, peak in rec["peak_flops"].items():
        assert rec["fma_peaks"][dt] >= peak


def test_the_accumulator_probe_raises_fma_peaks_above_a_slow_vendor_gemm(tmp_path, monkeypatch):
    """Calibrated with one BLAS thread (the first-contact study) the vendor GEMM ran at one
    core's rate, and the PoCL model priced every core at it. The probe's rate, the FMA pipes
    of every core, is recorded (``fma_probe``) and raises the device's FMA peaks where it is
    higher (float64 at half), also after another backend calibrates the host; the vendor rate
    stays ``peak_flops``."""
    from tiledmm.tune import calibrate

    if BE.device().is_gpu:
        pytest.skip("CPU devices")
    monkeypatch.setenv("TILEDMM_CACHE_DIR", str(tmp_path))
    monkeypatch.setitem(calibrate._SIZES, ("cpu", True), (64,))
    monkeypatch.setitem(calibrate._COPY_BYTES, ("cpu", True), 1 << 20)
    monkeypatch.setattr(calibrate, "measure_fma_accumulators", lambda *a, **k: (10, 4e15))
    [(_, rec, _)] = list(calibrate.calibrate("opencl", quick=True))
    assert rec["fma_probe"] == 4e15 and rec["peak_flops"]["float32"] < 4e15
    assert BE.device().fma_peak("float32") == 4e15 and BE.device().fma_peak("float64") == 2e15
    # a later calibration through a backend without the probe (numpy) keeps the probe's
    monkeypatch.setattr(calibrate, "measure_fma_accumulators", lambda *a, **k: None)
    [(_, rec2, _)] = list(calibrate.calibrate("numpy", quick=True))
    assert "fma_probe" not in rec2 and BE.device().fma_peak("float32") == 4e15


@pytest.mark.parametrize("geo", GPU_STYLE[:2], ids=str)
def test_unaligned_operands_copied_to_aligned_rows(geo, monkeypatch):
    from tiledmm_backends.kernels import defs

    calls = []
    monkeypatch.setattr(defs, "pad_pays", lambda plan, *odd: calls.append(plan) or True)
    check_geometry("opencl", "register", geo, "float32")  # odd K and N: unaligned rows
    assert calls


# ----------------------------------------------------------------------- calibration probes


def test_stream_probe_sums_its_grid_stride_slice():
    check_stream(BE)


def test_shared_probe_reads_its_local_words():
    check_shared(BE)


@pytest.mark.parametrize("dtype", DTYPES)
def test_fma_probe_iterates_its_chains(dtype):
    check_fma(BE, dtype)


def test_gpu_levels_measured_through_the_probes():
    """measure_gpu_levels runs every probe here (PoCL too): positive, finite ceilings."""
    check_levels(BE)


def test_probe_launches_are_seen_by_timings():
    """A probe's launch goes through the queue's event list, so timings reads its events."""
    launch = probe(BE, "fma_probe", 32, 4)
    args = (np.int32(3), np.float32(0.9), poisoned(BE, 64, np.float32))
    st = BE.state()
    st.events = []
    try:
        launch(2, args)
        assert len(st.events) == 1
    finally:
        st.events = None
    assert all(t > 0 for t in BE.timings(lambda: launch(2, args), repeat=2))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_register_kernel_writes_output_views(dtype):
    """The register kernel into output views: a padded row pitch, an odd first column, a
    partial last vector of VN columns; the bytes outside the view stay NaN."""
    be = tiledmm.get_backend("opencl")
    rng = np.random.default_rng()
    vw = 16 // np.dtype(dtype).itemsize
    opts = dict(use_local=1, vm=vw, vn=vw, pad=0, stages=1)
    geo = tiledmm.Geometry((32, 32, 8), (4, 4), tuple(sorted(opts.items())))
    for m, n, k, width, c0 in [(37, 64, 29, 64, 0), (37, 65, 29, 68, 0), (37, 64, 29, 72, 1),
                               (37, 60, 29, 64, 4), (70, 45, 33, 45, 0)]:  # fmt: skip
        plan = tiledmm.make_plan(m, n, k, dtype=dtype, kernel="register", device=be.device(),
                                 geometry=geo)  # fmt: skip
        a = rng.standard_normal((m, k)).astype(dtype)
        b = rng.standard_normal((k, n)).astype(dtype)
        big = be.asarray(np.full((m, width), np.nan, dtype), np.dtype(dtype))
        be.run(plan, be.asarray(a, a.dtype), be.asarray(b, b.dtype), big[:, c0 : c0 + n])
        full = be.to_numpy(big)
        assert matmul_error(full[:, c0 : c0 + n], a, b) < tol(dtype), (m, n, k, width, c0)
        assert np.isnan(full[:, :c0]).all() and np.isnan(full[:, c0 + n :]).all()


def test_compile_probe_answers_none_for_a_probe_it_does_not_have(capfd):
    """`tiledmm calibrate` asks every CPU backend for the loop probe (numba-cpu's
    ``register_block``): OpenCL has none and says so, without handing PoCL's compiler a kernel
    that is not in ``probes.cl`` (which printed "16 errors generated." on every calibration)."""
    assert BE.compile_probe("register_block", {"BM": 64, "BN": 512, "BK": 128, "TN": 32}) is None
    assert "error" not in capfd.readouterr().err
