"""The small-grid rule (issue 11): a register tile whose grid leaves SMs idle is halved."""

from __future__ import annotations

from dataclasses import replace

import pytest

import tiledmm
from tiledmm import Geometry, dispatch, shapefit
from tiledmm.device import reference_h200

REG = (("pad", 4), ("stages", 2), ("use_local", 1), ("vm", 4), ("vn", 4))
BIG = Geometry((128, 128, 16), (8, 8), REG, source="test")


@pytest.mark.parametrize(
    ("m", "n", "batch", "halved"),
    [(1024, 1024, 1, True), (1000, 3000, 1, True), (257, 4097, 1, True),
     (2048, 2048, 1, False), (4095, 4095, 1, False), (512, 512, 32, False),
     (512, 512, 2, True)],
)  # fmt: skip
def test_halved_below_one_and_a_half_blocks_per_sm(m, n, batch, halved):
    g = shapefit.fit_grid(BIG, m, n, 132, batch)
    blocks = -(-m // 128) * -(-n // 128) * batch
    assert (blocks < 1.5 * 132) == halved
    if halved:
        assert g.block_tile == (128, 64, 16) and g.thread_tile == (8, 4)
        assert dict(g.options)["vn"] == 4 and "halved to 128x64" in g.source
    else:
        assert g == BIG


def test_left_alone_when_not_the_shared_register_tile():
    narrow = Geometry((128, 64, 16), (8, 4), REG)
    split = replace(BIG, options=tuple(sorted({**dict(REG), "split_k": 4}.items())))
    numba_like = Geometry((128, 128, 8), (8, 8), (("layout", "strided"),))
    for g in (narrow, split, numba_like):
        assert shapefit.fit_grid(g, 64, 64, 132) == g


def test_vector_width_follows_the_halved_thread_tile():
    g = Geometry((128, 128, 16), (8, 4), (("use_local", 1), ("vm", 4), ("vn", 4)))
    h = shapefit.fit_grid(g, 256, 256, 132)
    assert h.thread_tile == (8, 2) and dict(h.options)["vn"] == 2


def test_halved_plan_is_valid_on_the_h200():
    dev = reference_h200()
    g = shapefit.fit_grid(BIG, 1024, 1024, dev.compute_units)
    plan = tiledmm.make_plan(1024, 1024, 1024, dtype="float32", kernel="register",
                             device=dev, geometry=g, backend="cupy")  # fmt: skip
    assert plan.block_tile == (128, 64, 16) and plan.grid[0] * plan.grid[1] == 128


def test_cpu_plans_keep_their_tiles():
    """The rule is measured on GPUs only: CPU backends never see it."""
    be = tiledmm.get_backend("numpy")
    p = dispatch.plan_for(be, 64, 64, 64, "float32", "register")
    assert "halved" not in p.geometry_source


def test_skinny_tiles_turn_to_the_short_side():
    tall = Geometry((64, 32, 16), (4, 4), (("pad", 4), ("split_k", "auto"), ("vm", 4), ("vn", 2)))
    wide = shapefit.orient(tall, 16, 8192)  # M short: the narrow side goes along M
    assert wide.block_tile == (32, 64, 16) and dict(wide.options)["vm"] == 2
    assert dict(wide.options)["vn"] == 4 and "transposed" in wide.source
    assert shapefit.orient(tall, 4096, 32) == tall  # N short: already narrow along N
    assert shapefit.orient(BIG, 16, 8192) == BIG  # square tiles have no orientation
    numba_like = Geometry((64, 32, 8), (4, 4), (("layout", "strided"),))
    assert shapefit.orient(numba_like, 16, 8192) == numba_like


def test_oriented_skinny_plan_is_valid():
    dev = reference_h200()
    g = shapefit.orient(Geometry((64, 32, 16), (4, 4), REG), 16, 8192)
    plan = tiledmm.make_plan(16, 8192, 8192, dtype="float32", kernel="register", device=dev,
                             geometry=g, backend="cupy")  # fmt: skip
    assert plan.block_tile == (32, 64, 16) and plan.grid == (128, 1)


def test_vectors_take_the_gemv_path_in_every_dtype():
    """A vector product reads its matrix once: the naive family's gemv path, not a tile padded
    to a block (float64 without measurements used to climb the ladder to mma: 0.12 of DRAM)."""
    from tiledmm_backends import kernels as K

    class SharedSourceH200(K.SharedSourceTables, tiledmm.Backend):
        name, kernels = "shared-source-h200", ("naive", "tiled", "register", "mma")
        dtypes = ("float32", "float64")

        def device(self):
            return reference_h200()

        def device_key(self):
            return "shared-source-h200 (test)"

        def run(self, plan, a, b, out):
            raise AssertionError("planning only")

    be = SharedSourceH200()
    for dtype in ("float32", "float64"):
        for m, n, k in ((4096, 1, 4096), (1, 8192, 8192)):
            p = dispatch.plan_for(be, m, n, k, dtype)
            assert p.kernel == "naive" and p.options.get("gemv") == 1, (dtype, m, n, p)
        assert dispatch.plan_for(be, 4096, 4096, 4096, dtype).kernel != "naive"
