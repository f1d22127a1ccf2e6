"""Tensor cores only when they are asked for (issue 14): ``precision="tf32"`` and auto."""

from __future__ import annotations

import numpy as np
import pytest

import tiledmm
from tiledmm import Backend, PlanError
from tiledmm.core import dispatch, registry
from tiledmm.device.nvidia import reference_h200


class FakeH200(Backend):
    """Plans for the reference H200 with every family; runs nothing."""

    name, kernels = "fake-h200", ("naive", "tiled", "register", "mma")
    dtypes = ("float32", "float64")

    def device(self):
        return reference_h200()

    def device_key(self):
        return 0

    def run(self, plan, a, b, out):
        raise AssertionError("planning only")


BE = FakeH200()


def test_float32_never_runs_on_tensor_cores_unless_asked():
    assert dispatch.plan_for(BE, 4096, 4096, 4096, "float32").kernel == "register"
    with pytest.raises(PlanError, match="tf32|TF32"):
        dispatch.plan_for(BE, 4096, 4096, 4096, "float32", "mma")


def test_tf32_request_plans_mma():
    p = dispatch.plan_for(BE, 4096, 4096, 4096, "float32", precision="tf32")
    assert p.kernel == "mma" and dict(p.options)["precision"] == "tf32"
    q = dispatch.plan_for(BE, 4096, 4096, 4096, "float32", "mma", precision="tf32")
    assert q.kernel == "mma"


def test_precision_errors_say_what_to_do():
    with pytest.raises(PlanError, match="kernel 'mma' or 'auto'"):
        dispatch.plan_for(BE, 64, 64, 64, "float32", "register", precision="tf32")
    with pytest.raises(PlanError, match="precision must be"):
        dispatch.plan_for(BE, 64, 64, 64, "float32", precision="fp8")


def test_float64_auto_climbs_to_mma():
    """DMMA's roof (~67 TFLOP/s) is twice the FP64 FMA pipes': auto takes the fourth rung."""
    assert dispatch.plan_for(BE, 4096, 4096, 4096, "float64").kernel == "mma"


def test_public_plan_takes_precision():
    tiledmm.register_backend(BE)
    try:
        p = tiledmm.plan(2048, 2048, 2048, backend=BE.name, precision="tf32")
        assert p.kernel == "mma"
    finally:
        registry.reload()


class Fake16(FakeH200):
    """A host 'GPU' that runs float16 on its tensor-core family (float32 accumulation)."""

    name = "fake-mma16"
    mma_dtypes = ("float64", "float16", "float32")

    def run(self, plan, a, b, out):
        self.kernel = plan.kernel
        out[...] = (a.astype(np.float32) @ b.astype(np.float32)).astype(out.dtype)

    def accepts(self, x):
        return isinstance(x, np.ndarray)


def test_float16_runs_on_mma_with_numpys_result_dtype():
    be = Fake16()
    tiledmm.register_backend(be)
    try:
        rng = np.random.default_rng(1)
        a, b = (rng.random((37, 29)) - 0.5).astype(np.float16), (rng.random((29, 41)) - 0.5)
        b = b.astype(np.float16)
        got = tiledmm.matmul(a, b, backend=be.name)
        assert be.kernel == "mma" and got.dtype == np.float16
        ref = a.astype(np.float64) @ b.astype(np.float64)
        assert np.abs(got - ref).max() <= 1e-2 * np.abs(ref).max()
        with pytest.raises(ValueError, match="tensor cores only"):
            tiledmm.matmul(a, b, backend=be.name, kernel="register")
    finally:
        registry.reload()


def test_matmul_precision_argument():
    a = np.random.default_rng(2).random((8, 8), dtype=np.float32)
    with pytest.raises(ValueError, match="precision must be"):
        tiledmm.matmul(a, a, precision="fp8")
    with pytest.raises(PlanError, match="tensor cores"):  # the NumPy backend has no mma
        tiledmm.matmul(a, a, backend="numpy", precision="tf32")
    be = Fake16()
    tiledmm.register_backend(be)
    try:
        got = tiledmm.matmul(a, a, backend=be.name, precision="tf32")
        assert be.kernel == "mma" and got.dtype == np.float32
        tiledmm.matmul(a, a, backend=be.name)  # IEEE float32: never the tensor cores
        assert be.kernel == "register"
    finally:
        registry.reload()


def test_numpy_float16_still_matches_numpy():
    """Without a tensor-core backend, float16 is numpy's own product."""
    a = np.random.default_rng(3).random((5, 7)).astype(np.float16)
    b = np.random.default_rng(4).random((7, 3)).astype(np.float16)
    np.testing.assert_array_equal(tiledmm.matmul(a, b, backend="numpy"), np.matmul(a, b))
