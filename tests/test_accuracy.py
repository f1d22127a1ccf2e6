"""The error metric and the float64 reference: right values, and no BLAS work that would leave
worker threads spinning into the timing of a CPU kernel (tiledmm.util.accuracy's docstring)."""

from __future__ import annotations

import contextlib
import math

import numpy as np
import pytest

from tiledmm.util import accuracy


def test_rel_error_is_the_frobenius_ratio_without_a_blas_dot(monkeypatch):
    rng = np.random.default_rng(5)
    ref = rng.standard_normal((37, 53))
    c = ref + 1e-6 * rng.standard_normal((37, 53))
    want = np.linalg.norm(c - ref) / np.linalg.norm(ref)

    def no_blas(*args, **kwargs):
        raise AssertionError("a BLAS call")

    monkeypatch.setattr(np, "dot", no_blas)
    monkeypatch.setattr(np.linalg, "norm", no_blas)
    assert accuracy.rel_error(c.astype(np.float32), ref) == pytest.approx(
        np.float64(want), rel=1e-3
    )
    assert accuracy.rel_error(ref, ref) == 0.0
    poisoned = c.copy()
    poisoned[3, 4] = np.nan
    assert accuracy.rel_error(poisoned, ref) == math.inf


def test_reference_on_one_blas_thread_when_asked(monkeypatch):
    threadpoolctl = pytest.importorskip("threadpoolctl")
    calls = []

    @contextlib.contextmanager
    def limits(limits=None, user_api=None):
        calls.append((limits, user_api))
        yield

    monkeypatch.setattr(threadpoolctl, "threadpool_limits", limits)
    rng = np.random.default_rng(6)
    a, b = rng.standard_normal((3, 17, 9)), rng.standard_normal((9, 5))
    want = np.matmul(a, b)
    assert np.array_equal(accuracy.reference(a, b), want) and calls == []
    got = accuracy.reference(a.astype(np.float32), b, one_thread=True)
    assert got.dtype == np.float64 and calls == [(1, "blas")]
    assert np.allclose(got, np.matmul(a.astype(np.float32).astype(np.float64), b))
