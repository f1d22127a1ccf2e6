"""Dask products at the edges (issue 40): empty dimensions behave as numpy's, and the chunk
planner's search is bounded by the block grid, never by the worker count."""

from __future__ import annotations

import subprocess
import sys
import time
import warnings

import numpy as np
import pytest

da = pytest.importorskip("dask.array")

import tiledmm  # noqa: E402
import tiledmm.dask as td  # noqa: E402
from tiledmm.dask.cluster import cluster_plan  # noqa: E402


@pytest.mark.parametrize(
    "sa, sb",
    [((0, 5), (5, 3)), ((4, 5), (5, 0)), ((0, 5), (5, 0)), ((4, 0), (0, 3)),
     ((2, 0, 5), (5, 3)), ((0, 4, 5), (5, 3)), ((5,), (5, 0)), ((0, 5), (5,))],
)  # fmt: skip
def test_empty_products_are_numpys(sa, sb):
    a, b = np.ones(sa, np.float32), np.ones(sb, np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", td.RechunkWarning)
        res = tiledmm.matmul(da.from_array(a), da.from_array(b))
        got = res.compute()
        plan = td.explain(da.from_array(a), da.from_array(b))
    want = a @ b
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    assert plan.predicted_seconds >= 0


@pytest.mark.parametrize("workers", [10**12, 999_999_999_989, 2**61 - 1])  # the last two prime
def test_chunk_planner_is_bounded_in_the_worker_count(workers):
    t0 = time.perf_counter()
    p = cluster_plan(64, 64, 64, workers=workers, link_bandwidth=10e9)
    big = cluster_plan(4096, 4096, 512, workers=workers, link_bandwidth=10e9)
    assert time.perf_counter() - t0 < 20
    assert p.worker_grid == (1, 1)  # one block: one busy worker
    gm, gn = big.grid[:2]
    assert big.worker_grid == (gm, gn)  # more workers than blocks: one block each


def _exhaustive(workers, gm, gn, m, n):
    """The split the planner chose before the search was bounded: every divisor visited."""
    options = []
    for pm in (d for d in range(1, workers + 1) if workers % d == 0):
        pm_, pn_ = min(pm, gm), min(workers // pm, gn)
        per_worker = -(-gm // pm_) * m / gm + -(-gn // pn_) * n / gn
        options.append((per_worker, -(pm_ * pn_), (pm_, pn_)))
    return min(options)


@pytest.mark.parametrize("workers", [1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 17, 30, 64])
def test_bounded_search_matches_the_exhaustive_one(workers):
    m, n, k = 4096, 2048, 512
    for cm, cn in [(4096, 2048), (1024, 1024), (512, 2048), (256, 128), (2048, 64)]:
        p = cluster_plan(m, n, k, workers=workers, link_bandwidth=10e9, chunks=(cm, cn, k))
        gm, gn = p.grid[:2]
        bytes_, busy, grid = _exhaustive(workers, gm, gn, m, n)
        pm, pn = p.worker_grid
        mine = -(-gm // pm) * m / gm + -(-gn // pn) * n / gn
        if workers <= max(gm, gn) ** 2:  # every divisor is visited: the same split
            assert p.worker_grid == grid
        else:  # never worse; where no divisor splits the grid, one block per worker
            assert (mine, -(pm * pn)) <= (bytes_, busy)


def test_cli_plan_with_a_huge_cluster_returns():
    out = subprocess.run(
        [sys.executable, "-m", "tiledmm", "plan", "64", "64", "64", "--workers",
         "1000000000000"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "split 1 x 1" in out.stdout
