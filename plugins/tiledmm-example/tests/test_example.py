"""The example plugin, installed: listed by tiledmm.backends() and correct through matmul."""

from __future__ import annotations

import numpy as np
import pytest

tiledmm = pytest.importorskip("tiledmm")
pytest.importorskip("tiledmm_example", reason="pip install plugins/tiledmm-example")


def test_listed_and_correct():
    rows = {e.name: e for e in tiledmm.backends()}
    assert rows["example"].available and rows["example"].plugin == "example"
    assert rows["example"].kernels == ("naive",)
    rng = np.random.default_rng(0)
    for shape_a, shape_b in [((37, 19), (19, 23)), ((2, 5, 7), (7,)), ((0, 4), (4, 3))]:
        a, b = rng.standard_normal(shape_a), rng.standard_normal(shape_b)
        np.testing.assert_allclose(tiledmm.matmul(a, b, backend="example"), a @ b, rtol=1e-12)
