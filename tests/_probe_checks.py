"""Checks of the calibration probes (``backends/kernels/probes.cl``) through a backend's
``compile_probe``, shared by the OpenCL (PoCL in CI) and CuPy (GPU) tests: each probe's output
against a float64 NumPy reference, NaN-poisoned outputs, and ``measure_gpu_levels`` end to end."""

from __future__ import annotations

from functools import cache

import numpy as np

from tiledmm import Backend


@cache
def _source() -> str:
    from tiledmm.calibrate import _probe_source

    return _probe_source()


def probe(be: Backend, kernel: str, threads: int, real_bytes: int):
    """``launch(groups, args)`` of one probe on ``be``."""
    return be.compile_probe(_source(), kernel, {"REAL_BYTES": real_bytes, "THREADS": threads})


def poisoned(be: Backend, n: int, dtype) -> object:
    return be.asarray(np.full(n, np.nan, dtype), np.dtype(dtype))


def check_stream(be: Backend) -> None:
    """Each item sums src[(i + 32 r) mod n] over its grid-stride i and r < reps."""
    rng = np.random.default_rng()
    threads, groups, n, reps = 32, 3, 1000 + int(rng.integers(0, 50)), 3
    items = groups * threads
    src = rng.standard_normal(n).astype(np.float32)
    out = poisoned(be, items, np.float32)
    args = (np.int32(n), np.int32(reps), be.asarray(src, np.dtype("float32")), out)
    probe(be, "stream_probe", threads, 4)(groups, args)
    s64, want = src.astype(np.float64), np.zeros(items)
    for gid in range(items):
        i = np.arange(gid, n, items)
        want[gid] = sum(s64[(i + 32 * r) % n].sum() for r in range(reps))
    np.testing.assert_allclose(be.to_numpy(out), want, rtol=1e-5, atol=1e-5)


def check_shared(be: Backend) -> None:
    """buf[i] = i; item t of a group sums buf[(q T + t + r) mod 8T] over q < 8, r < reps."""
    threads, groups, reps = 64, 2, 5
    out = poisoned(be, groups * threads, np.float32)
    probe(be, "shared_probe", threads, 4)(groups, (np.int32(reps), out))
    t = np.arange(threads)[:, None, None]
    q, r = np.arange(8)[None, :, None], np.arange(reps)[None, None, :]
    per_item = ((q * threads + t + r) % (8 * threads)).sum(axis=(1, 2))
    np.testing.assert_array_equal(be.to_numpy(out), np.tile(per_item, groups))


def check_fma(be: Backend, dtype: str) -> None:
    """8 chains per item start at gid + q and take c = c * x + 0.5 reps times; out = sum."""
    dt = np.dtype(dtype)
    threads, groups, reps = 32, 3, 37
    x = dt.type(np.random.default_rng().uniform(0.9, 0.99))
    out = poisoned(be, groups * threads, dt)
    probe(be, "fma_probe", threads, dt.itemsize)(groups, (np.int32(reps), x, out))
    c = np.arange(groups * threads, dtype=np.float64)[:, None] + np.arange(8)
    for _ in range(reps):
        c = c * float(x) + 0.5
    rtol = 1e-5 if dt.itemsize == 4 else 1e-12
    np.testing.assert_allclose(be.to_numpy(out), c.sum(axis=1), rtol=rtol)


def check_levels(be: Backend, quick: bool = True) -> dict:
    """``measure_gpu_levels`` runs every probe: positive, finite ceilings for each level and
    each dtype of the backend; returns them."""
    from tiledmm.calibrate import measure_gpu_levels

    got = measure_gpu_levels(be, quick=quick)
    assert set(got["levels"]) == {"DRAM", "L2", "shared memory"}
    assert set(got["fma_peaks"]) == {d for d in ("float32", "float64") if d in be.dtypes}
    values = [*got["levels"].values(), *got["fma_peaks"].values()]
    assert all(np.isfinite(v) and v > 0 for v in values), got
    return got
