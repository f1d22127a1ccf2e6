"""Tensor cores only when they are asked for (issue 14): ``precision="tf32"`` and auto."""

from __future__ import annotations

import pytest

import tiledmm
from tiledmm import Backend, PlanError, dispatch, registry
from tiledmm.device import reference_h200


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
