"""Checks of the calibration probes (``backends/kernels/probes.cl``) through a backend's
``compile_probe``, shared by the OpenCL (PoCL in CI) and CuPy (GPU) tests: each probe's output
against a float64 NumPy reference, NaN-poisoned outputs, and ``measure_gpu_levels`` end to end."""

from __future__ import annotations

import numpy as np

from tiledmm import Backend


def probe(be: Backend, kernel: str, threads: int, real_bytes: int):
    """``launch(groups, args)`` of one probe on ``be``."""
    return be.compile_probe(kernel, {"REAL_BYTES": real_bytes, "THREADS": threads})


def poisoned(be: Backend, n: int, dtype) -> object:
    return be.asarray(np.full(n, np.nan, dtype), np.dtype(dtype))


def check_stream(be: Backend) -> None:
    """The buffer is ``chunks`` chunks of ``chunk`` 16-byte vectors; in pass r group g reads
    chunk (g + r) mod chunks, its item t the vectors t + j THREADS; out = the item's sum."""
    rng = np.random.default_rng()
    threads, unroll, reps = 32, 4, 3
    groups, chunks = 3, 4 + int(rng.integers(0, 3))
    vw = 4
    chunk = threads * unroll * 2  # two steps of the unrolled loop per chunk
    src = rng.standard_normal(chunks * chunk * vw).astype(np.float32)
    out = poisoned(be, groups * threads, np.float32)
    args = (np.int32(chunk), np.int32(chunks), np.int32(reps),
            be.asarray(src, np.dtype("float32")), out)  # fmt: skip
    probe(be, "stream_probe", threads, 4)(groups, args)
    vec = src.astype(np.float64).reshape(chunks, chunk // threads, threads, vw)
    want = np.zeros((groups, threads))
    for g in range(groups):
        for r in range(reps):
            want[g] += vec[(g + r) % chunks].sum(axis=(0, 2))
    np.testing.assert_allclose(be.to_numpy(out), want.ravel(), rtol=1e-5, atol=1e-5)


def check_shared(be: Backend) -> None:
    """buf[i] = i mod 61 (THREADS * 4 vectors of 4 floats); in pass r item t reads vectors
    ((t + r) mod THREADS) + q THREADS, q < 4; out = the item's sum."""
    threads, groups, unroll, vw = 64, 2, 4, 4
    reps = 5 + int(np.random.default_rng().integers(0, 5))
    out = poisoned(be, groups * threads, np.float32)
    probe(be, "shared_probe", threads, 4)(groups, (np.int32(reps), out))
    buf = (np.arange(threads * unroll * vw) % 61).reshape(threads * unroll, vw).sum(axis=1)
    t = np.arange(threads)[:, None, None]
    r, q = np.arange(reps)[None, :, None], np.arange(unroll)[None, None, :]
    per_item = buf[(t + r) % threads + q * threads].sum(axis=(1, 2))
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
    from tiledmm.tune.calibrate import measure_gpu_levels

    got = measure_gpu_levels(be, quick=quick)
    assert set(got["levels"]) == {"DRAM", "L2", "shared memory"}
    assert set(got["fma_peaks"]) == {d for d in ("float32", "float64") if d in be.dtypes}
    values = [*got["levels"].values(), *got["fma_peaks"].values()]
    assert all(np.isfinite(v) and v > 0 for v in values), got
    return got
