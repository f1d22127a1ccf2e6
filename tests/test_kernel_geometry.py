"""The geometry database: lookup order, fitting to the device (native vector width, work-group
limit), the tuned H200 entries, and the one NVIDIA description the CUDA backends share."""

from __future__ import annotations

from dataclasses import replace

import pytest
from tiledmm_backends import kernels as K
from tiledmm_backends import nvidia

import tiledmm
from tiledmm import DeviceSpec, Geometry, make_plan

CPU = DeviceSpec(name="test cpu", kind="cpu", max_threads_per_block=4096, simd_bytes=32)


@pytest.mark.parametrize(
    ("simd_bytes", "dtype", "lanes"),
    [(16, "float32", 4), (32, "float32", 8), (64, "float32", 16), (32, "float64", 4)]
    + [(16, "float64", 2)],
)
def test_simd_options_follow_the_vector_width(simd_bytes, dtype, lanes):
    dev = replace(CPU, simd_bytes=simd_bytes)
    tiled = dict(K.load_geometry("tiled", dtype, dev).options)
    register = dict(K.load_geometry("register", dtype, dev).options)
    assert tiled["split"] == lanes and register["cpu_vec"] == lanes
    for kernel in ("tiled", "register"):  # the fitted tiles pass the sources' own checks
        geo = K.load_geometry(kernel, dtype, dev)
        K.defines(make_plan(100, 100, 100, dtype=dtype, kernel=kernel, device=dev, geometry=geo))


@pytest.mark.parametrize("limit", [1024, 256, 64, 1])
def test_one_output_per_item_groups_fit_the_work_group_limit(limit):
    dev = replace(CPU, max_threads_per_block=limit)
    for kernel in ("naive", "tiled"):
        geo = K.load_geometry(kernel, "float32", dev)
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


H200 = DeviceSpec(name="NVIDIA H200", kind="gpu", max_threads_per_block=1024)


def test_lookup_order_device_then_backend_then_kind():
    other = replace(H200, name="Some other GPU")
    tuned = K.load_geometry("register", "float32", H200, backend="cupy")
    assert tuned.block_tile == (128, 128, 16) and dict(tuned.options)["stages"] == 2
    assert "tuned on NVIDIA H200" in tuned.source
    default = K.load_geometry("register", "float32", other, backend="cupy")
    assert default.block_tile == (128, 128, 8) and default.source == "default for gpu"
    # the one per-backend override: OpenCL's naive float32 on the H200 ran the GPU default
    assert K.load_geometry("naive", "float32", H200, backend="cupy").block_tile == (2, 128, 1)
    assert K.load_geometry("naive", "float32", H200, backend="opencl").block_tile == (4, 64, 1)
    # numba-cuda's kernels have their own entries in the same database
    nb = K.load_geometry("register", "float32", H200, kernels="numba")
    assert nb.block_tile == (128, 128, 8) and dict(nb.options)["unroll_k"] is True
    assert K.load_geometry("mma", "float32", H200) is None


def test_database_entries_are_well_formed():
    import json

    db = json.loads(K.DATABASE.read_text())
    keys = set()
    for e in db["entries"]:
        assert e["kernels"] in ("gemm-c", "numba") and e["family"] in tiledmm.KERNEL_FAMILIES
        assert ("device" in e) != ("kind" in e), e
        assert len(e["block_tile"]) == 3 and len(e.get("thread_tile", (1, 1))) == 2
        key = tuple(e.get(f) for f in ("kernels", "device", "kind", "backend", "shape_class",
                                        "dtype", "family"))  # fmt: skip
        assert key not in keys, f"duplicate entry {key}"
        keys.add(key)
        for rec in e.get("measured", ()):
            assert rec["gflops"] > 0 and rec["date"] and rec["backend"]


@pytest.mark.parametrize(
    ("cc", "fp32", "fp64"),
    [((7, 5), 64, 2), ((8, 0), 64, 32), ((8, 6), 128, 2), ((8, 9), 128, 2), ((9, 0), 128, 64)]
    + [((10, 0), 128, 64), ((12, 0), 128, 2), ((8, 7), 128, 2)],
)
def test_nvidia_lanes(cc, fp32, fp64):
    assert nvidia.lanes(cc) == (fp32, fp64)


def test_nvidia_spec_h200_peak():
    a = dict(sms=132, clock_khz=1980000, mem_clock_khz=3201000, bus_bits=6144)
    spec = nvidia.device_spec("NVIDIA H200", (9, 0), a, launch_overhead=5e-6)
    assert 66e12 < spec.peak("float32") < 68e12 and spec.peak("float64") == spec.peak("float32") / 2
    t4 = nvidia.device_spec("Tesla T4", (7, 5), dict(a, sms=40), launch_overhead=5e-6)
    assert t4.peak("float32") / t4.peak("float64") == 32
