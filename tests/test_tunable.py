"""Every CPU backend is tunable (issue 37): the NumPy reference declares a search space, so
``tiledmm tune --backend numpy`` and first-use tuning work on the default backend, and every
candidate the planner keeps is one the kernels accept and compute right."""

from __future__ import annotations

import json

import numpy as np
import pytest

import tiledmm
from tiledmm import cli
from tiledmm.core import dispatch, tuning
from tiledmm.planner import shapefit
from tiledmm.planner.make import make_plan
from tiledmm.planner.plans import PlanError
from tiledmm.tune.search import ODD_CHECK
from tiledmm.util.accuracy import rel_error

from .conftest import requires_backend


def _runs_right(be, family: str, dtype: str = "float32") -> int:
    """How many candidates of ``be``'s space plan on ODD_CHECK; each must compute it right."""
    dev = be.device()
    m, n, k = ODD_CHECK
    rng = np.random.default_rng(3)
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    count = 0
    for g in be.search_space(family, dtype, dev):
        g = shapefit.for_product(g, family, m, n, k, dev, "odd", 1, dtype, be.name)
        try:
            plan = make_plan(m, n, k, dtype=dtype, kernel=family, device=dev, geometry=g,
                             backend=be.name)  # fmt: skip
        except PlanError:
            continue
        out = np.full((m, n), np.nan, dtype)
        be.run(plan, a, b, out)
        assert rel_error(out, ref) < 1e-4, (family, g)
        count += 1
    return count


@pytest.mark.parametrize("family", ["naive", "tiled", "register"])
def test_numpy_backend_declares_a_space_its_kernels_run(family):
    be = tiledmm.get_backend("numpy")
    space = be.search_space(family, "float32", be.device())
    assert len(space) >= 16
    assert be.geometry(family, "float32", be.device()).block_tile in {g.block_tile for g in space}
    assert _runs_right(be, family) >= 8  # the planner keeps most of it


@requires_backend("numba-cpu")
def test_numba_cpu_register_space_holds_only_what_its_kernel_takes():
    """Every candidate the planner keeps runs (its kernel rejects thread tiles other than 4 x
    TN: the one launch failure in the committed tuner logs is the planner's model default,
    8x8, which ``tiledmm tune`` adds to every space as candidate 1)."""
    be = tiledmm.get_backend("numba-cpu")
    assert _runs_right(be, "register") >= len(be.search_space("register", "float32",
                                                              be.device())) // 2  # fmt: skip


def test_tune_numpy_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TILEDMM_CACHE_DIR", str(tmp_path))
    rc = cli.main(["tune", "--backend", "numpy", "--kernel", "naive", "--shapes", "64x64x64",
                   "--budget", "3s"])  # fmt: skip
    out = capsys.readouterr()
    assert "declares no search space" not in out.err
    assert rc == 0, out
    e = tuning.lookup("numpy", "float32", "naive", tiledmm.get_backend("numpy").device(), "square")
    assert e is not None and not tuning.is_first_use(e)
    dispatch.clear_caches()


def test_shortlist_check_ranks_tuner_logs(tmp_path, capsys):
    """The model-as-shortlister check: ranks, reach and rank correlation from a tuner log."""
    from tiledmm.tune import shortlist_check as sc

    assert sc.spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert sc.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    be = tiledmm.get_backend("numpy")
    dev = be.device()
    recs = []
    for bt in [(64, 64, 64), (128, 128, 128), (256, 256, 256), (64, 128, 64), (32, 32, 32)]:
        g = tiledmm.Geometry(bt, (8, 8) if bt[0] >= 64 else (4, 4))
        plan = make_plan(512, 512, 512, dtype="float32", kernel="register", device=dev,
                         geometry=g, backend="numpy")  # fmt: skip
        recs.append(dict(task="float32|register|1x512x512x512", geometry=g.key(),
                         family="register", shape=[1, 512, 512, 512], status="ok",
                         gflops=1.0 / plan.predicted_seconds))  # fmt: skip
    res = sc.rank_task(recs, dev, "numpy", "float32")  # measured exactly as predicted
    assert res["position"] == 1 and res["reach"][1] == pytest.approx(1.0)
    assert res["spearman"] == pytest.approx(1.0) or res["distinct_predictions"] < 5
    log = tmp_path / "epyc-tune-numpy.jsonl"
    log.write_text("\n".join(map(json.dumps, recs)) + "\n{torn")
    assert sc.main([str(log), "--device", str(_results_with(tmp_path, dev))]) == 0
    out = capsys.readouterr().out
    assert "best in model's top k (k=1..8): 1.00" in out and "all logs: 1 tasks" in out


def _results_with(tmp_path, dev):
    path = tmp_path / "machine.json"
    path.write_text(
        json.dumps({"machine_info": {"tiledmm": {"devices": {"numpy": dev.to_dict()}}}})
    )
    return path
