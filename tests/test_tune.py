"""tiledmm tune and the tuning database: shape classes, the database's layers and failure
handling, the planner reading it, the tuner's selection (broken candidates never win, the
default is never beaten by noise), resuming, and short CPU cold starts (numba-cpu, PoCL)."""

from __future__ import annotations

import argparse
import json
import warnings

import numpy as np
import pytest

import tiledmm
from tiledmm import Backend, Geometry
from tiledmm.core import dispatch, tuning, tuning_check
from tiledmm.core.tuning import TuningWarning, shape_class
from tiledmm.planner import shapefit
from tiledmm.tune import command as tune
from tiledmm.tune import search as tune_search
from tiledmm.tune.search import Tuner
from tiledmm.tune.task import Task
from tiledmm.util.accuracy import rel_error


@pytest.fixture(autouse=True)
def cache(tuning_cache):
    return tuning_cache


def _entry(dev, backend="numpy", family="register", cls="square", gflops=10.0, bt=(32, 32, 32),
           tt=(8, 8), **kw):  # fmt: skip
    meas = dict(gflops=gflops, date="2026-11-30")
    e = dict(device=dev.name, vendor=dev.vendor, kind=dev.kind, backend=backend,
             dtype="float32", family=family, shape_class=cls, block_tile=list(bt),
             thread_tile=list(tt), options={}, measured=meas)  # fmt: skip
    e.update(kw)
    return e


def test_shape_classes():
    assert shape_class(1024, 1024, 1024) == "square"
    assert shape_class(1000, 1024, 1024) == "odd"
    assert shape_class(1024, 1024, 128) == "skinny_k"
    assert shape_class(1024, 48, 4096) == "skinny_mn"
    assert shape_class(256, 256, 256) == shape_class(64, 64, 64) == "square"
    assert shape_class(1, 4096, 4096) == "vector"
    assert shape_class(512, 512, 512, batch=8) == "batched"
    assert set(tuning_check.SHAPE_CLASSES) >= {"square", "odd", "skinny_k", "skinny_mn", "batched"}
    assert tune.parse_budget("10m") == 600 and tune.parse_budget("1m30s") == 90
    assert tune.parse_budget("45") == 45
    with pytest.raises(ValueError):
        tune.parse_budget("soon")
    classes = [c for c, _ in tune.tasks_for("squares,odd,skinny,batched,100x200x300", 256)]
    assert classes == ["square", "odd", "odd", "skinny_k", "skinny_mn", "skinny_mn", "batched",
                       "odd"]  # fmt: skip
    for cls, (b, m, n, k) in tune.tasks_for("squares,odd,skinny,batched", 256):
        assert shape_class(m, n, k, b) == cls


def test_user_layer_overrides_shipped_and_says_so():
    dev = tiledmm.get_backend("numpy").device()
    p = tiledmm.plan(1000, 1000, 777, backend="numpy", kernel="register")
    assert p.geometry_source.startswith("shipped default for cpu")
    tuning.save_entries([_entry(dev, cls="odd", bt=(64, 64, 64), tt=(8, 8)),
                         _entry(dev, cls="square", bt=(32, 32, 32), tt=(4, 4))])  # fmt: skip
    dispatch.clear_caches()
    p = tiledmm.plan(1000, 1000, 777, backend="numpy", kernel="register")
    assert p.block_tile == (64, 64, 64) and "tuned on this device, 2026-11-30" in str(p)
    q = tiledmm.plan(48, 1024, 1024, backend="numpy", kernel="register")  # skinny: square's
    assert q.block_tile == (32, 32, 32) and q.thread_tile == (4, 4)
    other = tiledmm.plan(1000, 1000, 777, backend="numpy", kernel="tiled")  # no tiled entry
    assert other.geometry_source.startswith("shipped")
    # the result is still right with the tuned tiles
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((61, 45)), rng.standard_normal((45, 37))
    assert rel_error(tiledmm.matmul(a, b, backend="numpy", kernel="register"), a @ b) < 1e-12


def test_arch_and_vendor_fallbacks_and_specificity():
    dev = tiledmm.get_backend("numpy").device()
    arch = tuning.device_arch(dev)
    base = dict(backend="numpy", dtype="float32", family="tiled", shape_class="square",
                measured=dict(gflops=1.0, date="2026-01-01"))  # fmt: skip
    other = dict(base, device="another CPU", block_tile=[8, 8, 8])
    entries = [other]
    assert tuning.lookup("numpy", "float32", "tiled", dev, "square", entries) is None
    if arch:
        entries.append(dict(base, arch=arch, block_tile=[16, 16, 16]))
        assert tuning.lookup("numpy", "float32", "tiled", dev, "square", entries)["arch"] == arch
    entries.append(dict(base, device=dev.name, block_tile=[32, 32, 32]))
    hit = tuning.lookup("numpy", "float32", "tiled", dev, "square", entries)
    assert hit["block_tile"] == [32, 32, 32]


@pytest.mark.parametrize(
    "text, why",
    [("{not json", "not valid JSON"), ('["a list"]', "not an object with an 'entries' list")],
)
def test_corrupt_database_is_reported_once_and_ignored(cache, text, why):
    (cache / "tuning.json").write_text(text)
    with pytest.warns(TuningWarning, match=f"ignored, because it is {why}"):
        p = tiledmm.plan(512, 512, 512, backend="numpy", kernel="register")
    assert p.geometry_source.startswith("shipped")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per state of the file
        dispatch.clear_caches()
        tiledmm.plan(512, 512, 512, backend="numpy", kernel="register")


def test_bad_entry_dropped_good_kept(cache):
    dev = tiledmm.get_backend("numpy").device()
    good = _entry(dev, bt=(64, 32, 16), tt=(4, 4))
    bad = dict(good, block_tile=[0, 32, 16])
    bad2 = dict(good, measured={"gflops": -1, "date": "2026"})
    (cache / "tuning.json").write_text(json.dumps({"entries": [bad, good, bad2, 3]}))
    with pytest.warns(TuningWarning, match="entry 0 is ignored: block_tile"):
        entries = tuning.user_entries()
    assert entries == [good]
    with pytest.raises(ValueError, match="family"):
        tuning.save_entries([dict(good, family="fast")])


def test_ignore_shipped_device_tables(monkeypatch):
    """With the variable set, a backend is asked as if its device had no name on record."""

    class Named(Backend):
        name, kernels = "named-test", ("tiled",)

        def geometry(self, kernel, dtype, device):
            if device.name == tiledmm.host_cpu().name:
                return Geometry((8, 8, 8), source="tuned on this CPU")
            return Geometry((16, 16, 16), source=f"default for {device.kind}")

    be, dev = Named(), tiledmm.host_cpu()
    g = tuning.select(be, "tiled", "float32", dev, "square")
    assert g.block_tile == (8, 8, 8) and g.source.startswith(f"shipped table for {dev.name}")
    monkeypatch.setenv(tuning.IGNORE_SHIPPED, "1")
    g = tuning.select(be, "tiled", "float32", dev, "square")
    assert g.block_tile == (16, 16, 16) and tuning.IGNORE_SHIPPED in g.source


def test_auto_kernel_follows_measurements():
    dev = tiledmm.get_backend("numpy").device()
    before = dispatch.auto_kernel(tiledmm.get_backend("numpy"), 1024, 1024, 1024, "float32")
    assert before == "register"
    tuning.save_entries([
        _entry(dev, family="register", gflops=5.0),
        _entry(dev, family="naive", gflops=50.0, bt=(16, 16, 1), tt=(1, 1)),
    ])  # fmt: skip
    be = tiledmm.get_backend("numpy")
    assert dispatch.auto_kernel(be, 1024, 1024, 1024, "float32") == "naive"
    # another shape class has no measurements: the ladder decides as before
    assert dispatch.auto_kernel(be, 1000, 1000, 777, "float32") == "register"
    # a partial tune of the lower rungs alone (`tiledmm tune --kernel naive,tiled`, or a budget
    # spent before the register family) does not displace the unmeasured top rung
    tuning.save_entries([
        _entry(dev, family="naive", gflops=2.0, bt=(16, 16, 1), tt=(1, 1), cls="odd"),
        _entry(dev, family="tiled", gflops=7.0, bt=(64, 64, 64), tt=(1, 1), cls="odd"),
    ])  # fmt: skip
    dispatch.clear_caches()
    assert dispatch.auto_kernel(be, 1000, 1000, 777, "float32") == "register"


class Fake(Backend):
    """A tunable host backend: block tiles are slices of a NumPy product; one geometry
    writes a wrong value, one raises as a compile error would, one leaves a row unwritten."""

    name, kernels = "fake-tune", ("tiled",)

    def geometry(self, kernel, dtype, device):
        return Geometry((32, 32, 32), source="fake default")

    def search_space(self, kernel, dtype, device):
        sizes = [(8, 8, 8), (16, 16, 16), (64, 64, 64), (13, 13, 13), (24, 24, 24), (40, 8, 8)]
        return [Geometry(s) for s in sizes] + [Geometry((5000, 5000, 1))]  # last: pruned

    def run(self, plan, a, b, out):
        bm, bn, _ = plan.block_tile
        if bm == 13:
            raise RuntimeError("clBuildProgram failed: compile error (simulated)")
        for i in range(0, out.shape[0], bm):
            for j in range(0, out.shape[1], bn):
                out[i : i + bm, j : j + bn] = a[i : i + bm] @ b[:, j : j + bn]
        if bm == 24:
            out[0, 0] += 1.0  # wrong result
        if bm == 40:
            out[-1] = np.nan  # an unwritten row


def test_tuner_records_failures_selects_only_correct_and_resumes(cache):
    be = Fake()
    tuner = Tuner(be, "float32", budget=30, strategy="exhaustive")
    task = Task(tuner, "tiled", "odd", (1, 70, 50, 30))
    assert all(g.block_tile != (5000, 5000, 1) for g in task.space)  # pruned by the planner
    assert task.space[0].block_tile == (32, 32, 32)  # the shipped default first
    tuner.search(task, 30)
    status = {json.loads(k)[0][0]: r["status"] for k, r in task.results.items()}
    assert status[13] == "compile error" and status[24] == "wrong result"
    assert status[40] == "wrong result" and status[8] == "ok"
    assert task.choice is not None and task.choice["status"] == "ok"
    assert json.loads(task.choice["geometry"])[0][0] in (8, 16, 32, 64)
    lines = tuner.log.read_text().splitlines()
    # resumed: nothing is measured again
    again = Tuner(be, "float32", budget=30, strategy="exhaustive")
    t2 = Task(again, "tiled", "odd", (1, 70, 50, 30))
    again.search(t2, 30)
    assert len(again.log.read_text().splitlines()) == len(lines)
    assert {k: r["status"] for k, r in t2.results.items()} == {
        k: r["status"] for k, r in task.results.items()
    }


def test_a_slow_compile_is_not_a_timeout_a_slow_kernel_is(monkeypatch):
    """A candidate whose first call is slow only because it compiles (numba-cuda: 35 s for
    some tiles that then ran as fast as the rest) is timed; one slow on every call times out."""
    import time

    monkeypatch.setattr(tune_search, "TIMEOUT_MIN", 0.2)
    calls: dict[int, int] = {}

    class Slow(Fake):
        def run(self, plan, a, b, out):
            bm = plan.block_tile[0]
            calls[bm] = calls.get(bm, 0) + 1
            if (bm == 16 and calls[bm] == 1) or bm == 64:
                time.sleep(0.4)
            super().run(plan, a, b, out)

    tuner = Tuner(Slow(), "float32", budget=30, strategy="exhaustive", resume=False)
    task = Task(tuner, "tiled", "square", (1, 64, 64, 64))
    tuner.search(task, 30)
    rec = {json.loads(k)[0][0]: r for k, r in task.results.items()}
    assert rec[16]["status"] == "ok" and rec[16]["compile_seconds"] >= 0.4
    assert rec[64]["status"] == "timeout" and "0.4" in rec[64]["error"]


def test_random_local_seeds_with_earlier_winners_and_unifies_a_class(monkeypatch):
    """random+local tries the winners of earlier tasks right after the default; two tasks of
    one class end with one geometry: the best geometric mean over both."""
    be = Fake()
    tuner = Tuner(be, "float32", budget=30, strategy="random+local", resume=False)
    small = Task(tuner, "tiled", "square", (1, 64, 64, 64))
    big = Task(tuner, "tiled", "square", (1, 96, 96, 96))
    k16 = Geometry((16, 16, 16)).key()
    tuner.winners["tiled"] = [("square", k16)]
    order = [g.key() for g in tuner.order(big)]
    assert order[1] == k16 and len(order) == len(set(order)) == len(big.space)
    speed = {8: 1.0, 16: 3.0, 32: 2.0, 64: 2.5}  # fake GFLOP/s by block size and task

    def measured(task, g, data):
        rec = Tuner.evaluate(tuner, task, g, data)
        if rec["status"] == "ok":
            bm = g.block_tile[0]
            rec["gflops"] = speed[bm] * (2.0 if task is big and bm == 64 else 1.0)
        return rec

    monkeypatch.setattr(tuner, "evaluate", measured)
    for t in (small, big):
        data = (*tuner.operands(t.shape), np.empty(t.shape[1:3], np.float32))
        t.host = data[:5]
        for g in t.space:
            tuner.evaluate(t, g, data)
    small.choice, big.choice = (
        dict(small.results[k16]),
        dict(big.results[Geometry((64, 64, 64)).key()]),
    )
    tuner.unify([small, big])  # 16: 3 x 3; 64: 2.5 x 5 -> 64 has the better geometric mean
    assert small.choice["geometry"] == big.choice["geometry"] == Geometry((64, 64, 64)).key()


def test_random_local_tries_what_another_backend_tuned_on_this_device_first(cache):
    """A geometry another backend tuned on this very device (CuPy's for OpenCL: one kernel
    source) comes right after the default, before earlier winners and the random sample, when
    this backend's space holds it; other devices' and dtypes' entries, and geometries outside
    the space, are not tried."""
    be = Fake()
    dev = be.device()

    def entry(backend, tiles, device=dev.name, dtype="float32", cls="square"):
        return dict(backend=backend, device=device, dtype=dtype, family="tiled",
                    shape_class=cls, block_tile=list(tiles), thread_tile=[1, 1], options={},
                    measured={"gflops": 1.0, "date": "2026-12-01T00:00:00"})  # fmt: skip

    entries = [entry("sibling", (64, 64, 64), cls="odd"), entry("sibling", (8, 8, 8)),
               entry("other-device", (16, 16, 16), device="another device"),
               entry("sibling", (24, 24, 24), dtype="float64"),
               entry("sibling", (48, 48, 48), cls="skinny_k"),  # not in Fake's space
               entry(be.name, (40, 8, 8))]  # its own entry: not a sibling  # fmt: skip
    tuning.save_entries(entries)
    tuner = Tuner(be, "float32", budget=30, strategy="random+local", resume=False)
    task = Task(tuner, "tiled", "square", (1, 96, 96, 96))
    tuner.winners["tiled"] = [("square", Geometry((16, 16, 16)).key())]
    order = [g.key() for g in tuner.order(task)]
    keys = [Geometry(t).key() for t in ((8, 8, 8), (64, 64, 64), (16, 16, 16))]
    assert order[1:4] == keys  # its class first, then the other class, then earlier winners
    assert len(order) == len(set(order)) == len(task.space)


def test_random_local_tries_the_planners_fastest_predictions_before_the_random_sample():
    """After the default (and siblings and earlier winners of the class, none here) come the
    planner's MODEL_FIRST fastest predictions, one per tile, where they beat the default's
    prediction by MODEL_GAIN, then other classes' winners, then the rest of the space."""
    be = Fake()
    tuner = Tuner(be, "float32", budget=30, strategy="random+local", resume=False)
    square_won = Geometry((64, 64, 64)).key()
    tuner.winners["tiled"] = [("square", square_won)]
    for shape, n_first in (((1, 4, 4096, 256), tune_search.MODEL_FIRST), ((1, 96, 96, 96), 0)):
        task = Task(tuner, "tiled", "skinny_mn", shape)
        order = [g.key() for g in tuner.order(task)]
        bar = task.predicted[order[0]] / tune_search.MODEL_GAIN
        fast = sorted((gk for gk in order[1:] if task.predicted[gk] < bar), key=task.predicted.get)
        # 4 x 4096: smaller tiles predicted far faster than the 32x32 default; 96^3: near-ties
        assert len(fast[: tune_search.MODEL_FIRST]) == n_first and square_won not in fast
        assert order[1 : 1 + n_first] == fast[:n_first]
        assert order[1 + n_first] == square_won
        assert len(order) == len(set(order)) == len(task.space)


def test_numba_cuda_space_is_fitted_per_product_and_has_k_slices():
    """numba-cuda's candidates carry min_tile as its shipped tiles do, so shapefit fits a
    cold-tuned class tile to each product (without it a 64x128 ran 256^3 at 0.41 and
    4096x32x4096 at 0.15 of the shipped tiles on the H200), and the skinny classes can find
    K slices."""
    from tiledmm_backends.kernels.space import space

    from tiledmm.device.nvidia import reference_h200

    dev = reference_h200()
    geos = space("register", "float32", dev, kernels="numba")
    assert all(dict(g.options).get("min_tile") == 32 for g in geos)
    assert any(dict(g.options).get("split_k") == "auto" for g in geos)
    g = next(g for g in geos if g.block_tile[:2] == (64, 128) and "split_k" not in dict(g.options))
    small = shapefit.for_product(g, "register", 256, 256, 256, dev, "square")
    assert small.block_tile[0] * small.block_tile[1] < 64 * 128
    skinny = shapefit.for_product(g, "register", 4096, 32, 4096, dev, "skinny_mn")
    assert skinny.block_tile[1] == 32


def test_selection_keeps_the_default_unless_the_winner_is_faster(monkeypatch):
    be = Fake()
    tuner = Tuner(be, "float32", budget=30, strategy="exhaustive", resume=False)
    task = Task(tuner, "tiled", "square", (1, 64, 64, 64))
    data = (*tuner.operands(task.shape), np.empty((64, 64), np.float32))
    for g in task.space:
        tuner.evaluate(task, g, data)
    winner = max(task.ok(), key=lambda r: r["gflops"])
    for r in task.ok():  # make a non-default candidate the sweep's best
        r["gflops"] = 1.0 if r is not winner else 100.0
    dflt = task.default.key()
    if winner["geometry"] == dflt:
        pytest.skip("the default won the sweep")

    def race(default_first: bool):
        def rounds(task, geos, data, n=3):
            assert geos[0].key() == dflt  # the default always races
            won = [1.0 if g.key() == winner["geometry"] else 3.0 for g in geos[1:]]
            return [2.0 if not default_first else 0.5, *won]

        return rounds

    monkeypatch.setattr(tuner, "rounds", race(default_first=True))
    tuner.confirm(task, data)
    assert task.choice["geometry"] == dflt
    monkeypatch.setattr(tuner, "rounds", race(default_first=False))
    tuner.confirm(task, data)
    assert task.choice["geometry"] == winner["geometry"]
    assert task.default_gflops == pytest.approx(task.flops / 2.0 / 1e9)


def _cli(*argv) -> int:
    p = argparse.ArgumentParser()
    tune.add_arguments(p)
    return tune.main(p.parse_args(list(argv)))


def _race(be, m, geos, rounds=5):
    """Fastest seconds per geometry, alternating them (noise hits both alike; on a shared 2-core
    machine noise only adds time, so the minimum is the robust statistic here).

    The float64 reference is computed once, before the race: NumPy's BLAS threads keep spinning
    after a call, and on a 2-core machine they stole the kernel's threads (30x slower samples)
    when the reference ran between rounds."""
    rng = np.random.default_rng(7)
    a = rng.standard_normal((m, m)).astype(np.float32)
    b = rng.standard_normal((m, m)).astype(np.float32)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    A, B = be.asarray(a, a.dtype), be.asarray(b, b.dtype)
    dev, outs = be.device(), []
    plans = [tiledmm.make_plan(m, m, m, dtype="float32", kernel="register", device=dev,
                               geometry=g) for g in geos]  # fmt: skip
    times = [[] for _ in geos]
    for r in range(rounds + 1):  # round 0 warms every geometry up and is not counted
        for i, p in enumerate(plans):
            C = be.asarray(np.full((m, m), np.nan, np.float32), np.dtype(np.float32))
            t = be.timings(lambda p=p, C=C: be.run(p, A, B, C), repeat=3, warmup=1)
            times[i] += t if r else []
            outs.append(C)
    return [min(t) for t in times], max(rel_error(be.to_numpy(C), ref) for C in outs)


def _cold_start(backend: str, budget: str, cache) -> None:
    be = tiledmm.get_backend(backend)
    rc = _cli("--backend", backend, "--shapes", "192x192x192", "--budget", budget)
    assert rc == 0
    db = json.loads((cache / "tuning.json").read_text())["entries"]
    (e,) = [x for x in db if x["backend"] == backend]
    assert e["shape_class"] == "square" and e["measured"]["gflops"] > 0
    dispatch.clear_caches()
    plan = tiledmm.plan(192, 192, 192, backend=backend, kernel="register")
    assert plan.geometry_source.startswith("tuned on this device")
    default = tuning.select(be, "register", "float32", be.device(), "square", user=False)
    tuned = tiledmm.Geometry.from_dict(e)
    (t_tuned, t_default), err = _race(be, 192, [tuned, default])
    assert err < 1e-4  # correct (NaN-poisoned outputs, float64 reference)
    # not slower than the default: by construction (raced in the run); re-measured here with a
    # tolerance for a loaded 2-core machine
    assert t_tuned <= 1.5 * t_default, (t_tuned, t_default)
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((97, 131)), rng.standard_normal((131, 67))
    c = tiledmm.matmul(a.astype(np.float32), b.astype(np.float32), backend=backend)
    assert rel_error(c, a @ b) < 1e-4  # odd shape through matmul with the tuned tiles


def test_cold_start_numba_cpu(cache):
    pytest.importorskip("numba")
    pytest.importorskip("tiledmm_numba_cpu")
    _cold_start("numba-cpu", "6s", cache)


def test_cold_start_opencl_pocl(cache, monkeypatch):
    pytest.importorskip("pyopencl")
    from tiledmm_backends.kernels.space import space
    from tiledmm_backends.opencl import OpenCLBackend

    be = tiledmm.get_backend("opencl")
    if be.unavailable_reason() or be.device().is_gpu:
        pytest.skip("no OpenCL CPU device (PoCL)")
    if type(be).search_space is Backend.search_space:  # until the backend declares it
        monkeypatch.setattr(
            OpenCLBackend,
            "search_space",
            lambda self, k, d, dev: space(k, d, dev, stages=not self.state().pocl),
        )
    _cold_start("opencl", "10s", cache)


def test_committed_h200_cold_starts_reach_the_shipped_tiles():
    """benches/results/h200-tune-coldstart.json (benches/studies/tune_coldstart.py on the H200): for
    cupy, opencl and numba-cuda the cold-tuned register tiles reach >= 0.95 of the shipped
    ones at 4096^3 and 8192^3 and on the geometric mean of the every-shape set (issue 13)."""
    import math
    from pathlib import Path

    path = Path(__file__).parents[1] / "benches" / "results" / "h200-tune-coldstart.json"
    rows = json.loads(path.read_text())["benchmarks"]
    speed: dict = {}
    for r in rows:
        e = r["extra_info"]
        speed.setdefault(e["backend"], {}).setdefault((e["m"], e["n"], e["k"]), {})[
            e["tuned_from"]
        ] = e["gflops"]
    assert set(speed) == {"cupy", "opencl", "numba-cuda"}
    for backend, shapes in speed.items():
        ratio = {s: v["cold"] / v["shipped"] for s, v in shapes.items()}
        assert len(ratio) >= 17, backend
        assert ratio[(4096, 4096, 4096)] >= 0.95 and ratio[(8192, 8192, 8192)] >= 0.95, backend
        gm = math.exp(sum(map(math.log, ratio.values())) / len(ratio))
        assert gm >= 0.95, (backend, gm)


def test_committed_tuner_log_keys_round_trip():
    """Every geometry key in the committed tuner logs reads back to itself, and its text to
    the record's ``tiles``: ``Geometry.key`` keeps the spelling those logs resume by."""
    from pathlib import Path

    logs = Path(__file__).resolve().parents[1] / "benches" / "results" / "logs"
    recs = [json.loads(line) for p in sorted(logs.glob("*.jsonl"))
            for line in p.read_text().splitlines() if line.strip()]  # fmt: skip
    recs = [r for r in recs if isinstance(r.get("geometry"), str)]
    assert recs
    for r in recs:
        g = Geometry.from_key(r["geometry"])
        assert g.key() == r["geometry"]
        assert "tiles" not in r or str(g) == r["tiles"]
    g = Geometry((64, 32, 8), (4, 2), (("vm", 4), ("pad", 2)), registers=40)
    assert Geometry.from_dict(g.to_dict()) == Geometry(
        (64, 32, 8), (4, 2), (("pad", 2), ("vm", 4)), 40
    )
