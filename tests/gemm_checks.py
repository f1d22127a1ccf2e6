"""Shared checks for the CuPy and OpenCL backends (the same kernel sources run on both); the GPU
smoke check (``python -m benches.gpu_smoke``) runs :func:`check_shapes` and :func:`check_layouts`
on every CUDA-capable backend."""

from __future__ import annotations

import numpy as np

import tiledmm
from tiledmm.util.accuracy import matmul_error, rel_error

SHAPES = [(1, 1, 1), (37, 53, 29), (1, 7, 3), (7, 1, 5), (5, 6, 0), (61, 67, 71),
          (130, 65, 131), (17, 128, 1), (64, 64, 64)]  # fmt: skip
FAMILIES = ("naive", "tiled", "register")  # the shared C sources (mma: tests/test_mma.py)


def tol(dtype: str) -> float:
    return 1e-5 if dtype == "float32" else 1e-12


def check_shapes(backend: str, family: str, dtype: str, shapes=SHAPES) -> float:
    """Odd shapes through tiledmm.matmul into a NaN-poisoned out= (unwritten elements show);
    the worst error."""
    be = tiledmm.get_backend(backend)
    rng = np.random.default_rng()
    worst = 0.0
    for m, n, k in shapes:
        a = rng.standard_normal((m, k)).astype(dtype)
        b = rng.standard_normal((k, n)).astype(dtype)
        out = be.asarray(np.full((m, n), np.nan, dtype), np.dtype(dtype))
        tiledmm.matmul(be.asarray(a, a.dtype), be.asarray(b, b.dtype), backend=backend,
                       kernel=family, out=out)  # fmt: skip
        c = be.to_numpy(out)
        assert np.isfinite(c).all(), (m, n, k)
        err = matmul_error(c, a, b)
        assert err < tol(dtype), (m, n, k, err)
        worst = max(worst, err)
    return worst


def check_geometry(backend: str, kernel: str, geo: tuple, dtype: str) -> None:
    """Explicit tiles ``(block_tile, thread_tile, options)`` through ``run`` on odd shapes,
    into a NaN-poisoned output."""
    be = tiledmm.get_backend(backend)
    bt, tt, opts = geo
    rng = np.random.default_rng()
    for m, n, k in [(37, 53, 29), (1, 7, 3), (64, 64, 64), (5, 6, 0), (70, 45, 33)]:
        geom = tiledmm.Geometry(bt, tt, tuple(opts.items()))
        plan = tiledmm.make_plan(m, n, k, dtype=dtype, kernel=kernel, device=be.device(),
                                 geometry=geom)  # fmt: skip
        a = rng.standard_normal((m, k)).astype(dtype)
        b = rng.standard_normal((k, n)).astype(dtype)
        c = be.asarray(np.full((m, n), np.nan, dtype), np.dtype(dtype))
        be.run(plan, be.asarray(a, a.dtype), be.asarray(b, b.dtype), c)
        c = be.to_numpy(c)
        assert np.isfinite(c).all() and matmul_error(c, a, b) < tol(dtype), (geo, m, n, k)


# Double-buffered register tiles with one vector load of A and of B per work-item and step
# (the shape PoCL miscompiles; docs/kernels.md) and with two.
STAGES2 = [
    ((32, 32, 8), (4, 4), dict(use_local=1, vm=4, vn=4, pad=0, stages=2)),
    ((128, 128, 8), (8, 8), dict(use_local=1, vm=4, vn=4, pad=4, stages=2)),
    ((128, 128, 16), (8, 8), dict(use_local=1, vm=4, vn=4, pad=4, stages=2)),
    ((128, 64, 16), (8, 4), dict(use_local=1, vm=4, vn=4, pad=4, stages=2, prefetch=1)),
]

# Register fragments loaded a K step ahead (FRAG_PREFETCH), single-buffered local tiles.
PREFETCH = [
    ((32, 32, 8), (4, 4), dict(use_local=1, vm=4, vn=4, pad=4, prefetch=1)),
    ((32, 16, 4), (4, 2), dict(use_local=1, vm=1, vn=2, prefetch=1)),
]


def check_layouts(backend: str, family: str, dtype: str) -> float:
    """Transposed, sliced (offset, strided) and batched operands, numpy in and out; the worst
    error."""
    rng = np.random.default_rng()
    errs = []

    def close(c, x, y, what: str) -> None:
        errs.append(matmul_error(c, x, y))
        assert errs[-1] < tol(dtype), (what, errs[-1])

    a = rng.standard_normal((45, 70)).astype(dtype)
    b = rng.standard_normal((70, 33)).astype(dtype)
    at, bt = np.ascontiguousarray(a.T).T, np.ascontiguousarray(b.T).T
    for x, y in ((a, b), (at, b), (a, bt), (at, bt)):
        close(tiledmm.matmul(x, y, backend=backend, kernel=family), a, b, "transposed")
    be = tiledmm.get_backend(backend)
    big = be.asarray(rng.standard_normal((90, 90)).astype(dtype), np.dtype(dtype))
    sub_a, sub_b = big[3:48, 5:75], big[7:77, 11:44]  # offsets + leading dimension 90
    c = be.to_numpy(tiledmm.matmul(sub_a, sub_b, backend=backend, kernel=family))
    ha, hb = be.to_numpy(big)[3:48, 5:75], be.to_numpy(big)[7:77, 11:44]
    close(c, ha, hb, "sliced")
    out = be.asarray(np.full((33, 45), np.nan, dtype), np.dtype(dtype))
    tiledmm.matmul(be.asarray(a, a.dtype), be.asarray(b, b.dtype), backend=backend,
                   kernel=family, out=out.T)  # strided out: computed in a temp, copied  # fmt: skip
    close(be.to_numpy(out).T, a, b, "strided out")
    x = rng.standard_normal((3, 1, 9, 13)).astype(dtype)
    y = rng.standard_normal((4, 13, 10)).astype(dtype)
    c = tiledmm.matmul(x, y, backend=backend, kernel=family)
    assert c.shape == (3, 4, 9, 10)
    close(c, x, y, "batched")
    return max(errs)


def check_nonfinite(backend: str, family: str, dtype: str) -> None:
    """NaN and Inf land exactly where numpy puts them (padding never creates NaN)."""
    rng = np.random.default_rng()
    m, n, k = 19, 23, 21
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    a[2, 5] = np.nan
    a[7, 1] = np.inf
    b[3, 11] = -np.inf
    b[0, 22] = np.inf
    a[18, 20] = np.inf  # last row and last K column: the edge of a padded tile
    c = tiledmm.matmul(a, b, backend=backend, kernel=family)
    with np.errstate(invalid="ignore"):
        ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_array_equal(np.isnan(c), np.isnan(ref))
    np.testing.assert_array_equal(np.isposinf(c), np.isposinf(ref))
    np.testing.assert_array_equal(np.isneginf(c), np.isneginf(ref))
    fin = np.isfinite(ref)
    assert rel_error(c[fin], ref[fin]) < tol(dtype)


# Broadcast batches (rank 1 and 2, size-1 and missing dimensions, a strided batch view) with odd
# matrix shapes and K = 0 / 1: (shape of a, shape of b).
BATCHES = [
    ((3, 5, 7), (3, 7, 6)),
    ((4, 1, 5, 3), (1, 2, 3, 9)),  # rank 2, both broadcast: not one stride per operand
    ((5, 9, 1), (1, 6)),  # K = 1, b broadcast (missing batch dimension)
    ((2, 3, 4, 0), (3, 0, 5)),  # K = 0: zeros
    ((2, 1, 4, 6, 5), (3, 4, 5, 7)),  # rank 3: three launches or one
]


def _batched_case(rng, sa, sb, dtype):
    a = rng.standard_normal(sa).astype(dtype)
    b = rng.standard_normal(sb).astype(dtype)
    ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
    return a, b, ref


def check_batched(backend: str, kernel: str, dtype: str, geo: tuple | None = None) -> None:
    """Broadcast batches through ``Backend.run_batched`` (one launch; it must not decline),
    into NaN-poisoned outputs, with ``geo`` = (block_tile, thread_tile, options) if given."""
    be = tiledmm.get_backend(backend)
    rng = np.random.default_rng()
    for sa, sb in BATCHES:
        a, b, ref = _batched_case(rng, sa, sb, dtype)
        m, k = sa[-2:]
        n = sb[-1]
        if geo is None:
            plan = tiledmm.plan(m, n, k, dtype=dtype, backend=backend, kernel=kernel)
        else:
            g = tiledmm.Geometry(geo[0], geo[1], tuple(geo[2].items()))
            plan = tiledmm.make_plan(m, n, k, dtype=dtype, kernel=kernel, device=be.device(),
                                     geometry=g, backend=backend)  # fmt: skip
        out = be.asarray(np.full(ref.shape, np.nan, dtype), np.dtype(dtype))
        done = be.run_batched(plan, be.asarray(a, a.dtype), be.asarray(b, b.dtype), out)
        assert done, (backend, sa, sb)
        c = be.to_numpy(out)
        assert np.isfinite(c).all(), (sa, sb, geo)
        err = rel_error(c, ref)
        assert err < tol(dtype), (sa, sb, geo, err)


def check_batched_api(backend: str, dtype: str) -> None:
    """Batched products through tiledmm.matmul: broadcast, a transposed batch view (strides
    the batched kernel cannot take: the per-matrix fallback), and out= of the batch shape."""
    be = tiledmm.get_backend(backend)
    rng = np.random.default_rng()
    a = rng.standard_normal((3, 1, 17, 9)).astype(dtype)
    b = rng.standard_normal((4, 9, 13)).astype(dtype)
    ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
    out = be.asarray(np.full(ref.shape, np.nan, dtype), np.dtype(dtype))
    res = tiledmm.matmul(be.asarray(a, a.dtype), be.asarray(b, b.dtype), backend=backend, out=out)
    assert res is out and rel_error(be.to_numpy(out), ref) < tol(dtype)
    bt = np.ascontiguousarray(b.transpose(0, 2, 1))  # b's matrices as transposed views
    res = tiledmm.matmul(be.asarray(a, a.dtype), be.asarray(bt, bt.dtype).transpose((0, 2, 1)),
                         backend=backend)  # fmt: skip
    assert rel_error(be.to_numpy(res), ref) < tol(dtype)
