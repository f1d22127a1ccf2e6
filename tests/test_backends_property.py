"""Property tests: every backend available here agrees with numpy.matmul on random shapes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tiledmm
from tests.helpers import available_backends
from tiledmm.util.accuracy import matmul_error

PRIMES = [1, 2, 3, 5, 7, 11, 13, 17, 31, 37, 61, 67, 97, 127, 131]
dims = st.one_of(st.sampled_from(PRIMES), st.integers(min_value=1, max_value=140))

# Tolerance against a float64 reference: fp32 accumulates K products in single precision.
TOL = {"float32": 1e-5, "float64": 1e-12}


@pytest.mark.parametrize("backend", available_backends())
@pytest.mark.parametrize("kernel", tiledmm.KERNEL_FAMILIES)
@given(
    m=dims,
    n=dims,
    k=dims,
    dtype=st.sampled_from(["float32", "float64"]),
    seed=st.integers(0, 2**32 - 1),
)
def test_backend_matches_numpy(backend, kernel, m, n, k, dtype, seed):
    be = tiledmm.get_backend(backend)
    if kernel not in be.kernels or dtype not in be.dtypes:
        pytest.skip(f"{backend} has no {kernel}/{dtype}")
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    got = tiledmm.matmul(a, b, backend=backend, kernel=kernel)
    assert isinstance(got, np.ndarray) and got.shape == (m, n) and got.dtype == dtype
    assert np.isfinite(got).all(), "unwritten or corrupted outputs"
    assert matmul_error(got, a, b) < TOL[dtype]


@pytest.mark.parametrize("backend", available_backends())
@given(
    batch=st.lists(st.integers(1, 3), min_size=1, max_size=2),
    m=dims,
    k=dims,
    seed=st.integers(0, 2**32 - 1),
)
def test_backend_batched_broadcast(backend, batch, m, k, seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((*batch, m, k)).astype("float32")
    b = rng.standard_normal((k, 7)).astype("float32")
    got = tiledmm.matmul(a, b, backend=backend)
    assert got.shape == (*batch, m, 7)
    assert matmul_error(got, a, b) < 1e-5
