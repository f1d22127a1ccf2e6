"""The wgmma path's host side without a GPU: ``backends/cupy_cuda/wgmma.run`` against a NumPy
stand-in for CuPy whose kernels check their launch (grid, strides, padded extents) and then do
what ``wgmma.cu``'s kernels promise (TF32 packs, the GEMM over packed or 16-bit operands), at
odd shapes, strided views and views as outputs."""

from __future__ import annotations

import sys
import types
from dataclasses import replace

import numpy as np
import pytest
from tiledmm_backends.cupy_cuda import wgmma

import tiledmm
from tests.helpers import device_array as dev
from tiledmm.device.nvidia import reference_h200
from tiledmm.planner.make import make_plan

H200 = reference_h200()


def _tf32(x):
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0xFFF + ((u >> 13) & 1)) & ~np.uint64(0x1FFF)  # nearest even, 10 mantissa bits
    return u.astype(np.uint32).view(np.float32)


class _Kernel:
    def __init__(self, name: str, defs: dict, log: list) -> None:
        self.name, self.defs, self.log, self.ptr = name, defs, log, 1

    def __call__(self, grid, block, args, shared_mem=0):
        d, name = self.defs, self.name
        self.log.append(name)
        bm = 64 * d["WG_M"] * d["NWG"]
        if name == "tf32_pack_a2":
            a, ap, m, k, lda, sa, mp, kp, vec = args
            assert (lda, sa) == (a.strides[0] // 4, a.strides[1] // 4) and ap.shape == (mp, kp)
            assert grid[0] * block[0] * 4 >= kp and 1 <= grid[1] <= 65535
            assert not vec or (sa == 1 and lda % 4 == 0 and a.data.ptr % 16 == 0)
            ap[...] = 0
            ap[:m, :k] = _tf32(a)
        elif name == "tf32_pack_bt2":
            b, bt, k, n, ldb, sb, np_, kp = args
            assert (ldb, sb) == (b.strides[0] // 4, b.strides[1] // 4)
            assert (grid[0] * 64, grid[1] * 32, block) == (np_, kp, (32, 8))
            bt[...] = 0
            bt[:n, :k] = _tf32(b).T
        elif name == "wgmma_gemm":
            ap, bt, c, m, n, kp, ldc, tm, tn = args
            assert (tm * bm, tn * d["BN"], grid) == (ap.shape[0], bt.shape[0], (tm * tn,))
            assert kp == ap.shape[1] == bt.shape[1] and kp % 32 == 0
            assert (m == 1 or ldc == c.strides[0] // 4) and (c.strides[1] == 4 or n == 1)
            assert block == (128 * d["NWG"],) and shared_mem <= 227 * 1024
            c[...] = (ap.astype(np.float64) @ bt.T.astype(np.float64))[:m, :n]
        else:
            assert name == "wgmma_gemm_h" and d["HALF"] == 1
            a, b, c, m, n, k, lda, ldb, ldc, tm, tn = args
            assert tm * bm >= m and tn * d["BN"] >= n and grid == (tm * tn,)
            assert a.strides == (2 * lda, 2) and lda % 8 == 0 and a.data.ptr % 16 == 0
            assert b.strides[0] == 2 * ldb and ldb % 8 == 0 and b.data.ptr % 16 == 0
            assert (b.strides[1] == 2 or n == 1) and (m == 1 or ldc == c.strides[0] // 2)
            a8 = np.lib.stride_tricks.as_strided(a, (m, -(-k // 8) * 8), a.strides)
            assert np.isfinite(a8).all() and not a8[:, k:].any()  # what the kernel reads
            c[...] = a8[:, :k].astype(np.float64) @ np.asarray(b, np.float64)[:, :n]


@pytest.fixture
def fake_cupy(monkeypatch):
    """A CuPy stand-in (numpy arrays with ``.data.ptr``) and the kernels each build loads."""
    log: list = []

    class Module:
        def load(self, cubin):
            pass

        def get_function(self, name):
            return _Kernel(name, wgmma._building, log)

    cuda = types.ModuleType("cupy.cuda")
    cuda.function = types.SimpleNamespace(Module=Module)
    cuda.driver = types.SimpleNamespace(funcSetAttribute=lambda *a: None)
    cuda.runtime = types.SimpleNamespace(getDevice=lambda: 0)
    cuda.Device = lambda i=0: types.SimpleNamespace(
        compute_capability="90", attributes={"MultiProcessorCount": 132}
    )
    cp = types.ModuleType("cupy")
    cp.cuda, cp.float32, cp.int32, cp.int64 = cuda, np.float32, int, int
    cp.empty = lambda shape, dtype: dev(np.empty(shape, dtype))
    cp.zeros = lambda shape, dtype: dev(np.zeros(shape, dtype))
    cp.may_share_memory = np.may_share_memory
    monkeypatch.setitem(sys.modules, "cupy", cp)
    monkeypatch.setitem(sys.modules, "cupy.cuda", cuda)
    monkeypatch.setattr(wgmma.hopper, "sm90a_cubin", lambda *args: b"")
    monkeypatch.setattr(wgmma, "_KERNELS", type(wgmma._KERNELS)(16))
    monkeypatch.setattr(wgmma, "_BY_PLAN", type(wgmma._BY_PLAN)(16))
    monkeypatch.setattr(wgmma.hopper, "_DEVICES", {})  # hopper.device_info's cache
    monkeypatch.setattr(wgmma, "_building", None, raising=False)  # the defines being built
    init = wgmma.WgmmaKernel.__init__

    def remember(self, cp_, defs):
        wgmma._building = defs
        init(self, cp_, defs)

    monkeypatch.setattr(wgmma.WgmmaKernel, "__init__", remember)
    return cp, log


_FIT = (("group_m", 16), ("stages", 4), ("wgmma", 1), ("wgmma_fit", 1))
TF32 = tiledmm.Geometry((128, 256, 32), (64, 64), (("precision", "tf32"), *_FIT))
F16 = tiledmm.Geometry((128, 256, 64), (64, 64), (("fk", 16), *_FIT))
SHAPES = [(37, 53, 29), (300, 513, 1000), (1, 7, 3), (257, 255, 0), (1024, 1024, 64),
          (1000, 3000, 776), (600, 1, 33)]  # fmt: skip


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("layout", ["c", "a_fortran", "b_strided", "out_view"])
def test_wgmma_host_path(fake_cupy, dtype, layout):
    cp, log = fake_cupy
    rng = np.random.default_rng()
    for m, n, k in SHAPES:
        a = rng.standard_normal((m, k)).astype(dtype)
        b = rng.standard_normal((k, n)).astype(dtype)
        A = dev(np.asfortranarray(a)) if layout == "a_fortran" else dev(a)
        B = dev(np.repeat(b, 2, axis=1))[:, ::2] if layout == "b_strided" else dev(b)
        big = dev(np.full((m, 2 * n + 3), np.nan, dtype))
        out = big[:, 1 : n + 1] if layout == "out_view" else dev(np.full((m, n), np.nan, dtype))
        geo = TF32 if dtype == "float32" else F16
        plan = make_plan(m, n, k, dtype=dtype, kernel="mma", device=H200, geometry=geo)
        log.clear()
        wgmma.run(cp, plan, A, B, out)
        got, ref = np.asarray(out, np.float64), a.astype(np.float64) @ b
        assert np.isfinite(got).all(), (m, n, k)
        if k:
            err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
            assert 1e-6 < err < 2e-3, (m, n, k, err)
            assert log[-1] == ("wgmma_gemm" if dtype == "float32" else "wgmma_gemm_h")
        else:
            assert not got.any() and not log
        if layout == "out_view":  # nothing written beside the view
            assert (
                np.isnan(np.asarray(big)[:, 0]).all()
                and np.isnan(np.asarray(big)[:, n + 1 :]).all()
            )


def test_wgmma_host_refuses_other_devices(fake_cupy):
    cp, _ = fake_cupy
    cp.cuda.Device = lambda i=0: types.SimpleNamespace(
        compute_capability="80", attributes={"MultiProcessorCount": 108}
    )
    plan = make_plan(64, 64, 64, dtype="float32", kernel="mma", device=H200, geometry=TF32)
    x = dev(np.ones((64, 64), np.float32))
    with pytest.raises(ValueError, match="compute capability 9.0"):
        wgmma.run(cp, replace(plan), x, x, dev(np.empty((64, 64), np.float32)))
