"""Property test against numpy itself: random shapes (1-D, 2-D, broadcast batches, empty and
odd sizes), dtypes, strided and transposed views, list inputs and every out= form, on every
CPU backend. The answer, dtype and shape must be numpy's, or the error numpy's own type."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tiledmm
from tests.helpers import available_backends

BACKENDS = [b for b in available_backends() if b in ("numpy", "opencl", "numba-cpu", "example")]
DTYPES = [np.float32, np.float64] * 3 + [np.int32, np.float16, np.complex64, np.bool_]


@st.composite
def problems(draw):
    m, n, k = (draw(st.integers(0, 9)) for _ in range(3))
    batch_a = tuple(draw(st.lists(st.sampled_from([1, 2, 3]), max_size=2)))
    batch_b = tuple(draw(st.lists(st.sampled_from([1, 2, 3]), max_size=2)))
    a_shape = (k,) if draw(st.booleans()) and not batch_a else batch_a + (m, k)
    b_shape = (k,) if draw(st.booleans()) and not batch_b else batch_b + (k, n)
    if draw(st.integers(0, 9)) == 0:  # sometimes a mismatch: numpy's error must come out
        b_shape = b_shape[:-2] + (k + 1,) + b_shape[-1:] if len(b_shape) > 1 else (k + 1,)
    da, db = draw(st.sampled_from(DTYPES)), draw(st.sampled_from(DTYPES))
    form = draw(st.sampled_from(["array", "transposed", "strided", "list"]))
    out_form = draw(st.sampled_from(["none", "array", "tuple", "none-tuple"]))
    return a_shape, b_shape, da, db, form, out_form, draw(st.integers(0, 2**31))


def _operand(shape, dtype, form, rng):
    x = (rng.standard_normal(shape) * 4).astype(dtype)
    if form == "transposed" and x.ndim >= 2:
        return np.ascontiguousarray(np.swapaxes(x, -1, -2)).swapaxes(-1, -2)
    if form == "strided" and x.ndim >= 1:
        big = np.repeat(x, 2, axis=-1)
        return big[..., ::2]
    if form == "list":
        return x.tolist()
    return x


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=40)
@given(p=problems())
def test_matmul_matches_numpy(backend, p):
    a_shape, b_shape, da, db, form, out_form, seed = p
    rng = np.random.default_rng(seed)
    a = _operand(a_shape, da, form, rng)
    b = _operand(b_shape, db, form, rng)
    try:
        ref = np.matmul(a, b)
    except Exception as exc:  # numpy refuses: tiledmm must raise the same type
        with pytest.raises(type(exc)):
            tiledmm.matmul(a, b, backend=backend)
        return
    ref = np.asarray(ref)
    kw = {}
    if out_form != "none" and ref.ndim:
        out = np.full(ref.shape, np.nan if ref.dtype.kind in "fc" else 7, ref.dtype)
        kw["out"] = {"array": out, "tuple": (out,), "none-tuple": (None,)}[out_form]
    res = tiledmm.matmul(a, b, backend=backend, **kw)
    if "out" in kw and out_form != "none-tuple":
        assert res is out
    res = np.asarray(res)
    assert res.shape == ref.shape and res.dtype == ref.dtype
    if ref.dtype.kind in "fc":
        scale = np.abs(np.asarray(a, np.complex128)) @ np.abs(np.asarray(b, np.complex128))
        tol = 8 * np.finfo(ref.dtype).eps * (np.abs(scale) + 1)
        assert np.all(np.abs(res.astype(np.complex128) - ref) <= tol)
    else:
        np.testing.assert_array_equal(res, ref)
