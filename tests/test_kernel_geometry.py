"""The geometry database: lookup order, fitting to the device (native vector width, work-group
limit), the tuned H200 entries, and the one NVIDIA description the CUDA backends share."""

from __future__ import annotations

from dataclasses import replace

import pytest
from tiledmm_backends import kernels as K

import tiledmm
from tiledmm import DeviceSpec, Geometry, make_plan
from tiledmm.device import nvidia

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
    assert not K.pad_pays(big, False, False)  # nothing odd: nothing to copy


def test_padding_counts_only_the_odd_operands():
    """The H200 probe's cases (benches/results/logs/h200-pad-probe-s13.txt): 1000x3000x777
    copies only A (7.3 us) and the aligned kernel saves 26 us, so it pads; 257x4097x1031 must
    copy B as well (28 us against 18 saved) and 1009x1013x1019 both (17 against 11): neither."""
    h200 = DeviceSpec(name="h200", kind="gpu", peak_flops=(("float32", 51.3e12),),
                      bandwidth=4.26e12)  # fmt: skip
    geo = Geometry((128, 64, 16), (8, 4), (("use_local", 1),))

    def pays(m, n, k):
        plan = make_plan(m, n, k, dtype="float32", kernel="register", device=h200, geometry=geo)
        return K.pad_pays(plan, k % 4 != 0, n % 4 != 0)

    assert pays(1000, 3000, 777) and pays(2047, 2049, 2051) and pays(4095, 4095, 4095)
    assert not pays(257, 4097, 1031) and not pays(1009, 1013, 1019) and not pays(511, 513, 515)
    assert [K.aligned_ld(c, 4) for c in (1, 4, 4095, 4096)] == [4, 4, 4096, 4096]


H200 = DeviceSpec(name="NVIDIA H200", kind="gpu", max_threads_per_block=1024)


def test_lookup_order_device_then_backend_then_kind():
    other = replace(H200, name="Some other GPU")
    tuned = K.load_geometry("register", "float32", H200, backend="cupy")
    assert tuned.block_tile == (128, 128, 16) and dict(tuned.options)["stages"] == 2
    assert "tuned on NVIDIA H200" in tuned.source
    default = K.load_geometry("register", "float32", other, backend="cupy")
    assert default.block_tile == (128, 128, 16) and dict(default.options)["group_m"] == 1
    assert default.source.startswith("GPU default") and "H200" not in default.source[:40]
    # a per-backend override: OpenCL's register float32 on the H200 prefetches fragments
    shared = K.load_geometry("register", "float32", H200, backend="cupy")
    ocl = K.load_geometry("register", "float32", H200, backend="opencl")
    assert "prefetch" not in dict(shared.options) and dict(ocl.options)["prefetch"] == "lone"
    # numba-cuda's kernels have their own entries in the same database
    nb = K.load_geometry("register", "float32", H200, kernels="numba")
    assert nb.block_tile == (128, 128, 8) and dict(nb.options)["unroll_k"] is True
    # float32 tensor-core tiles (TF32) exist, but the TF32 request only ever comes from the caller
    tf32 = K.load_geometry("mma", "float32", H200)
    assert tf32 is not None and "precision" not in dict(tf32.options)


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
        meas = e.get("measured", ())  # a list of records, or one record of the entry's backend
        for rec in [meas] if isinstance(meas, dict) else meas:
            assert rec["gflops"] > 0 and rec["date"] and rec.get("backend", e.get("backend"))


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


def test_nvidia_bandwidth_without_a_memory_clock():
    """OpenCL reports no memory clock: known parts get the data sheet's bandwidth (the CUDA
    backends' figure for the same GPU, within 1%), unknown ones the caller's guess."""
    base = dict(sms=132, clock_khz=1980000)
    mem = dict(mem_clock_khz=3134312, bus_bits=6144)  # what CUDA reports: 4.81 TB/s
    cuda = nvidia.device_spec("NVIDIA H200", (9, 0), base | mem, launch_overhead=5e-6)
    ocl = nvidia.device_spec("NVIDIA H200", (9, 0), base | {"bandwidth": 3e12},
                             launch_overhead=8e-6)  # fmt: skip
    assert abs(ocl.bandwidth / cuda.bandwidth - 1) < 0.01 and "data sheet" in ocl.ceilings_source
    other = nvidia.device_spec("NVIDIA Future GPU", (9, 0), dict(sms=1, clock_khz=1e6,
                               bandwidth=3e12), launch_overhead=8e-6)  # fmt: skip
    assert other.bandwidth == 3e12 and "guessed" in other.ceilings_source
    assert nvidia.known_bandwidth("NVIDIA H100 PCIe") == 2.0e12  # the longer name first


def _db(tmp_path, entries):
    import json

    p = tmp_path / "geometry.json"
    p.write_text(json.dumps({"format": 1, "entries": entries}))
    return p


_SQ = {"kernels": "gemm-c", "device": "NVIDIA H200", "backend": "cupy", "dtype": "float32",
       "family": "register", "block_tile": [128, 128, 16], "thread_tile": [8, 8],
       "options": {"use_local": 1}}  # fmt: skip


def test_device_entry_with_the_class_beats_the_one_without(tmp_path):
    vec = dict(_SQ, shape_class="vector", block_tile=[16, 64, 16], thread_tile=[2, 4],
               measured={"gflops": 260.0, "date": "2026-11-30"})  # fmt: skip
    kind = {"kernels": "gemm-c", "kind": "gpu", "family": "register", "shape_class": "vector",
            "block_tile": [32, 32, 8], "thread_tile": [4, 4]}  # fmt: skip
    for i, order in enumerate(([_SQ, vec, kind], [kind, vec, _SQ])):  # not the file's order
        (tmp_path / str(i)).mkdir()
        path = _db(tmp_path / str(i), order)
        got = K.load_geometry("register", "float32", H200, backend="cupy",
                              shape_class="vector", path=path)  # fmt: skip
        assert got.block_tile == (16, 64, 16)
        plain = K.load_geometry("register", "float32", H200, backend="cupy", path=path)
        assert plain.block_tile == (128, 128, 16)  # no class asked: the classless entry
        # another class of the same device: the classless device entry, not the vector one
        odd = K.load_geometry("register", "float32", H200, backend="cupy", shape_class="odd",
                              path=path)  # fmt: skip
        assert odd.block_tile == (128, 128, 16)


def test_shipped_gflops_reads_exact_class_and_backend(tmp_path):
    from tiledmm_backends.kernels.shapes import shipped_gflops

    path = _db(tmp_path, [
        _SQ,  # no class: never a class measurement
        dict(_SQ, family="naive", shape_class="vector", block_tile=[1, 16, 1],
             options={"gemv": 1, "ks": 32}, measured={"gflops": 1500.0, "date": "d"}),
        {k: v for k, v in _SQ.items() if k != "backend"} | {
            "shape_class": "vector", "measured": [
                {"backend": "opencl", "gflops": 300.0, "date": "d"},
                {"backend": "cupy", "gflops": 250.0, "date": "d"}]},
    ])  # fmt: skip
    got = {(f, b, c): shipped_gflops(f, "float32", H200, b, c, path)
           for f in ("naive", "register") for b in ("cupy", "opencl")
           for c in ("vector", "square")}  # fmt: skip
    assert got[("naive", "cupy", "vector")] == 1500.0
    assert got[("naive", "opencl", "vector")] is None  # a cupy entry says nothing for opencl
    assert got[("register", "cupy", "vector")] == 250.0
    assert got[("register", "opencl", "vector")] == 300.0
    assert got[("register", "cupy", "square")] is None  # the classless entry is no class
    other = replace(H200, name="NVIDIA H100")
    assert shipped_gflops("naive", "float32", other, "cupy", "vector", path) is None


class _Measured(tiledmm.Backend):
    """A backend whose shipped table measured some families per shape class."""

    name, kernels = "fake-measured", ("naive", "tiled", "register")
    table: dict = {}

    def measured_gflops(self, kernel, dtype, device, shape_class):
        return self.table.get((kernel, shape_class))

    def run(self, plan, a, b, out):
        out[...] = a @ b


def test_auto_picks_the_measured_fastest_family_per_class(tmp_path, monkeypatch):
    from tiledmm.core import dispatch, tuning

    monkeypatch.setenv("TILEDMM_CACHE_DIR", str(tmp_path))
    be = _Measured()
    be.table = {}
    ladder = {s: dispatch.auto_kernel(be, *s, "float32") for s in
              [(1, 4096, 4096), (1000, 1000, 777), (512, 512, 512)]}  # fmt: skip
    be.table = {("naive", "vector"): 1500.0, ("register", "vector"): 260.0,
                ("register", "batched"): 20000.0, ("tiled", "batched"): 9000.0,
                ("register", "odd"): 100.0}  # fmt: skip
    assert dispatch.auto_kernel(be, 1, 4096, 4096, "float32") == "naive"
    assert dispatch.auto_kernel(be, 4096, 1, 4096, "float32") == "naive"
    assert dispatch.auto_kernel(be, 512, 512, 512, "float32", batch=32) == "register"
    be.table[("tiled", "batched")] = 30000.0
    assert dispatch.auto_kernel(be, 512, 512, 512, "float32", batch=32) == "tiled"
    # one family measured (odd) or none (square): the old rule, unchanged
    assert dispatch.auto_kernel(be, 1000, 1000, 777, "float32") == ladder[(1000, 1000, 777)]
    assert dispatch.auto_kernel(be, 512, 512, 512, "float32") == ladder[(512, 512, 512)]
    # the user layer's measurement of a family comes before the shipped one
    dev = be.device()
    tuning.save_entries([dict(device=dev.name, backend=be.name, dtype="float32", family="register",
                              shape_class="vector", block_tile=[16, 64, 16],
                              measured=dict(gflops=5000.0, date="2026-11-30"))])  # fmt: skip
    assert tuning.measured_families(be.name, "float32", dev, "vector", be) == {
        "register": 5000.0, "naive": 1500.0}  # fmt: skip
    assert dispatch.auto_kernel(be, 1, 4096, 4096, "float32") == "register"
    monkeypatch.setenv(tuning.IGNORE_SHIPPED, "1")  # shipped numbers hidden: user layer only
    assert tuning.measured_families(be.name, "float32", dev, "vector", be) == {"register": 5000.0}


def test_auto_split_from_blocks_and_sms():
    from tiledmm.planner.shapefit import auto_split, resolve_split

    assert auto_split(64, 4096, 4096, (64, 64, 16), 132) == 8  # 64 blocks -> 512
    assert auto_split(16, 8192, 8192, (64, 64, 16), 132) == 4
    assert auto_split(1024, 1024, 1024, (128, 128, 16), 132) == 4  # slices keep 256 of K
    assert auto_split(4096, 4096, 4096, (128, 128, 16), 132) == 1  # the grid is full
    assert auto_split(64, 64, 100000, (64, 64, 16), 132) == 16  # at most 16
    assert auto_split(8, 8, 300, (64, 64, 16), 132) == 1  # K too short to split
    assert auto_split(512, 512, 512, (128, 64, 16), 132, batch=32) == 1
    g = Geometry((64, 64, 16), (4, 4), (("split_k", "auto"), ("use_local", 1)))
    assert dict(resolve_split(g, 64, 4096, 4096, 132).options)["split_k"] == 8
    plain = Geometry((64, 64, 16), (4, 4), (("use_local", 1),))
    assert resolve_split(plain, 64, 4096, 4096, 132) is plain


def test_every_shape_candidate_compiles_once_resolved():
    from types import SimpleNamespace

    from tiledmm_backends.kernels import shapes

    from tiledmm.planner.shapefit import resolve_split

    probe = {"vector": (1, 4096, 4096), "skinny_mn": (64, 4096, 4096)}
    for cls in tiledmm.core.tuning_check.SHAPE_CLASSES:
        m, n, k = probe.get(cls, (1024, 1024, 1024))
        for fam in tiledmm.KERNEL_FAMILIES:
            for dt in ("float32", "float64"):
                for g in shapes.candidates(fam, dt, cls):
                    g = resolve_split(g, m, n, k, 132)
                    (bm, bn, _), (tm, tn) = g.block_tile, g.thread_tile
                    o = dict(g.options)
                    threads = bn * o["ks"] if o.get("gemv") else (bm // tm) * (bn // tn)
                    plan = SimpleNamespace(kernel=fam, dtype=dt, block_tile=g.block_tile,
                                           thread_tile=g.thread_tile, options=o, m=m, n=n,
                                           threads_per_block=threads)  # fmt: skip
                    d = K.defines(plan, True)
                    assert d["SPLIT_K"] >= 1 and d["THREADS"] <= 1024, (cls, g)


def test_write_geometry_keeps_the_shipped_format(tmp_path):
    """Rewriting the shipped database with its own entries changes no byte (one entry per
    line), and a changed entry is read back."""
    p = tmp_path / "geometry.json"
    p.write_bytes(K.DATABASE.read_bytes())
    entries = K.geometry_entries(p)
    K.write_geometry(p, entries)
    assert p.read_bytes() == K.DATABASE.read_bytes()
    entries[0] = dict(entries[0], block_tile=[8, 8, 1])
    K.write_geometry(p, entries)
    assert K.geometry_entries(p)[0]["block_tile"] == [8, 8, 1]
