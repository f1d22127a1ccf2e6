"""The planner's formulas against the seed articles' values, and its limits and errors."""

from __future__ import annotations

import math

import pytest

import tiledmm
from tiledmm import DeviceSpec, Geometry, PlanError, make_plan

H200_LIKE = DeviceSpec(
    name="test-gpu",
    kind="gpu",
    compute_units=132,
    warp_size=32,
    max_threads_per_block=1024,
    max_threads_per_unit=2048,
    max_blocks_per_unit=32,
    max_shared_per_block=227 * 1024,
    shared_per_unit=228 * 1024,
    registers_per_unit=65536,
    max_registers_per_thread=255,
    peak_flops=(("float32", 67e12), ("float64", 34e12)),
    bandwidth=4.1e12,
    launch_overhead=5e-6,
)


def gplan(m, n, k, kernel, block, thread=(1, 1), dtype="float32", device=H200_LIKE, **kw):
    return make_plan(
        m,
        n,
        k,
        dtype=dtype,
        kernel=kernel,
        device=device,
        geometry=Geometry(block, thread, **kw),
    )


@pytest.mark.parametrize("dtype, expected", [("float32", 0.25), ("float64", 0.125)])
def test_naive_intensity(dtype, expected):
    assert gplan(512, 512, 512, "naive", (16, 16, 1), dtype=dtype).intensity == expected


@pytest.mark.parametrize("tile, ai", [(16, 4), (32, 8), (64, 16), (128, 32)])
@pytest.mark.parametrize("dtype, scale", [("float32", 1.0), ("float64", 0.5)])
def test_block_tile_intensity(tile, ai, dtype, scale):
    kernel, thread = ("tiled", (1, 1)) if tile <= 32 else ("register", (8, 8))
    p = gplan(1024, 1024, 1024, kernel, (tile, tile, 8), thread, dtype=dtype)
    assert p.intensity == pytest.approx(ai * scale)
    assert p.intensity == pytest.approx(tile * tile / (2 * (tile + tile)) * scale)


def test_padding_65_cubed_on_32_tiles():
    p = gplan(65, 65, 65, "tiled", (32, 32, 32))
    assert p.padded_shape == (96, 96, 96)
    assert p.grid == (3, 3)
    assert p.padding_waste == pytest.approx(1 - 65**3 / 96**3)
    assert p.flops == 2 * 65**3


def test_non_square_grid_and_naive_k_unpadded():
    p = gplan(100, 300, 77, "naive", (16, 32, 1))
    assert p.grid == (math.ceil(300 / 32), math.ceil(100 / 16))
    assert p.padded_shape == (112, 320, 77)
    assert p.block_tile == (16, 32, 1)


def test_threads_and_shared_bytes():
    p = gplan(4096, 4096, 4096, "register", (128, 128, 8), (8, 8))
    assert p.threads_per_block == 256
    assert p.shared_bytes == (128 * 8 + 8 * 128) * 4
    assert p.bound == "compute"
    assert p.padding_waste == 0


def test_naive_is_memory_bound_and_prediction_is_roofline():
    p = gplan(4096, 4096, 4096, "naive", (16, 16, 1))
    assert p.bound == "memory"
    expected = H200_LIKE.launch_overhead + p.global_bytes / H200_LIKE.bandwidth
    assert p.predicted_seconds == pytest.approx(expected)


def test_occupancy_limited_by_shared_memory():
    # 2 x (128x64 + 64x128) x 4 B = 128 KiB per block: only one block fits in 228 KiB.
    p = gplan(4096, 4096, 4096, "register", (128, 128, 64), (8, 8), options=(("stages", 2),))
    assert p.shared_bytes == 128 * 1024
    assert p.occupancy.blocks_per_unit == 1
    assert p.occupancy.limiter == "shared memory"


def test_occupancy_limited_by_registers():
    p = gplan(4096, 4096, 4096, "register", (128, 128, 8), (8, 8), registers=128)
    assert p.occupancy.limiter == "registers"
    assert p.occupancy.blocks_per_unit == 65536 // (128 * 256)


def test_wave_quantization():
    # 133 blocks of 1024 threads on 132 units holding 2 each: one wave, half empty.
    p = gplan(16 * 133, 64, 64, "tiled", (16, 64, 16))
    assert p.grid == (1, 133)
    assert p.occupancy.waves == 1
    assert p.occupancy.wave_efficiency == pytest.approx(133 / 264)


@pytest.mark.parametrize(
    "block, thread, words",
    [
        ((64, 64, 64), (1, 1), "threads per block"),
        ((256, 256, 128), (8, 8), "shared memory"),
        ((128, 128, 8), (16, 16), "registers"),
        ((100, 128, 8), (8, 8), "not a multiple"),
        ((0, 16, 16), (1, 1), "positive"),
    ],
)
def test_impossible_tiles_are_rejected_clearly(block, thread, words):
    kernel = "tiled" if thread == (1, 1) else "register"
    with pytest.raises(PlanError, match=words):
        gplan(1024, 1024, 1024, kernel, block, thread)


def test_cpu_tiles_must_fit_the_cache():
    cpu = DeviceSpec(
        name="cpu",
        kind="cpu",
        max_threads_per_block=4096,
        max_shared_per_block=512 * 1024,
        caches=(("L1", 32768), ("L2", 512 * 1024)),
    )
    with pytest.raises(PlanError, match=r"cache \(L2\)"):
        gplan(2048, 2048, 2048, "register", (512, 512, 256), (8, 8), device=cpu)


def test_bad_requests():
    with pytest.raises(PlanError, match="unknown kernel"):
        make_plan(4, 4, 4, dtype="float32", kernel="warp", device=H200_LIKE)
    with pytest.raises(PlanError, match="non-negative"):
        make_plan(-1, 4, 4, dtype="float32", kernel="naive", device=H200_LIKE)
    with pytest.raises(PlanError, match="thread_tile"):
        gplan(64, 64, 64, "tiled", (16, 16, 16), (2, 2))


def test_empty_problem_plans():
    p = gplan(0, 5, 7, "tiled", (16, 16, 16))
    assert p.grid[1] == 0 and p.flops == 0 and p.padding_waste == 0


def test_plan_str_explains():
    text = str(gplan(65, 65, 65, "register", (32, 32, 8), (4, 4)))
    for words in (
        "register kernel",
        "block tile 32x32x8",
        "4x4 micro-tile",
        "padding",
        "arithmetic intensity",
        "occupancy",
        "roofline",
        "predicted",
        "ceilings",
    ):
        assert words in text


def test_public_plan_on_numpy_backend():
    p = tiledmm.plan(65, 65, 65, backend="numpy", kernel="tiled", block_tile=(32, 32, 32))
    assert p.backend == "numpy" and p.padded_shape == (96, 96, 96)
    assert p.device.kind == "cpu"
    assert "estimate" in p.device.ceilings_source or "measured" in p.device.ceilings_source
    d = p.to_dict()
    for field in (
        "backend",
        "kernel",
        "block_tile",
        "thread_tile",
        "threads_per_block",
        "grid",
        "padded_shape",
        "padding_waste",
        "flops",
        "global_bytes",
        "intensity",
        "shared_bytes",
        "bound",
        "predicted_seconds",
        "occupancy",
        "device",
    ):
        assert field in d


def test_auto_kernel_prefers_register_for_large_problems():
    assert tiledmm.plan(2048, 2048, 2048, backend="numpy").kernel == "register"


def test_unknown_backend_message():
    with pytest.raises(ValueError, match="unknown backend 'nope'"):
        tiledmm.plan(8, 8, 8, backend="nope")


# --------------------------------------------------------------- the hierarchy on new geometries

from tiledmm.device.nvidia import reference_h200  # noqa: E402

REF = reference_h200()
_REG = (("vm", 4), ("vn", 4), ("stages", 2), ("pad", 4))


def hplan(m, n, k, kernel, block, thread=(1, 1), dtype="float32", **opts):
    geo = Geometry(block, thread, (*(_REG if kernel == "register" else ()), *opts.items()))
    return make_plan(m, n, k, dtype=dtype, kernel=kernel, device=REF, geometry=geo,
                     backend="cupy")  # fmt: skip


def test_split_k_fills_a_small_grid_and_pays_a_reduction():
    """1024x1024 outputs in 128x128 tiles are 64 blocks for 132 SMs: 4 K slices make 256 blocks
    (the same FMAs, faster), and the reduction (4 slices read, C written) is serial time."""
    one = hplan(1024, 1024, 8192, "register", (128, 128, 16), (8, 8))
    four = hplan(1024, 1024, 8192, "register", (128, 128, 16), (8, 8), split_k=4)
    assert four.level("compute").amount == one.level("compute").amount
    assert four.level("compute").seconds < 0.6 * one.level("compute").seconds
    assert four.predicted_seconds < one.predicted_seconds
    red = four.level("issue")
    assert "split-K reduction 20.97 MB" in red.note and red.serial > REF.launch_overhead
    assert all(lv.serial == red.serial for lv in four.levels)  # every level waits for it
    # the 16.8 MB workspace stays in the L2: DRAM sees C once, as without split-K
    assert dict(four.level("DRAM").parts)["written"] == dict(one.level("DRAM").parts)["written"]


def test_split_k_workspace_beyond_the_l2_goes_through_dram():
    small = hplan(4096, 4096, 4096, "register", (128, 128, 16), (8, 8))
    split = hplan(4096, 4096, 4096, "register", (128, 128, 16), (8, 8), split_k=8)
    ws = 8 * 4096 * 4096 * 4
    extra = split.level("DRAM").amount - small.level("DRAM").amount
    assert extra == pytest.approx(2 * ws, rel=0.01)  # written, then read back by the reduction


@pytest.mark.parametrize("m, n", [(1, 8192), (8192, 1)])
def test_gemv_reads_the_matrix_once_and_is_dram_bound(m, n):
    """The vector path (gemv=1, ks items per output): the long operand streamed once from
    DRAM, either orientation; DRAM binds."""
    p = hplan(m, n, 8192, "naive", (1, 32, 1), gemv=1, ks=16)
    matrix = 8192 * 8192 * 4
    read = dict(p.level("DRAM").parts)["read"]
    assert matrix <= read <= matrix * 1.01
    assert p.bound == "DRAM"
    assert p.level("compute").amount == pytest.approx(2 * m * n * 8192)


def test_gemv_skinny_groups_share_the_long_operand_in_l2():
    """4 outputs of the short side per group: the FLOPs are 4 per long element, the DRAM bytes
    still the matrix once."""
    p = hplan(4, 8192, 8192, "naive", (4, 32, 1), gemv=1, ks=8)
    assert p.level("compute").amount == pytest.approx(2 * 4 * 8192 * 8192)
    assert dict(p.level("DRAM").parts)["read"] == pytest.approx((4 + 8192) * 8192 * 4)


def test_batched_launch_multiplies_work_and_fills_the_device():
    """A batch of 8 small products in one launch: 8x the FLOPs, bytes and blocks; 16 blocks
    each leave most SMs idle, so 8 of them take about the time of one, not 8x."""
    one = hplan(512, 512, 512, "register", (128, 128, 16), (8, 8))
    eight = hplan(512, 512, 512, "register", (128, 128, 16), (8, 8), batch=8)
    for name in ("compute", "shared memory", "L2", "DRAM", "issue"):
        assert eight.level(name).amount == pytest.approx(8 * one.level(name).amount), name
    assert eight.predicted_seconds < 1.5 * one.predicted_seconds
    full = hplan(4096, 4096, 512, "register", (128, 128, 16), (8, 8))
    full8 = hplan(4096, 4096, 512, "register", (128, 128, 16), (8, 8), batch=8)
    assert full8.predicted_seconds == pytest.approx(8 * full.predicted_seconds, rel=0.1)


def test_batch_plan_counts_the_whole_launch():
    """A batch of small products fills waves that one product leaves empty: the whole launch
    is predicted above one product and under the batch times one product; the same tiles."""
    from tiledmm.planner.make import batch_plan

    geo = Geometry((128, 64, 16), (8, 4), (("stages", 2), ("use_local", 1), ("vm", 4), ("vn", 4)))
    one = make_plan(512, 512, 512, dtype="float32", kernel="register", device=REF, geometry=geo)
    assert batch_plan(one, 1) is one
    whole = batch_plan(one, 32)
    assert whole.flops == 32 * one.flops and whole.block_tile == one.block_tile
    assert one.predicted_seconds < whole.predicted_seconds < 32 * one.predicted_seconds
    odd = make_plan(257, 300, 64, dtype="float32", kernel="register", device=REF, geometry=geo)
    assert batch_plan(odd, 4).padded_shape[0] == 4 * odd.padded_shape[0]  # each padded alone


def test_register_shared_rows_count_their_padding():
    """register.cl's shared rows are BM + PAD and BN + PAD long: a 64x128x32 double-buffered
    float32 tile fits 48 KiB exactly without padding and is refused with pad 4 (50 KiB; ptxas
    refused eight such candidates in an H100 tune, session 24), the message naming pad=0."""
    from tiledmm.device.nvidia import reference_h200
    from tiledmm.planner.make import make_plan

    dev = reference_h200()

    def plan(pad):
        geo = tiledmm.Geometry((64, 128, 32), (8, 8), (("pad", pad), ("stages", 2)))
        return make_plan(4096, 4096, 4096, dtype="float32", kernel="register", device=dev,
                         backend="cupy", geometry=geo)  # fmt: skip

    assert plan(0).shared_bytes == 48 * 1024
    with pytest.raises(tiledmm.PlanError, match="pad=0"):
        plan(4)
