"""numba-cuda per shape (issue 11), without a GPU: the small-grid halving and skinny orientation
of its register tiles (``min_tile``), the plans ``kernel="auto"`` makes on the H200 per shape
class, measurement overruling the ladder, and the generated split-K / gemv sources. The
kernels themselves run under the simulator in test_numba_cuda.py."""

from __future__ import annotations

import json

import pytest
from tiledmm_backends import kernels as K
from tiledmm_backends.kernels import tables
from tiledmm_backends.numba_cuda import NumbaCudaBackend
from tiledmm_backends.numba_cuda.codegen import KernelSpec
from tiledmm_backends.numba_cuda.kernels import source

from tiledmm import Geometry
from tiledmm.core import dispatch
from tiledmm.device.nvidia import reference_h200
from tiledmm.planner import shapefit

NUMBA = (("layout", "strided"), ("min_tile", 32), ("pad", 4), ("stages", 2))
BIG = Geometry((128, 128, 8), (8, 8), NUMBA)


@pytest.mark.parametrize(
    ("m", "n", "k", "tile", "thread"),
    [(256, 256, 256, (32, 32), (2, 2)), (512, 512, 512, (32, 32), (2, 2)),
     (1024, 1024, 1024, (64, 64), (4, 4)), (1000, 3000, 777, (128, 64), (8, 4)),
     (257, 4097, 1031, (64, 64), (4, 4)), (2048, 2048, 2048, (128, 128), (8, 8))],
)  # fmt: skip
def test_min_tile_keeps_halving_while_the_grid_is_small(m, n, k, tile, thread):
    g = shapefit.fit_grid(BIG, m, n, k, reference_h200(), "float32", "numba-cuda")
    assert (g.block_tile[:2], g.thread_tile) == (tile, thread)
    assert (tile[0] // thread[0]) * (tile[1] // thread[1]) == 256  # threads per block kept
    blocks = -(-m // tile[0]) * -(-n // tile[1])
    if tile != (128, 128):
        assert "halved to" in g.source and "vn" not in dict(g.options)
        assert blocks >= 1.5 * 132 or min(tile) == 32  # stopped by the grid or by min_tile


def test_min_tile_floor_and_split_k_are_respected():
    g = shapefit.fit_grid(replace_opts(BIG, min_tile=64), 64, 64, 64, reference_h200())
    assert g.block_tile[:2] == (64, 64)
    split = replace_opts(BIG, split_k=4)
    assert shapefit.fit_grid(split, 64, 64, 64, reference_h200()) == split


def test_orient_turns_numba_tiles_without_vector_widths():
    g = Geometry((32, 128, 8), (4, 8), NUMBA)
    t = shapefit.orient(g, 4096, 32)
    assert (t.block_tile, t.thread_tile) == ((128, 32, 8), (8, 4))
    assert dict(t.options) == dict(NUMBA)
    assert shapefit.orient(g, 64, 4096) == g


def replace_opts(g: Geometry, **kw) -> Geometry:
    return Geometry(g.block_tile, g.thread_tile, tuple(sorted({**dict(g.options), **kw}.items())))


def _h200_backend() -> NumbaCudaBackend:
    """The backend as if on the H200 (no GPU needed: planning only), under its own device key
    so its plans never meet a real device's in dispatch's cache."""
    be = NumbaCudaBackend()
    dev = reference_h200()
    be.device = lambda: dev
    be.device_key = lambda: "reference H200 (test)"
    return be


def test_auto_plans_per_class_on_the_h200():
    be = _h200_backend()

    def plan(m, n, k, batch=1):
        return dispatch.plan_for(be, m, n, k, "float32", "auto", batch=batch)

    for m, n, k in ((64, 4096, 4096), (4096, 32, 4096), (16, 8192, 8192)):
        p = plan(m, n, k)  # skinny: register, short side 32 along the short dimension, split-K
        short = p.block_tile[0] if m < n else p.block_tile[1]
        assert p.kernel == "register" and short == 32 and p.options["split_k"] > 1, p
        blocks = p.grid[0] * p.grid[1] * p.options["split_k"]
        assert blocks >= 2 * 132, p
    for m, n, k in ((1, 8192, 8192), (16384, 1, 16384)):
        p = plan(m, n, k)
        assert p.kernel == "naive" and p.options.get("gemv") == 1, p
    assert plan(4096, 4096, 4096).block_tile == (128, 128, 8)
    assert plan(512, 512, 512, batch=32).block_tile == (128, 128, 8)
    assert plan(1024, 1024, 1024).block_tile == (64, 64, 8)


def test_measurement_overrules_the_ladder(tmp_path, monkeypatch):
    """Shipped numba measurements per class decide ``kernel="auto"`` (the fastest measured)."""
    rows = json.loads(K.DATABASE.read_text())

    def entry(fam: str, gflops: float) -> dict:
        gemv = fam == "naive"
        return {"kernels": "numba", "device": "NVIDIA H200", "dtype": "float32", "family": fam,
                "shape_class": "vector", "block_tile": [1, 16, 1] if gemv else [16, 16, 16],
                "options": {"gemv": 1, "ks": 32} if gemv else {},
                "measured": [{"backend": "numba-cuda", "gflops": gflops}]}  # fmt: skip

    for naive, tiled, want in ((900.0, 160.0, "naive"), (100.0, 160.0, "tiled")):
        db = tmp_path / f"geometry-{want}.json"
        shipped = [(e.get("kernels"), e.get("shape_class")) for e in rows["entries"]]
        base = [e for e, w in zip(rows["entries"], shipped, strict=True)
                if w != ("numba", "vector")]  # fmt: skip
        data = dict(rows, entries=base + [entry("naive", naive), entry("tiled", tiled),
                                          entry("register", 120.0)])  # fmt: skip
        db.write_text(json.dumps(data))
        monkeypatch.setattr(tables, "DATABASE", db)  # read at call time
        dispatch.clear_caches()
        be = _h200_backend()
        assert be.measured_gflops("naive", "float32", be.device(), "vector") == naive
        assert dispatch.plan_for(be, 1, 4096, 4096, "float32", "auto").kernel == want
    dispatch.clear_caches()


def test_generated_sources():
    spec = KernelSpec("register", "float32", 32, 128, 8, 4, 8, split_k=8, stages=2)
    text = source(spec)
    assert spec.name.endswith("_split8") and "k0 = kbeg" in text and "cuda.gridDim.z" in text
    plain = source(KernelSpec("register", "float32", 32, 128, 8, 4, 8, stages=2))
    assert "kbeg" not in plain  # kernels without split-K are as before
    one = source(KernelSpec("register", "float32", 32, 128, 8, 4, 8, split_k=8, single=True))
    assert "z0 =" in text and "z0 =" not in one and "offA = u32(0)" in one  # no batch prologue
    assert "sl = u32(u32(cuda.blockIdx.z) % u32(8))" in one
    gemv = KernelSpec("naive", "float64", 1, 16, gemv=2, ks=32)
    assert gemv.threads == 512 and "gemv2_ks32" in gemv.name
    assert "cuda.shared.array(512, DT)" in source(gemv)
    with pytest.raises(ValueError, match="power of two"):
        source(KernelSpec("naive", "float32", 1, 16, gemv=1, ks=12))
