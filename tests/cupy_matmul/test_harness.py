"""The swap of tests/cupy_matmul, checked on CPU with stand-ins for CuPy (its GPU use: the two
CuPy files beside this one)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

import tiledmm
from tests.cupy_matmul.harness import install


class FakeArray(np.ndarray):
    """Stands in for cupy.ndarray (a class whose __matmul__ can be replaced)."""

    def __matmul__(self, other):
        return ("own @", other)


def _fake_cupy():
    def own(x1, x2, out=None, **kw):
        return ("own", kw)

    return SimpleNamespace(matmul=own, linalg=SimpleNamespace(matmul=own), ndarray=FakeArray)


def test_callers_get_tiledmm_and_tiledmm_gets_cupy():
    cp, calls = _fake_cupy(), []
    own = cp.matmul

    def fake_tiledmm(x1, x2, /, *, backend, out=None, **kw):
        calls.append((backend, kw))
        return cp.matmul(x1, x2, out=out)  # as the CuPy backend's vendor_matmul does

    undo = install(cp, fake_tiledmm, backend="cupy")
    x = np.ones((2, 2)).view(FakeArray)
    assert cp.matmul(x, x, axes=[(0, 1)] * 3) == ("own", {})
    assert calls == [("cupy", {"axes": [(0, 1)] * 3})]
    assert cp.linalg.matmul is cp.matmul
    assert (x @ x) == ("own", {}) and len(calls) == 2  # @ between arrays: tiledmm
    assert (x @ 2) == ("own @", 2) and len(calls) == 2  # @ with a scalar: CuPy's own rules
    undo()
    assert cp.matmul is own and cp.linalg.matmul is own
    assert (x @ x)[0] == "own @"


def test_swap_runs_tiledmm_with_numpys_keywords():
    """The swap end to end with NumPy standing in for CuPy and tiledmm's numpy backend."""
    cp = _fake_cupy()
    cp.matmul = cp.linalg.matmul = np.matmul
    undo = install(cp, tiledmm.matmul, backend="numpy")
    try:
        a, b = np.arange(24.0).reshape(2, 3, 4), np.arange(20.0).reshape(4, 5)
        got = cp.matmul(a, b, axes=[(1, 2), (0, 1), (2, 1)])
        np.testing.assert_array_equal(got, np.matmul(a, b, axes=[(1, 2), (0, 1), (2, 1)]))
    finally:
        undo()
