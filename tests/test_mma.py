"""The tensor-core family: mma.cl's tile walk on PoCL (the scalar micro-kernel: same stages,
padded layout, copy plan and C-fragment ownership as the PTX path), the CUDA side through nvcc,
the planner's mma plans, and the CuPy backend's mma runs on a GPU (marked)."""

from __future__ import annotations

import importlib.util
import shutil
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
from tiledmm_backends import kernels as K
from tiledmm_backends.kernels import mma_spec

import tiledmm
from tests.helpers import nvcc_build
from tiledmm.bench.sweep import peak_of
from tiledmm.device import nvidia
from tiledmm.device.host import host_cpu
from tiledmm.device.nvidia import reference_h200
from tiledmm.model import tensorcore as tc
from tiledmm.planner.make import make_plan
from tiledmm.planner.mma import default_mma_geometry
from tiledmm.planner.plans import PlanError

from .conftest import requires_backend

H200 = reference_h200()


def _bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits (round to nearest even), as uint16."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def _from_bf16(x: np.ndarray) -> np.ndarray:
    return (x.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def _tf32(x: np.ndarray, even: bool = False) -> np.ndarray:
    """float32 -> TF32 values: to nearest, ties away (cvt.rna) or to even (cvt.rn)."""
    u = x.astype(np.float32).view(np.uint32)
    add = np.uint32(0xFFF) + ((u >> np.uint32(13)) & np.uint32(1)) if even else np.uint32(0x1000)
    return ((u + add) & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)


# ------------------------------------------------------------------ the scalar path on PoCL

# (kind, BM, BN, BK, warps_m, warps_n, stages, fragment, aligned A, aligned B)
SCALAR = [
    ("f64", 32, 16, 8, 2, 1, 2, (16, 8, 8), 0, 0),
    ("f64", 32, 16, 8, 2, 1, 3, (16, 8, 8), 1, 1),
    ("f64", 16, 16, 4, 1, 2, 2, (8, 8, 4), 0, 1),
    ("f64", 32, 16, 16, 1, 1, 3, (16, 8, 16), 1, 0),
    ("f16", 32, 32, 16, 1, 2, 2, None, 1, 1),
    ("f16", 32, 32, 16, 2, 2, 3, None, 0, 0),
    ("bf16", 32, 32, 16, 1, 2, 2, None, 1, 1),
    ("tf32", 32, 16, 8, 2, 1, 2, None, 0, 0),
    # TF32 rounded once per stage in shared memory (the scalar path then reads the tiles as
    # they are: a piece the stage pass misses fails the 1e-6 bound against rounded inputs)
    ("tf32", 32, 16, 8, 2, 1, 3, None, 0, 0, {"tf32_round": 2}),
    ("tf32", 32, 32, 16, 2, 2, 2, None, 1, 1, {"tf32_round": 2, "tf32_ldsm": True}),
    # TF32 to nearest even: in the loop (3); in shared memory, stage kt+1 rounded while stage kt
    # is multiplied (4: a stage rounded late or not at all fails the bound against RNE inputs)
    ("tf32", 32, 16, 8, 2, 1, 3, None, 0, 0, {"tf32_round": 3}),
    ("tf32", 32, 32, 16, 2, 2, 3, None, 1, 1, {"tf32_round": 4, "tf32_ldsm": True}),
    (
        "tf32",
        32,
        16,
        16,
        2,
        1,
        2,
        None,
        0,
        0,
        {"tf32_round": 4, "copy_after": 1, "tf32_round_at": 0},
    ),
    ("tf32", 32, 16, 32, 2, 1, 4, None, 0, 1, {"tf32_round": 4, "tf32_round_at": 3}),
    # FRAG_PIPE (aligned operands): fragments double-buffered across stages, STAGES tiles in
    # flight (the copies of tile kt+STAGES overwrite tile kt's stage after the barrier before
    # its last k-step)
    ("tf32", 32, 16, 16, 2, 1, 2, None, 1, 1, {"tf32_round": 3, "tf32_pipe": 1}),
    ("tf32", 32, 32, 16, 2, 2, 3, None, 1, 1, {"tf32_round": 4, "tf32_pipe": 2, "tf32_ldsm": 1}),
    ("tf32", 32, 16, 32, 2, 1, 3, None, 1, 1, {"tf32_round": 2, "tf32_pipe": 1}),
    ("tf32", 32, 16, 16, 2, 1, 2, None, 1, 1, {"tf32_round": 4, "tf32_pipe": 3}),
    ("tf32", 32, 32, 32, 2, 2, 3, None, 1, 1, {"tf32_round": 3, "tf32_pipe": 3, "tf32_ldsm": 1}),
    ("tf32", 32, 32, 32, 2, 2, 2, None, 1, 1, {"tf32_round": 3, "tf32_pipe": 4}),
    # pipe 3 with A's and B's copies after different k-steps (one commit group)
    ("tf32", 32, 16, 32, 2, 1, 2, None, 1, 1, {"tf32_pipe": 3, "copy_after": 3, "tf32_copy_b": 2}),
    ("tf32", 32, 32, 32, 1, 2, 2, None, 1, 1, {"tf32_pipe": 3, "copy_after": 1, "tf32_copy_b": 3}),
    ("tf32", 32, 64, 16, 2, 1, 2, None, 1, 1, {"tf32_bvec": 1, "tf32_round": 4, "tf32_pipe": 1}),
    # the same pipe for 16-bit inputs (frag_pipe): ldmatrix fragments, one k-step of 16
    ("f16", 32, 32, 32, 2, 2, 3, None, 1, 1, {"frag_pipe": 1}),
    ("bf16", 32, 16, 32, 2, 1, 2, None, 1, 1, {"frag_pipe": 2}),
    ("f16", 32, 32, 64, 1, 2, 2, None, 1, 1, {"frag_pipe": 3, "copy_after": 1}),
    ("bf16", 32, 32, 32, 2, 2, 2, None, 1, 1, {"frag_pipe": 4}),
    # the stage multiplied in two parts around the next stage's copies (COPY_AFTER)
    ("f64", 32, 16, 16, 2, 1, 3, (16, 8, 8), 0, 1, {"copy_after": 1}),
    ("f16", 32, 32, 32, 1, 2, 2, None, 1, 1, {"copy_after": 1}),
    # TF32 B fragments by 16-byte loads: permuted C columns, XOR-swizzled unpadded B rows
    ("tf32", 32, 64, 8, 2, 1, 2, None, 0, 0, {"tf32_bvec": True}),
    (
        "tf32",
        32,
        128,
        16,
        1,
        2,
        3,
        None,
        1,
        1,
        {"tf32_bvec": True, "tf32_round": 2, "copy_after": 1},
    ),
]


@pytest.fixture(scope="module")
def pocl():
    cl = pytest.importorskip("pyopencl")
    for p in cl.get_platforms():
        if "portable" in p.name.lower() or "pocl" in p.name.lower():
            dev = p.get_devices()[0]
            ctx = cl.Context([dev])
            return cl, ctx, cl.CommandQueue(ctx)
    pytest.skip("no PoCL platform")


def _operands(kind: str, rng, shape: tuple[int, ...], even: bool = False):
    """(storage array, float64 values the kernel multiplies) for one operand (``even``: TF32
    rounded to nearest even)."""
    x = rng.standard_normal(shape)
    if kind == "f64":
        return x, x
    if kind == "f16":
        h = x.astype(np.float16)
        return h, h.astype(np.float64)
    if kind == "bf16":
        b = _bf16(x)
        return b, _from_bf16(b)
    f = x.astype(np.float32)
    return f, _tf32(f, even)


@pytest.mark.parametrize("cfg", SCALAR, ids=lambda c: "-".join(map(str, c[:7])))
def test_scalar_tile_walk_on_pocl(pocl, cfg):
    """Odd shapes (edges in M, N and K: K not a multiple of BK), a batch of 2 with element
    strides and offsets, NaN-poisoned output, against a float64 product of the same values."""
    cl, ctx, queue = pocl
    kind, bm, bn, bk, wm, wn, st, shape, al_a, al_b, *extra = cfg
    defs = mma_spec.mma_defines(kind, bm, bn, bk, wm, wn, st, shape, aligned_a=bool(al_a),
                                aligned_b=bool(al_b), group_m=2, **(extra or [{}])[0])  # fmt: skip
    gemm = cl.Kernel(cl.Program(ctx, K.source(K.MMA, defs)).build(), "gemm")
    rng = np.random.default_rng(7)
    ch = 16 // mma_spec.ELEM_BYTES[kind]
    for m, n, k in ((37, 29 if al_b == 0 else 24, 45), (5, 8, 3), (40, 32, 2 * bk)):
        if al_a and k % ch or al_b and n % ch:  # aligned variants need 16-byte rows
            k, n = -(-k // ch) * ch, -(-n // ch) * ch
        even = defs.get("TF32_RNA") in (3, 4)
        a, a64 = _operands(kind, rng, (2, m, k), even)
        b, b64 = _operands(kind, rng, (2, k, n), even)
        out_dt = {"f64": np.float64, "tf32": np.float32, "f16": np.float16}.get(kind, np.uint16)
        c = np.full((2, m, n), 0x7FC1 if kind == "bf16" else np.nan).astype(out_dt)
        mf = cl.mem_flags
        bufs = [cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=x) for x in (a, b, c)]
        i = np.int32
        gx, gy = -(-n // bn), -(-m // bm)
        gemm(queue, (gx * defs["THREADS"], gy, 2), (defs["THREADS"], 1, 1), i(m), i(n),
                 i(k), bufs[0], i(0), i(k), bufs[1], i(0), i(n), bufs[2], i(0), i(n), i(1),
                 i(m * k), i(0), i(k * n), i(0), i(m * n), i(0), i(0))  # fmt: skip
        cl.enqueue_copy(queue, c, bufs[2])
        queue.finish()
        got = _from_bf16(c) if kind == "bf16" else c.astype(np.float64)
        ref = a64 @ b64
        assert np.isfinite(got).all(), (cfg, m, n, k)
        err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
        tol = {"f64": 1e-14, "tf32": 1e-6, "f16": 2e-3, "bf16": 1e-2}[kind]
        assert err < tol, (cfg, m, n, k, err)


def test_zero_k_writes_zeros(pocl):
    cl, ctx, queue = pocl
    defs = mma_spec.mma_defines("f64", 32, 16, 8, 2, 1, 2, (16, 8, 8), aligned_a=False,
                                aligned_b=False)  # fmt: skip
    prg = cl.Program(ctx, K.source(K.MMA, defs)).build()
    c = np.full((5, 7), np.nan)
    one = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 64)
    cb = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=c)
    i = np.int32
    prg.gemm(queue, (64, 1, 1), (64, 1, 1), i(5), i(7), i(0), one, i(0), i(1), one, i(0), i(7),
             cb, i(0), i(7), i(1), *(i(0),) * 7)  # fmt: skip
    cl.enqueue_copy(queue, c, cb)
    queue.finish()
    assert (c == 0).all()


# ------------------------------------------------------------------ layout and defines


@pytest.mark.parametrize("kind", list(mma_spec.KINDS))
def test_padding_rule_is_one_rule(kind):
    """The kernel's defines carry the one padding rule (``tc.padded_lds``, which the planner's
    shared-memory size uses) over a grid of tiles, fragment shapes and (TF32) swizzled B rows."""
    checked = 0
    for bk in (8, 16, 24, 32, 48, 64, 128):
        for bn in (32, 64, 96, 128, 192, 256):
            for shape in mma_spec.SHAPES[kind]:
                for bvec in (False, True) if kind == "tf32" else (False,):
                    try:
                        d = mma_spec.mma_defines(kind, 64, bn, bk, 2, 1 if bn % 64 else 2, 3,
                                                 shape, tf32_bvec=bvec)  # fmt: skip
                    except ValueError:
                        continue
                    want = tc.padded_lds(kind, bk, bn, shape[2], bvec=bvec)
                    assert (d["SA_LD"], d["SB_LD"]) == want, (bk, bn, shape, bvec)
                    assert d["SMEM_ELEMS"] == 3 * (64 * want[0] + bk * want[1])
                    checked += 1
    assert checked >= 12


def test_defines_reject_bad_tiles():
    with pytest.raises(ValueError, match="warp tiles"):
        mma_spec.mma_defines("f64", 100, 64, 16, 2, 2, 3)
    with pytest.raises(ValueError, match="even number"):
        mma_spec.mma_defines("f16", 64, 48, 32, 2, 2, 3)
    with pytest.raises(ValueError, match="stages"):
        mma_spec.mma_defines("f64", 64, 64, 16, 2, 2, 1)
    with pytest.raises(ValueError, match="copies per tile row"):
        mma_spec.mma_defines("tf32", 64, 256, 16, 1, 1, 3, aligned_b=False)


def test_plan_defines_match_the_spec():
    plan = make_plan(1000, 3000, 777, dtype="float64", kernel="mma", device=H200)
    d = K.defines(plan, aligned=False)
    assert (d["BM"], d["BN"], d["BK"], d["THREADS"]) == (*plan.block_tile, plan.threads_per_block)
    assert (d["FM"], d["FN"], d["FK"]) == (16, 8, 8) and d["ALIGNED_A"] == 0
    assert K.mma_smem_bytes(d) == plan.shared_bytes
    assert "#include" not in K.source(K.MMA, d)
    with pytest.raises(ValueError, match="tf32"):
        K.mma_defines(SimpleNamespace(block_tile=(64, 64, 16), thread_tile=(32, 32),
                                      options={}, dtype="float32"))  # fmt: skip


# ------------------------------------------------------------------ the planner


@pytest.mark.parametrize("dtype", ["float64", "float16", "bfloat16"])
def test_mma_plans_on_h200(dtype):
    """mma.sync plans (16-bit: asked for with option ``hopper`` 0; by default the Hopper kernel
    runs them, tests/test_hopper_plan.py)."""
    geo = default_mma_geometry(dtype, H200)
    if dtype != "float64":
        geo = replace(geo, options=geo.options + (("hopper", 0),))
    p = make_plan(4095, 4095, 4095, dtype=dtype, kernel="mma", device=H200, geometry=geo,
                  backend="cupy")  # fmt: skip
    text = str(p)
    assert "mma.sync" in text and "warp tile" in text and p.kernel == "mma"
    assert p.level("tensor cores") is not None and p.predicted_seconds > 0
    assert p.padded_shape[0] % p.block_tile[0] == 0 and 0 < p.padding_waste < 0.1
    assert p.threads_per_block == 32 * (p.block_tile[0] // p.thread_tile[0]) * (
        p.block_tile[1] // p.thread_tile[1]
    )
    peak, _ = tc.peak(H200, dtype)
    assert p.flops / p.predicted_seconds <= peak  # never faster than the tensor roof


def test_float32_needs_the_tf32_request():
    with pytest.raises(PlanError, match="precision='tf32'"):
        make_plan(256, 256, 256, dtype="float32", kernel="mma", device=H200)
    geo = default_mma_geometry("float32", H200, "tf32")
    p = make_plan(256, 256, 256, dtype="float32", kernel="mma", device=H200, geometry=geo)
    assert "tf32" in str(p) and p.options["precision"] == "tf32"


def test_mma_plan_errors():
    with pytest.raises(PlanError, match="tensor cores"):
        make_plan(64, 64, 64, dtype="float64", kernel="mma", device=host_cpu())
    geo = tiledmm.Geometry((128, 128, 16), (32, 64), (("fm", 16), ("fk", 16), ("stages", 8)))
    with pytest.raises(PlanError, match="shared memory"):
        make_plan(512, 512, 512, dtype="float64", kernel="mma", device=H200, geometry=geo)
    geo = tiledmm.Geometry((128, 128, 16), (32, 64), (("fm", 16), ("fk", 2)))
    with pytest.raises(PlanError, match="no 16x8x2"):
        make_plan(512, 512, 512, dtype="float64", kernel="mma", device=H200, geometry=geo)


def test_tensor_roof_above_the_fma_roof():
    for dtype in ("float16", "bfloat16"):
        assert tc.peak(H200, dtype)[0] > 5 * H200.fma_peak("float32")
    assert tc.peak(H200, "float64")[0] == H200.peak("float64")  # measured: cuBLAS DGEMM


def test_measured_16bit_roof():
    """A calibrated float16 vendor rate is the 16-bit roof (bfloat16 shares it); mma.sync plans
    still predict at the share of the whitepaper rate it can issue, never above the roof."""
    bare = reference_h200({**nvidia.H200_MEASURED, "peak_flops": {}})  # no float16 measured
    sheet = tc.roof(bare, "float16")[0]
    assert tc.roof(bare, "bfloat16")[0] == sheet and "estimate" in tc.roof(bare, "float16")[1]
    assert tc.roof(H200, "float16")[0] == nvidia.H200_MEASURED["peak_flops"]["float16"]
    frac = nvidia.MMA_SYNC_FRACTION[(9, 0)]["f16"]
    assert tc.peak(bare, "float16")[0] == pytest.approx(sheet * frac)
    measured = replace(bare, peak_flops=bare.peak_flops + (("float16", 0.8 * sheet),))
    for dtype in ("float16", "bfloat16"):
        rate, src = tc.roof(measured, dtype)
        assert rate == 0.8 * sheet and src.startswith("measured float16")
        assert tc.peak(measured, dtype)[0] == pytest.approx(sheet * frac)
    low = replace(bare, peak_flops=bare.peak_flops + (("float16", 0.5 * sheet),))
    assert tc.peak(low, "float16")[0] == 0.5 * sheet  # the roof caps the mma.sync share
    p = make_plan(4096, 4096, 4096, dtype="float16", kernel="mma", device=measured)
    assert p.options["hopper"] == 1  # the Hopper kernel runs it, at the roof
    assert peak_of(p, "float16") == 0.8 * sheet  # what the bench records as the row's roof


# ------------------------------------------------------------------ CUDA side


NVCC = [  # (kind, tiles, warps, stages, fragment, aligned)
    ("f64", (128, 128, 16), (4, 2), 3, (16, 8, 8), True),
    ("f64", (128, 64, 16), (4, 2), 3, (8, 8, 4), False),
    ("f16", (128, 256, 32), (2, 4), 3, None, True),
    ("bf16", (128, 128, 32), (2, 2), 4, None, True),
    ("tf32", (128, 128, 32), (2, 4), 3, None, False),
    ("tf32", (128, 256, 32), (2, 4), 3, None, True, {"tf32_round": 2, "tf32_ldsm": True}),
    ("tf32", (128, 128, 32), (2, 2), 3, None, True, {"tf32_round": 2, "min_blocks": 2}),
    ("f16", (128, 128, 32), (2, 2), 4, None, True, {"copy_after": 1}),
    ("tf32", (128, 256, 32), (2, 4), 3, None, True, {"tf32_round": 3, "tf32_ldsm": True}),
    ("tf32", (128, 256, 32), (2, 4), 4, None, True, {"tf32_round": 4, "tf32_ldsm": True}),
    ("tf32", (128, 128, 32), (2, 2), 4, None, True, {"tf32_round": 4, "min_blocks": 2}),
    ("tf32", (128, 256, 32), (2, 4), 3, None, False, {"tf32_round": 4, "copy_after": 1}),
    ("tf32", (128, 256, 32), (2, 4), 3, None, True, {"tf32_round": 3, "tf32_pipe": 1}),
    (
        "tf32",
        (128, 128, 32),
        (2, 2),
        3,
        None,
        True,
        {"tf32_round": 4, "tf32_pipe": 2, "tf32_ldsm": True, "min_blocks": 2},
    ),
    ("tf32", (128, 256, 32), (2, 4), 4, None, True, {"tf32_round": 3, "tf32_pipe": 3}),
    ("tf32", (128, 256, 32), (2, 4), 4, None, True, {"tf32_round": 3, "tf32_pipe": 4}),
    (
        "tf32",
        (128, 256, 32),
        (2, 4),
        4,
        None,
        True,
        {"tf32_round": 3, "tf32_pipe": 3, "copy_after": 1, "tf32_copy_b": 2, "tf32_ldsm": True},
    ),
    ("f16", (128, 128, 64), (2, 2), 3, None, True, {"frag_pipe": 1, "min_blocks": 2}),
    ("bf16", (128, 128, 64), (2, 2), 3, None, True, {"frag_pipe": 3, "copy_after": 1}),
    # unaligned operands: tf32_pipe falls back to the plain loop (the pipe would spill)
    ("tf32", (128, 256, 32), (2, 4), 3, None, False, {"tf32_round": 4, "tf32_pipe": 1}),
    (
        "tf32",
        (128, 256, 32),
        (2, 4),
        3,
        None,
        True,
        {"tf32_round": 2, "tf32_ldsm": True, "tf32_bvec": True},
    ),
]


def _nvcc_id(c) -> str:
    extra = "".join(f"-{k}{int(v)}" for k, v in (c[6:] or [{}])[0].items())
    return f"{c[0]}-{c[1][0]}x{c[1][1]}/{c[2][0]}x{c[2][1]}{extra}"


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("cfg", NVCC, ids=_nvcc_id)
def test_cuda_mma_compiles(cfg, tmp_path):
    """The PTX path as NVRTC gets it (no host headers), sm_90, no warnings, no spills."""
    kind, (bm, bn, bk), (wm, wn), st, shape, al, *extra = cfg
    d = mma_spec.mma_defines(kind, bm, bn, bk, wm, wn, st, shape, aligned_a=al, aligned_b=al,
                             group_m=8, **(extra or [{}])[0])  # fmt: skip
    nvcc_build(K.source(K.MMA, d), tmp_path)


def test_cupy_declares_mma():
    spec = importlib.util.find_spec("tiledmm_backends.cupy_cuda")
    assert spec is not None
    from tiledmm_backends.cupy_cuda import CupyBackend

    assert "mma" in CupyBackend.kernels and "mma" in tiledmm.KERNEL_FAMILIES
    assert "mma" not in tiledmm.get_backend("numpy").kernels


# ------------------------------------------------------------------ GPU (CuPy)


gpu = requires_backend("cupy")


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("dtype", ["float64", "float16"])
def test_gpu_mma(dtype):
    import cupy as cp

    be = tiledmm.get_backend("cupy")
    rng = np.random.default_rng()
    for m, n, k in ((37, 53, 29), (130, 65, 131), (257, 129, 1000), (1, 7, 3)):
        a = rng.standard_normal((m, k)).astype(dtype)
        b = rng.standard_normal((k, n)).astype(dtype)
        plan = make_plan(m, n, k, dtype=dtype, kernel="mma", device=be.device(), backend="cupy")
        out = cp.full((m, n), np.nan, dtype=dtype)
        be.run(plan, cp.asarray(a), cp.asarray(b), out)
        got, ref = cp.asnumpy(out).astype(np.float64), a.astype(np.float64) @ b.astype(np.float64)
        err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
        assert np.isfinite(got).all() and err < (1e-13 if dtype == "float64" else 2e-3), err


@pytest.mark.gpu
@gpu
def test_gpu_mma_tf32_and_batched():
    """TF32 only through a plan that asks for it; a broadcast float64 batch in one launch."""
    import cupy as cp

    be = tiledmm.get_backend("cupy")
    rng = np.random.default_rng()
    a = rng.standard_normal((130, 257)).astype(np.float32)
    b = rng.standard_normal((257, 67)).astype(np.float32)
    geo = default_mma_geometry("float32", be.device(), "tf32")
    plan = make_plan(130, 67, 257, dtype="float32", kernel="mma", device=be.device(),
                     geometry=geo, backend="cupy")  # fmt: skip
    out = cp.full((130, 67), np.nan, dtype=np.float32)
    be.run(plan, cp.asarray(a), cp.asarray(b), out)
    err = np.linalg.norm(cp.asnumpy(out) - a.astype(np.float64) @ b) / np.linalg.norm(a @ b)
    assert 1e-6 < err < 5e-3, err  # TF32: not IEEE float32, not garbage
    x = rng.standard_normal((3, 45, 70))
    y = rng.standard_normal((70, 33))
    plan = make_plan(45, 33, 70, dtype="float64", kernel="mma", device=be.device(),
                     backend="cupy")  # fmt: skip
    out = cp.full((3, 45, 33), np.nan)
    assert be.run_batched(plan, cp.asarray(x), cp.asarray(y), out)
    assert np.abs(cp.asnumpy(out) - x @ y).max() < 1e-12


def test_model_default_fits_the_problem_and_requests_are_kept():
    """The model default takes the small tiles where the large ones leave SMs idle (512^3 f64:
    32 blocks of 128x64 on 132 SMs), the large ones at 1024^3 and 4096^3 (on the H100, 1024^3:
    128x64 35.5 TFLOP/s, 64x64 32.6-34.6); requested tiles stay."""

    def tiles(n: int, geo=None) -> tuple:
        p = make_plan(n, n, n, dtype="float64", kernel="mma", device=H200, geometry=geo)
        return p.block_tile[:2], p.options

    assert tiles(512)[0] == (64, 64)
    assert tiles(1024)[0] == tiles(4096)[0] == (128, 64)
    assert dict(tiles(4096)[1])["copy_after"] == 1 and dict(tiles(4096)[1])["min_blocks"] == 2
    base = default_mma_geometry("float64", H200)
    geo = tiledmm.Geometry((128, 128, 16), (32, 64), base.options, None, "requested")
    bt, opts = tiles(512, geo)
    assert bt == (128, 128) and "fit" not in opts


def test_16bit_tiles_halved_for_grids_under_one_block_per_sm():
    """The H200's 16-bit tables (8 warps, one block per SM) run small grids with half the block
    and two blocks per SM (float16 1024^3: 32 blocks of 128x256 ran at 0.26 of the vendor, 64
    of 128x128 at 0.38); large grids, float64 and the model default keep their tiles. (mma.sync
    tiles: option ``hopper`` 0; the Hopper kernel would run them otherwise.)"""
    from tiledmm.planner.shapefit import for_product

    opts = (("copy_after", 1), ("fk", 16), ("fm", 16), ("fn", 8), ("frag_pipe", 3),
            ("group_m", 8), ("hopper", 0), ("stages", 4))  # fmt: skip
    wide = tiledmm.Geometry((128, 256, 64), (64, 64), opts, None, "table")
    tall = tiledmm.Geometry((256, 128, 64), (64, 64), opts, None, "table")
    for geo, dtype in ((wide, "float16"), (tall, "bfloat16")):
        small = for_product(geo, "mma", 1024, 1024, 1024, H200, "square", dtype=dtype)
        assert small.block_tile == (128, 128, 64) and small.thread_tile == (64, 64)
        o = dict(small.options)
        assert o["min_blocks"] == 2 and o["stages"] == 3 and "halved" in small.source
        p = make_plan(1024, 1024, 1024, dtype=dtype, kernel="mma", device=H200, geometry=small)
        assert p.occupancy.blocks_per_unit == 2
        assert for_product(geo, "mma", 4096, 4096, 4096, H200, "square", dtype=dtype) == geo
    assert for_product(wide, "mma", 1024, 1024, 1024, H200, "square", dtype="float64") == wide
    dflt = default_mma_geometry("float16", H200)
    assert for_product(dflt, "mma", 1024, 1024, 1024, H200, "square", dtype="float16") == dflt


# ------------------------------------------------------------------ OpenCL (NVIDIA, inline PTX)


def _with_precision(geo, precision: str):
    opts = {**dict(geo.options), "precision": precision}
    return replace(geo, options=tuple(sorted(opts.items())))


class _FakeCLDevice:
    """What ``backends.opencl.mma.supports`` reads of a pyopencl device (hashable by id)."""

    def __init__(self, gpu: bool, vendor: str, cc: tuple[int, int] | None) -> None:
        import pyopencl as cl

        self.type = cl.device_type.GPU if gpu else cl.device_type.CPU
        self.vendor = vendor
        self.extensions = "cl_khr_fp64" + (" cl_nv_device_attribute_query" if cc else "")
        if cc:
            self.compute_capability_major_nv, self.compute_capability_minor_nv = cc


def test_opencl_mma_only_on_nvidia_cc80():
    pytest.importorskip("pyopencl")
    from tiledmm_backends.opencl import mma as clmma

    assert clmma.supports(_FakeCLDevice(True, "NVIDIA Corporation", (9, 0)))
    assert clmma.supports(_FakeCLDevice(True, "NVIDIA Corporation", (8, 0)))
    assert not clmma.supports(_FakeCLDevice(True, "NVIDIA Corporation", (7, 5)))
    assert not clmma.supports(_FakeCLDevice(True, "NVIDIA Corporation", None))  # cc unknown
    assert not clmma.supports(_FakeCLDevice(True, "Advanced Micro Devices, Inc.", None))
    assert not clmma.supports(_FakeCLDevice(False, "The pocl project", None))


@pytest.mark.parametrize("kind", ["f64", "tf32"])
def test_opencl_mma_tiles_fit_static_local_memory(kind):
    """Every OpenCL mma geometry fits 48 KiB of static local memory (aligned or not) and plans
    on an H200 as NVIDIA's OpenCL describes it (48 KiB shared per block)."""
    pytest.importorskip("pyopencl")
    from tiledmm_backends.opencl import mma as clmma

    from tiledmm.device import nvidia

    dev = nvidia.device_spec("NVIDIA H200", (9, 0), dict(sms=132, clock_khz=1.98e6,
                             bandwidth=4.8e12, shared_optin=48 * 1024, l2=50 << 20),
                             launch_overhead=8e-6)  # fmt: skip
    dtype = {"f64": "float64", "tf32": "float32"}[kind]
    for bt, wt, st, _ in clmma.GEOMETRY[kind]:
        for al in (True, False):
            d = mma_spec.mma_defines(kind, *bt, bt[0] // wt[0], bt[1] // wt[1], st,
                                     aligned_a=al, aligned_b=al)  # fmt: skip
            assert mma_spec.smem_bytes(d) <= clmma.STATIC_LOCAL, (bt, st, al)
    geo = clmma.geometry(dtype)
    if kind == "tf32":
        geo = _with_precision(geo, "tf32")
    plan = make_plan(333, 257, 129, dtype=dtype, kernel="mma", device=dev, geometry=geo,
                     backend="opencl")  # fmt: skip
    assert plan.shared_bytes <= 48 * 1024 and plan.kernel == "mma"
    assert K.mma_smem_bytes(K.mma_defines(plan, False, False)) == plan.shared_bytes


@requires_backend("opencl")
def test_opencl_offers_mma_only_where_supported():
    from tiledmm_backends.opencl import mma as clmma

    be = tiledmm.get_backend("opencl")
    st = be.state()
    assert ("mma" in be.kernels) == clmma.supports(st.dev)
    if not clmma.supports(st.dev):  # PoCL in CI: the family is absent, a forced plan refused
        plan = make_plan(40, 40, 40, dtype="float64", kernel="mma", device=H200,
                         backend="opencl")  # fmt: skip
        with pytest.raises(ValueError, match="NVIDIA"):
            clmma.build(st, plan, True)


@pytest.mark.gpu
@requires_backend("opencl")
def test_gpu_opencl_mma():
    """float64 (DMMA) and TF32 through NVIDIA's OpenCL at odd shapes, NaN-poisoned output."""
    import pyopencl.array as cla

    be = tiledmm.get_backend("opencl")
    be.state()
    if "mma" not in be.kernels:
        pytest.skip("the OpenCL device is not an NVIDIA GPU of compute capability 8.0+")
    q, rng = be.state().queue, np.random.default_rng()
    for dtype, prec, tol in (("float64", None, 1e-13), ("float32", "tf32", 5e-3)):
        for m, n, k in ((37, 53, 29), (130, 65, 131), (257, 129, 1000)):
            a = rng.standard_normal((m, k)).astype(dtype)
            b = rng.standard_normal((k, n)).astype(dtype)
            geo = be.geometry("mma", dtype, be.device())
            if prec:
                geo = _with_precision(geo, prec)
            plan = make_plan(m, n, k, dtype=dtype, kernel="mma", device=be.device(),
                             geometry=geo, backend="opencl")  # fmt: skip
            out = cla.to_device(q, np.full((m, n), np.nan, dtype=dtype))
            be.run(plan, cla.to_device(q, a), cla.to_device(q, b), out)
            got, ref = out.get().astype(np.float64), a.astype(np.float64) @ b.astype(np.float64)
            err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
            assert np.isfinite(got).all() and err < tol, (dtype, m, n, k, err)
            if prec:
                assert err > 1e-6, err  # TF32, not IEEE float32


# ------------------------------------------------------------------ Hopper wgmma (TF32)

WG_GEO = tiledmm.Geometry(
    (128, 256, 32), (64, 64),
    (("group_m", 8), ("precision", "tf32"), ("stages", 4), ("tf32_round", 3), ("wgmma", 1)),
)  # fmt: skip


def test_wgmma_defines_and_limits():
    d = mma_spec.wgmma_defines(128, 256)
    assert (d["NWG"], d["BN"], d["TMA"], d["ROUND"]) == (2, 256, 0, 1)
    assert mma_spec.wgmma_smem_bytes(d) <= mma_spec.WGMMA_SMEM_LIMIT
    assert mma_spec.wgmma_defines(192, 256)["NWG"] == 3
    assert mma_spec.wgmma_defines(256, 128, wg_m=2, tma=True, cluster=2)["CLUSTER"] == 2
    for kw, match in (({"bk": 16}, "BK must be 32"), ({"bn": 96}, "BN must be"),
                      ({"stages": 5}, "shared memory"), ({"cluster": 2}, "cluster must"),
                      ({"wg_m": 2}, "accumulators"), ({"tf32_round": 0}, "tf32_round"),
                      ({"bm": 96}, "BM must be")):  # fmt: skip
        args = {"bm": 128, "bn": 256, **kw}
        with pytest.raises(ValueError, match=match):
            mma_spec.wgmma_defines(args.pop("bm"), args.pop("bn"), **args)


def test_wgmma_plan_routes_to_the_kernel():
    from tiledmm_backends.cupy_cuda import wgmma

    p = make_plan(4095, 4097, 4093, dtype="float32", kernel="mma", device=H200, geometry=WG_GEO)
    assert wgmma.wants(p) and p.block_tile == (128, 256, 32)
    assert wgmma.defines(p) == mma_spec.wgmma_defines(128, 256, stages=4, group_m=8)
    tma = replace(p, options={**p.options, "wgmma": 2, "cluster": 2})
    assert wgmma.defines(tma)["TMA"] == 1 and wgmma.defines(tma)["CLUSTER"] == 2
    geo = default_mma_geometry("float32", H200, "tf32", fit=False)
    assert not wgmma.wants(make_plan(256, 256, 256, dtype="float32", kernel="mma", device=H200,
                                     geometry=geo))  # fmt: skip


HALF_GEO = tiledmm.Geometry(
    (128, 256, 64), (64, 64),
    (("fk", 16), ("fm", 16), ("fn", 8), ("group_m", 16), ("stages", 4), ("wgmma", 1)),
)  # fmt: skip


def test_wgmma_16bit_defines_and_routing():
    from tiledmm_backends.cupy_cuda import wgmma

    d = mma_spec.wgmma_defines(128, 256, 64, half=1)
    assert (d["HALF"], d["BN"]) == (1, 256) and mma_spec.wgmma_defines(128, 256)["HALF"] == 0
    for kw, match in (({"bk": 32}, "BK must be 64"), ({"bn": 64}, "BN must be 128"),
                      ({"tma": True}, "cp.async only")):  # fmt: skip
        args = {"bk": 64, "bn": 256, **kw}
        with pytest.raises(ValueError, match=match):
            mma_spec.wgmma_defines(128, args.pop("bn"), args.pop("bk"), half=2, **args)
    p = make_plan(1000, 3000, 776, dtype="float16", kernel="mma", device=H200, geometry=HALF_GEO)
    assert wgmma.wants(p) and wgmma.defines(p)["HALF"] == 1
    fit = replace(p, options={**p.options, "wgmma_fit": 1}, m=1024, n=1024)
    assert (wgmma.defines(fit, 132)["BN"], wgmma.defines(fit, 132)["NWG"]) == (128, 1)
    assert not wgmma.wants(make_plan(64, 64, 64, dtype="float16", kernel="mma", device=H200))


def test_wgmma_fit_narrows_tiles_only_for_small_grids():
    from tiledmm_backends.cupy_cuda import wgmma

    assert wgmma.fit_tiles(128, 256, 2048, 2048, 132) == (128, 256)  # 128 blocks: kept
    assert wgmma.fit_tiles(128, 256, 1024, 1024, 132) == (128, 64)  # 32 -> 128 blocks
    assert wgmma.fit_tiles(128, 256, 100, 100, 132) == (64, 64)  # as small as it gets
    assert wgmma.fit_tiles(256, 128, 1024, 1024, 132, wg_m=2) == (128, 64)
    p = make_plan(1024, 1024, 1024, dtype="float32", kernel="mma", device=H200, geometry=WG_GEO)
    assert wgmma.defines(p, 132)["BN"] == 256  # without the option the plan's tiles run
    fit = replace(p, options={**p.options, "wgmma_fit": 1})
    d = wgmma.defines(fit, 132)
    assert (d["BN"], d["NWG"]) == (64, 2) and wgmma.defines(fit)["BN"] == 256


WGMMA_NVCC = [{}, {"SWIZZLE": 0}, {"NWG": 3}, {"BN": 128, "WG_M": 2}, {"TMA": 1, "CLUSTER": 2},
              {"TMA": 1, "CLUSTER": 1, "BN": 128, "STAGES": 6}, {"HALF": 1},
              {"HALF": 2, "BN": 128}]  # fmt: skip


def _defs_id(e: dict) -> str:
    return "-".join(f"{k}{v}" for k, v in e.items()) or "default"


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("extra", WGMMA_NVCC, ids=_defs_id)
def test_wgmma_compiles(extra, tmp_path):
    """wgmma.cu for sm_90a as NVRTC sees it: no warnings, no spills."""
    import subprocess

    from tiledmm_backends.cupy_cuda import hopper, wgmma

    src = tmp_path / "w.cu"
    src.write_text(hopper.source(extra, wgmma.SRC))
    res = subprocess.run(["nvcc", "-arch=sm_90a", "-cubin", "-Werror", "all-warnings", "-Xptxas",
                          "-v", "-o", str(tmp_path / "w.cubin"), str(src)],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    kernels = res.stderr.count("Compiling entry function")
    assert "'wgmma_gemm'" in res.stderr and ("wgmma_gemm_tma" in res.stderr) == bool(
        extra.get("TMA")
    ), res.stderr[-2000:]
    assert res.stderr.count(" 0 bytes spill stores") == kernels, res.stderr[-2000:]


def _wgmma_case(cp, geo, dtype, m, n, k, a_cols, b_stride=1):
    """(result, float64 reference) of one wgmma plan run by the CuPy backend on fresh normal
    operands into a NaN-poisoned output; A column-major when ``a_cols``, B's columns
    ``b_stride`` apart."""
    be = tiledmm.get_backend("cupy")
    rng = np.random.default_rng()
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    plan = make_plan(m, n, k, dtype=np.dtype(dtype).name, kernel="mma", device=be.device(),
                     geometry=geo, backend="cupy")  # fmt: skip
    da = cp.asarray(a.T.copy()).T if a_cols else cp.asarray(a)
    db = cp.asarray(np.repeat(b, b_stride, axis=1))[:, ::b_stride]
    out = cp.full((m, n), np.nan, dtype=dtype)
    be.run(plan, da, db, out)
    return cp.asnumpy(out).astype(np.float64), a.astype(np.float64) @ b


@pytest.mark.gpu
@gpu
def test_gpu_wgmma_float16():
    """16-bit wgmma (no packs; B read N-major) on an sm_90 device: odd shapes (K not a multiple
    of 8: zero-padded copy), a column-major A, a NaN-poisoned output."""
    import cupy as cp

    if cp.cuda.Device().compute_capability != "90":
        pytest.skip("wgmma is sm_90a code")
    for m, n, k, ta in ((37, 53, 29, False), (300, 512, 1000, True), (1, 8, 3, False),
                        (1000, 3000, 776, False)):  # fmt: skip
        got, ref = _wgmma_case(cp, HALF_GEO, np.float16, m, n, k, ta)
        err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
        assert np.isfinite(got).all() and 1e-5 < err < 2e-3, err


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("mode", [1, 2])
def test_gpu_wgmma_tf32(mode):
    """The wgmma kernel (cp.async 1, TMA with 2-block clusters 2) on an sm_90 device: odd
    shapes, strided views, a NaN-poisoned output, K = 0; error at TF32's level."""
    import cupy as cp

    if cp.cuda.Device().compute_capability != "90":
        pytest.skip("wgmma is sm_90a code")
    opts = {**dict(WG_GEO.options), "wgmma": mode, **({"cluster": 2} if mode == 2 else {})}
    geo = replace(WG_GEO, options=tuple(sorted(opts.items())))
    for m, n, k, ta in ((37, 53, 29, False), (300, 513, 1000, True), (1, 7, 3, False),
                        (257, 255, 0, False)):  # fmt: skip
        got, ref = _wgmma_case(cp, geo, np.float32, m, n, k, ta, b_stride=2)
        assert np.isfinite(got).all()
        if k:
            err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
            assert 1e-6 < err < 2e-3, err  # TF32: not IEEE float32, not garbage
        else:
            assert not got.any()
