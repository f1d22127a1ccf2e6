"""The shared kernel tables are fitted to the device: native vector width, work-group limit."""

from __future__ import annotations

from dataclasses import replace

import pytest
from tiledmm_backends import kernels as K
from tiledmm_backends.opencl import GEOMETRY

from tiledmm import DeviceSpec, Geometry, make_plan

CPU = DeviceSpec(name="test cpu", kind="cpu", max_threads_per_block=4096, simd_bytes=32)


@pytest.mark.parametrize(
    ("simd_bytes", "dtype", "lanes"),
    [(16, "float32", 4), (32, "float32", 8), (64, "float32", 16), (32, "float64", 4)]
    + [(16, "float64", 2)],
)
def test_simd_options_follow_the_vector_width(simd_bytes, dtype, lanes):
    dev = replace(CPU, simd_bytes=simd_bytes)
    tiled = dict(K.load_geometry(GEOMETRY, "tiled", dtype, dev).options)
    register = dict(K.load_geometry(GEOMETRY, "register", dtype, dev).options)
    assert tiled["split"] == lanes and register["cpu_vec"] == lanes
    for kernel in ("tiled", "register"):  # the fitted tiles pass the sources' own checks
        geo = K.load_geometry(GEOMETRY, kernel, dtype, dev)
        K.defines(make_plan(100, 100, 100, dtype=dtype, kernel=kernel, device=dev, geometry=geo))


@pytest.mark.parametrize("limit", [1024, 256, 64, 1])
def test_one_output_per_item_groups_fit_the_work_group_limit(limit):
    dev = replace(CPU, max_threads_per_block=limit)
    for kernel in ("naive", "tiled"):
        geo = K.load_geometry(GEOMETRY, kernel, "float32", dev)
        bm, bn, _ = geo.block_tile
        assert bm * bn <= limit
        plan = make_plan(77, 99, 55, dtype="float32", kernel=kernel, device=dev, geometry=geo)
        assert plan.threads_per_block <= limit


def test_fit_leaves_fitting_geometry_alone():
    geo = Geometry((16, 16, 32), (1, 1), (("split", 4),), source="tuned")
    assert K.fit(geo, "tiled", "float32", CPU) == geo


def test_padding_pays_only_for_large_local_memory_products():
    gpu = DeviceSpec(name="gpu", kind="gpu", peak_flops=(("float32", 50e12),), bandwidth=4e12)
    geo = Geometry((128, 128, 16), (8, 8), (("use_local", 1),))
    big = make_plan(4095, 4095, 4095, dtype="float32", kernel="register", device=gpu, geometry=geo)
    small = make_plan(255, 255, 255, dtype="float32", kernel="register", device=gpu, geometry=geo)
    cpu_kernel = replace(big, options={"use_local": 0})
    assert K.pad_pays(big) and not K.pad_pays(small) and not K.pad_pays(cpu_kernel)
    assert [K.aligned_ld(c, 4) for c in (1, 4, 4095, 4096)] == [4, 4, 4096, 4096]
