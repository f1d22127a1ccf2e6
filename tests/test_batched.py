"""Batched, split-K and skinny (gemv) paths of the shared kernels on PoCL (the logic CuPy runs
as CUDA), the launch path's batch descriptor, and the NumPy backend's batched path."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tiledmm_backends.kernels import launch

import tiledmm
from tests.conftest import backend_reason
from tiledmm.util.accuracy import rel_error

from .gemm_checks import check_batched, check_batched_api, check_geometry

GPU_REG = ((32, 32, 8), (4, 4), dict(use_local=1, vm=4, vn=4, pad=4))
SPLIT = [
    ("register", ((32, 32, 8), (4, 4), dict(use_local=1, vm=4, vn=4, split_k=3))),
    ("register", ((16, 16, 4), (2, 4), dict(use_local=0, cpu_vec=4, split_k=2))),
    ("tiled", ((8, 8, 8), (1, 1), dict(split_k=4))),
    ("naive", ((4, 16, 1), (1, 1), dict(split_k=5))),
]
GEMV = [((1, 32, 1), (1, 1), dict(gemv=1, ks=8)), ((4, 16, 1), (1, 1), dict(gemv=1, ks=4,
                                                                         split_k=3))]  # fmt: skip

FAMILIES3 = ("naive", "tiled", "register")  # the shared sources' families (mma: its own tests)
opencl = pytest.mark.skipif(bool(backend_reason("opencl")), reason="opencl unavailable")


def test_batch_dims_coalesce():
    # a contiguous (2, 3) batch is one dimension; a broadcast one keeps two
    assert launch.batch_dims((2, 3), [[3, 1], [3, 1], [3, 1]]) == [(6, [1, 1, 1])]
    assert launch.batch_dims((2, 1, 3), [[0, 0, 1], [3, 0, 0], [3, 0, 1]]) == [
        (2, [0, 3, 3]), (3, [1, 0, 1])]  # fmt: skip
    assert launch.batch_dims((1, 1), [[0, 0]] * 3) == []


@opencl
@pytest.mark.parametrize("family", FAMILIES3)
def test_batched_one_launch(family):
    check_batched("opencl", family, "float32")


@opencl
def test_batched_float64_register():
    if "float64" not in tiledmm.get_backend("opencl").dtypes:
        pytest.skip("no cl_khr_fp64")
    check_batched("opencl", "register", "float64", GPU_REG)


@opencl
@pytest.mark.parametrize("family,geo", SPLIT, ids=[f"{f}-{g[2]['split_k']}" for f, g in SPLIT])
def test_split_k(family, geo):
    check_geometry("opencl", family, geo, "float32")  # 2-D, odd shapes, K = 0
    check_batched("opencl", family, "float32", geo)


def _gemv_error(be, geo, m, n, k, rng, dtype: str = "float32") -> float:
    """Relative error of one naive-family product on ``be`` with geometry ``geo`` (fresh
    inputs, NaN-poisoned output, float64 reference; inf where an output stays NaN)."""
    plan = tiledmm.make_plan(m, n, k, dtype=dtype, kernel="naive", device=be.device(),
                             geometry=geo, backend=be.name)  # fmt: skip
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    c = be.asarray(np.full((m, n), np.nan, dtype), np.dtype(dtype))
    be.run(plan, be.asarray(a, a.dtype), be.asarray(b, b.dtype), c)
    got = be.to_numpy(c)
    return rel_error(got, a.astype(np.float64) @ b) if np.isfinite(got).all() else np.inf


@opencl
@pytest.mark.parametrize("geo", GEMV, ids=["vector", "skinny-split"])
def test_gemv(geo):
    be = tiledmm.get_backend("opencl")
    rng = np.random.default_rng()
    for m, n, k in [(1, 77, 129), (93, 1, 65), (3, 70, 33), (70, 5, 1), (1, 9, 0), (2, 40, 7)]:
        g = tiledmm.Geometry(geo[0], geo[1], tuple(geo[2].items()))
        assert _gemv_error(be, g, m, n, k, rng) < 1e-5, (geo, m, n, k)
    check_batched("opencl", "naive", "float32", geo)


@opencl
def test_batched_through_matmul():
    check_batched_api("opencl", "float32")


def test_numpy_batched():
    check_batched("numpy", "register", "float64")
    check_batched_api("numpy", "float64")


def test_shape_class_geometry_and_candidates():
    from tiledmm_backends import kernels as K
    from tiledmm_backends.kernels import shapes

    gpu = tiledmm.DeviceSpec(name="some gpu", kind="gpu")
    vec = K.load_geometry("naive", "float32", gpu, backend="cupy", shape_class="vector")
    assert dict(vec.options).get("gemv") == 1
    assert not dict(K.load_geometry("naive", "float32", gpu, backend="cupy").options)
    for cls in tiledmm.core.tuning_check.SHAPE_CLASSES:  # every class has candidates for the sweep
        assert any(shapes.candidates(f, "float32", cls) for f in tiledmm.KERNEL_FAMILIES), cls


GEMV_WIDE = [
    ((1, 16, 1), (1, 1), dict(gemv=1, ks=32)),
    ((2, 8, 1), (1, 1), dict(gemv=1, ks=16, split_k=2)),
    ((1, 16, 1), (1, 1), dict(gemv=1, ks=16, gu=8)),
    ((1, 16, 1), (1, 1), dict(gemv=1, ks=4, split_k=3, onepass=1)),
    ((2, 8, 1), (1, 1), dict(gemv=1, ks=8, split_k=4, onepass=1, gu=8)),
]


@opencl
@pytest.mark.parametrize(
    "geo", GEMV_WIDE, ids=["ks32", "ks16-split2", "ks16-gu8", "onepass3", "onepass4-gu8"]
)
def test_gemv_vector_loads_and_tails(geo):
    """gemv.cl's 16-byte loop (4 loads in flight) and its tails in both orientations: K long
    enough for the vector loop, aligned and odd leading dimensions, x contiguous (N = 1) or
    not, batched with a broadcast vector; NaN-poisoned outputs."""
    be = tiledmm.get_backend("opencl")
    rng = np.random.default_rng()
    g = tiledmm.Geometry(geo[0], geo[1], tuple(geo[2].items()))
    cases = [((), (), 1, 37, 1024), ((), (), 1, 40, 1027), ((), (), 70, 1, 1024),
             ((), (), 33, 1, 1030), ((), (), 9, 3, 1536), ((), (), 3, 21, 515),
             ((5,), (), 1, 24, 520), ((4,), (4,), 19, 1, 516),
             ((2, 3), (3,), 2, 13, 261)]  # fmt: skip
    for ba, bb, m, n, k in cases:
        a = rng.standard_normal(ba + (m, k)).astype("float32")
        b = rng.standard_normal(bb + (k, n)).astype("float32")
        ref = np.matmul(a.astype(np.float64), b)
        plan = tiledmm.make_plan(m, n, k, dtype="float32", kernel="naive", device=be.device(),
                                 geometry=g, backend="opencl")  # fmt: skip
        out = be.asarray(np.full(ref.shape, np.nan, "float32"), np.dtype("float32"))
        A, B = be.asarray(a, a.dtype), be.asarray(b, b.dtype)
        assert be.run_batched(plan, A, B, out) if ba else be.run(plan, A, B, out) is None
        c = be.to_numpy(out)
        assert np.isfinite(c).all() and rel_error(c, ref) < 1e-5, (geo, ba, bb, m, n, k)


@opencl
def test_batched_views_with_offsets():
    """run_batched reads each operand's layout from the whole array: a batch that starts
    inside its buffer (an offset view) and a batch stride of two matrices."""
    be = tiledmm.get_backend("opencl")
    rng = np.random.default_rng()
    a = rng.standard_normal((7, 12, 20)).astype("float32")
    b = rng.standard_normal((20, 9)).astype("float32")
    A, B = be.asarray(a, a.dtype), be.asarray(b, b.dtype)
    g = tiledmm.Geometry(*GPU_REG[:2], tuple(GPU_REG[2].items()))
    plan = tiledmm.make_plan(12, 9, 20, dtype="float32", kernel="register", device=be.device(),
                             geometry=g, backend="opencl")  # fmt: skip
    for view, sl in ((A[3:], slice(3, None)), (A[1:6], slice(1, 6))):
        ref = np.matmul(a[sl].astype(np.float64), b)
        out = be.asarray(np.full(ref.shape, np.nan, "float32"), np.dtype("float32"))
        assert be.run_batched(plan, view, B, out)
        assert rel_error(be.to_numpy(out), ref) < 1e-5, sl


@opencl
def test_split_k_auto_through_matmul(tmp_path, monkeypatch):
    """A class entry with split_k="auto": kernel="auto"'s dispatch resolves the slices from
    the grid and the device's compute units, and the product is right (PoCL)."""
    from tiledmm.core import dispatch, tuning
    from tiledmm.planner import shapefit

    monkeypatch.setenv("TILEDMM_CACHE_DIR", str(tmp_path))
    be = tiledmm.get_backend("opencl")
    dev = be.device()
    tuning.save_entries([dict(
        device=dev.name, backend="opencl", dtype="float32", family="register",
        shape_class="skinny_mn", block_tile=[16, 16, 4], thread_tile=[4, 4],
        options=dict(use_local=1, vm=4, vn=4, split_k="auto"),
        measured=dict(gflops=1.0, date="2026-11-30"))])  # fmt: skip
    dispatch.clear_caches()
    try:
        rng = np.random.default_rng()
        a = rng.standard_normal((8, 1500)).astype("float32")
        b = rng.standard_normal((1500, 7)).astype("float32")
        plan = tiledmm.plan(8, 7, 1500, backend="opencl", kernel="register")
        want = shapefit.auto_split(8, 7, 1500, (16, 16, 4), dev.compute_units)
        assert plan.options["split_k"] == want > 1
        got = tiledmm.matmul(a, b, backend="opencl", kernel="register")
        assert rel_error(got, a.astype(np.float64) @ b) < 1e-5
    finally:
        dispatch.clear_caches()


@opencl
def test_gemv_onepass_is_one_launch_deterministic_and_leaves_its_counters_zero(monkeypatch):
    """The one-pass split-K gemv: no reduction launch, the same bits on every call (the last
    group adds the slices in slice order whichever group arrives last), counters back at zero
    after every launch (so the next launch counts from zero), K = 0 and K < slices."""
    be = tiledmm.get_backend("opencl")
    st = be.state()

    def no_reduction(*args):
        raise AssertionError("the one-pass gemv launched the split-K reduction")

    monkeypatch.setattr(st, "reduce", no_reduction)
    rng = np.random.default_rng()
    geo = tiledmm.Geometry((1, 16, 1), (1, 1), (("gemv", 1), ("ks", 4), ("onepass", 1),
                                                ("split_k", 5)))  # fmt: skip
    for m, n, k in [(1, 50, 333), (1, 33, 3), (1, 20, 0), (2, 17, 64)]:
        plan = tiledmm.make_plan(m, n, k, dtype="float32", kernel="naive", device=be.device(),
                                 geometry=geo, backend="opencl")  # fmt: skip
        a = rng.standard_normal((m, k)).astype("float32")
        b = rng.standard_normal((k, n)).astype("float32")
        A, B = be.asarray(a, a.dtype), be.asarray(b, b.dtype)
        seen = []
        for _ in range(3):
            out = be.asarray(np.full((m, n), np.nan, "float32"), np.dtype("float32"))
            be.run(plan, A, B, out)
            seen.append(be.to_numpy(out))
        assert rel_error(seen[0], a.astype(np.float64) @ b) < 1e-5, (m, n, k)
        assert all(np.array_equal(seen[0], c) for c in seen[1:]), (m, n, k)
    assert not st.scratch["counters"].get().any()


@opencl
def test_gemv_orient_gives_each_orientation_its_layout():
    """A vector entry with ``xb_bn``/``xb_ks`` (``shapefit.gemv_orient``): x @ B runs in those
    columns and lanes, one pass with K slices; A @ x keeps the block tile and ks. Both right."""
    from tiledmm.planner.shapefit import gemv_orient, resolve_split

    geo = tiledmm.Geometry((1, 8, 1), (1, 1), (("gemv", 1), ("ks", 16), ("xb_bn", 32),
                                               ("xb_ks", 4)))  # fmt: skip
    xb = gemv_orient(geo, 1, 4096)
    assert xb.block_tile == (1, 32, 1) and dict(xb.options) == dict(
        gemv=1, ks=4, onepass=1, split_k="auto")  # fmt: skip
    ax = gemv_orient(geo, 4096, 1)
    assert ax.block_tile == (1, 8, 1) and dict(ax.options) == dict(gemv=1, ks=16)
    be = tiledmm.get_backend("opencl")
    rng = np.random.default_rng()
    for m, n, k in [(1, 70, 3000), (1, 300, 33), (301, 1, 1000), (3, 90, 1500)]:
        g = resolve_split(geo, m, n, k, 16)
        assert "xb_bn" not in dict(g.options)
        assert _gemv_error(be, g, m, n, k, rng) < 1e-5, (m, n, k, g)


def test_gemv_fill_layout_splits_only_to_cover_the_sms():
    """``xb_fill``/``xb_gu``: x @ B in 1024-item groups with 16 loads in flight and K slices only
    while the groups cover less than 0.9 of the SMs (then in one pass); A @ x keeps its loads.
    Right on PoCL at odd shapes, with and without slices."""
    from tiledmm.planner.shapefit import resolve_split

    opts = dict(gemv=1, ks=8, xb_bn=16, xb_ks=16, xb_gu=16, xb_fill=1)
    geo = tiledmm.Geometry((1, 8, 1), (1, 1), tuple(sorted(opts.items())))
    wide = dict(resolve_split(geo, 1, 4096, 4096, 132).options)
    assert wide["split_k"] == 1 and wide["gu"] == 16 and wide["ks"] == 16
    assert dict(resolve_split(geo, 1, 1024, 4096, 132).options)["split_k"] == 2  # 64 groups
    assert "gu" not in dict(resolve_split(geo, 4096, 1, 4096, 132).options)
    be = tiledmm.get_backend("opencl")
    rng = np.random.default_rng()
    for m, n, k, sms in [(1, 70, 3001, 4), (1, 300, 77, 64), (301, 1, 1000, 4), (2, 33, 2000, 16)]:
        g = resolve_split(geo, m, n, k, sms)
        assert _gemv_error(be, g, m, n, k, rng) < 1e-5, (m, n, k, g)


def test_gemv_defines_carry_the_shuffles_and_the_register_budget():
    """The gemv options reach the source: ``shfl`` (CUDA partial sums by warp shuffles, on
    unless 0; gemv.cl drops it for OpenCL and for layouts a warp does not split in powers of
    two) and ``min_blocks`` (CUDA's __launch_bounds__ minimum, absent unless asked for); the
    H200's CuPy vector entries ask for one group per SM (measured: docs/shapes.md)."""
    from tiledmm_backends import kernels as K

    from tiledmm.device.nvidia import reference_h200

    dev = reference_h200()

    def defs(**opts):
        opts = tuple(sorted(dict(gemv=1, ks=32, **opts).items()))
        geo = tiledmm.Geometry((1, 32, 1), (1, 1), opts)
        return K.defines(
            tiledmm.make_plan(
                1, 4096, 4096, dtype="float32", kernel="naive", device=dev, geometry=geo
            )
        )

    assert defs()["GEMV_SHFL"] == 1 and "MIN_BLOCKS" not in defs()
    assert defs(shfl=0)["GEMV_SHFL"] == 0 and defs(min_blocks=1)["MIN_BLOCKS"] == 1
    src = (K.DATABASE.parent / "gemv.cl").read_text()
    assert "!defined(TILEDMM_CUDA)" in src and "WARP_DOWN" in src
    db = json.loads(K.DATABASE.read_text())["entries"]
    vec = [e for e in db if e.get("backend") == "cupy" and e.get("shape_class") == "vector"
           and e["family"] == "naive" and e.get("device") == "NVIDIA H200"]  # fmt: skip
    assert {e["dtype"] for e in vec} == {"float32", "float64"}
    assert all(e["options"].get("min_blocks") == 1 for e in vec)


@opencl
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_cpu_gemv_is_barrier_free_and_right(dtype):
    """``gemv_cpu.cl`` (the gemv path for CPU devices, option ``cpu``): both orientations at
    odd shapes with short sides of 1-3 (several per item and past the group), K of 0, 1 and
    under one vector, a right edge inside the last vector group, K slices summed by the
    reduction, and one batched launch."""
    be = tiledmm.get_backend("opencl")
    if be.device().kind != "cpu":
        pytest.skip("the CPU variant of the gemv path")
    rng = np.random.default_rng()
    lanes = max(1, be.device().simd_bytes // np.dtype(dtype).itemsize)
    for bt, nv, split in [((1, 64, 1), 8, 1), ((2, 16, 1), 2, 1), ((1, 8, 1), 1, 3)]:
        opts = dict(gemv=1, cpu=1, cpu_vec=lanes, nv=nv, split_k=split)
        geo = tiledmm.Geometry(bt, (1, 1), tuple(sorted(opts.items())))
        for m, n, k in [(1, 77, 129), (93, 1, 65), (3, 70, 33), (70, 3, 1), (1, 9, 0),
                        (2, 40, 7), (1, 300, 1000), (301, 2, 1000)]:  # fmt: skip
            err = _gemv_error(be, geo, m, n, k, rng, dtype)
            assert err < (1e-5 if dtype == "float32" else 1e-12), (bt, nv, split, m, n, k)
        check_batched("opencl", "naive", dtype, (bt, (1, 1), opts))


@opencl
def test_cpu_vectors_take_the_cpu_gemv_path():
    """On a CPU device auto runs vectors on the barrier-free gemv path (the register tiles
    would be 95% padding), and the model reads the matrix once."""
    from tiledmm.core.dispatch import plan_for

    be = tiledmm.get_backend("opencl")
    if be.device().kind != "cpu":
        pytest.skip("the CPU variant of the gemv path")
    for m, n in [(1, 4096), (4096, 1)]:
        plan = plan_for(be, m, n, 4096, "float32", "auto")
        assert plan.kernel == "naive" and plan.options.get("gemv") and plan.options.get("cpu")
        dram = [lv for lv in plan.levels if lv.name in ("L2", "DRAM")]
        assert dram and dram[0].amount == (4096 * 4096 + 4096 + 4096) * 4
    a = np.random.default_rng().standard_normal(4096).astype("float32")
    b = np.random.default_rng().standard_normal((4096, 300)).astype("float32")
    assert rel_error(tiledmm.matmul(a, b, backend="opencl"), a.astype(np.float64) @ b) < 1e-5


@opencl
def test_cpu_vectors_bench_runs(capsys):
    """benches/studies/cpu_vectors.py at a small size: a row per orientation, auto on the naive
    path."""
    if tiledmm.get_backend("opencl").device().kind != "cpu":
        pytest.skip("a CPU device's bench")
    from benches.studies import cpu_vectors as mod
    assert mod.main(["--sizes", "256"]) == 0
    rows = [r for r in capsys.readouterr().out.splitlines() if r.startswith(("1x", "256x"))]
    assert len(rows) == 2 and all(r.split(" | ")[1] == "naive" for r in rows)
