"""First use's bounds and what it times (issue 37; the H200 first-contact run of session 18,
benches/results/logs/h200-first-contact-cupy-s18.txt): the class ``square`` was tuned four
times (9.8 s for a 2 s class budget, each run 2.0-3.2 s), and a batch was timed one matrix per
launch where dispatch runs it in one batched launch (its tiles then ran 0.59 of cuBLAS against
0.78 untuned). A fake host backend whose first run of a block tile sleeps, as a compile does, and
whose batches go through ``run_batched``; its timings are injected per block tile."""

from __future__ import annotations

import json
import logging
import re
import time
from dataclasses import replace

import numpy as np
import pytest

import tiledmm
from tiledmm import Backend, Geometry
from tiledmm.core import dispatch, tuning
from tiledmm.tune import first_use
from tiledmm.tune.search import Tuner
from tiledmm.tune.task import Task
from tiledmm.util.accuracy import rel_error

SPEED = {  # seconds per call, per block tile: the budget, not the list, bounds what is timed
    (16, 16, 16): 5e-5,
    (32, 32, 32): 1e-4,  # the shipped default
    (64, 64, 64): 2e-4,
    (8, 8, 8): 4e-4,
    (16, 32, 16): 6e-5,
    (32, 16, 32): 7e-5,
    (32, 64, 32): 8e-5,
    (64, 32, 16): 9e-5,
}
COMPILE = 0.4  # seconds a block tile's first run takes
BUDGET = 1.0


class Compiling(Backend):
    """A host backend that "compiles" each block tile on its first run (``compile`` seconds)
    and runs a batch in one call (``run_batched``), recording every call."""

    name, kernels, priority = "fake-first-use-bounds", ("tiled",), -100

    def __init__(self):
        self.calls: list[tuple] = []  # (how, block tile, output shape)
        self.compiled: set = set()
        self.compile = COMPILE

    def accepts(self, x):
        return False

    def device(self):
        return replace(tiledmm.host_cpu(), name="fake bounds device", launch_overhead=2e-6,
                       peak_flops=(("float32", 1e11), ("float64", 5e10)))  # fmt: skip

    def geometry(self, kernel, dtype, device):
        return Geometry((32, 32, 32), source="fake default")

    def search_space(self, kernel, dtype, device):
        return [Geometry(s) for s in SPEED]

    def _go(self, how, plan, out):
        self.calls.append((how, plan.block_tile, tuple(out.shape)))
        if plan.block_tile not in self.compiled:
            self.compiled.add(plan.block_tile)
            time.sleep(self.compile)

    def run(self, plan, a, b, out):
        self._go("run", plan, out)
        out[...] = a @ b

    def run_batched(self, plan, a, b, out):
        self._go("batched", plan, out)
        out[...] = np.matmul(a, b)
        return True

    def timings(self, fn, *, repeat=10, warmup=2):
        fn()
        return [SPEED.get(self.calls[-1][1], 1e-4)] * repeat


_BE: list[Compiling] = []


@pytest.fixture
def be(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEDMM_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv(first_use.ENABLE, "1")
    monkeypatch.setenv(tuning.IGNORE_SHIPPED, "1")
    monkeypatch.delenv(first_use.BUDGET, raising=False)
    first_use.reset()
    first_use.configure(shortlist=len(SPEED), budget=BUDGET)
    if not _BE:
        _BE.append(Compiling())
        tiledmm.register_backend(_BE[0])
    b = _BE[0]
    b.calls.clear()
    b.compiled.clear()
    b.compile = COMPILE
    dispatch.clear_caches()
    yield b
    first_use.configure()
    first_use.reset()
    dispatch.clear_caches()


def _operands(*shape, seed=0):
    *batch, m, n, k = shape
    rng = np.random.default_rng(seed)
    return rng.standard_normal((*batch, m, k)), rng.standard_normal((*batch, k, n))


def _entries(tmp_path):
    return json.loads((tmp_path / "tuning.json").read_text())["entries"]


def _runs(caplog) -> list[float]:
    """Seconds of each first-use run the log reports (every run's line says "in X s")."""
    out = []
    for r in caplog.records:
        got = re.search(r"\bin (\d+(?:\.\d+)?) s\b", r.getMessage())
        if r.name == "tiledmm" and "first use:" in r.getMessage() and got:
            out.append(float(got.group(1)))
    return out


def test_a_single_first_use_counts_every_compile_within_its_budget(be, tmp_path, caplog):
    """Each candidate's first run compiles (0.4 s); the budget (1 s) holds the current tiles'
    compile and every candidate begun. Before, the current tiles' first run was added to the
    deadline and a candidate began when the median cost so far fitted: 1.2 s and more."""
    a, b = _operands(256, 256, 256)
    t0 = time.monotonic()
    with caplog.at_level(logging.INFO, logger="tiledmm"):
        c = tiledmm.matmul(a, b, backend=be.name)
    took = time.monotonic() - t0
    assert rel_error(c, a @ b) < 1e-12
    timed = {t for how, t, shape in be.calls if shape == (256, 256)}
    assert len(timed) >= 2  # the current tiles and at least one candidate
    assert took <= BUDGET + 0.15, (took, timed)
    assert _entries(tmp_path)[0]["measured"]["class_seconds"] <= BUDGET + 0.1


def test_a_compile_seen_in_another_class_bounds_what_a_run_begins(be, tmp_path, caplog):
    """A class whose current tiles another class compiled evaluates them cheaply; its next
    candidate still needs a compile. A run begins one only where the time left holds the
    costliest evaluation the process has seen (on an H100 the cheap first evaluation let such
    runs take 2.4-3.0 s of 2)."""
    tiledmm.matmul(*_operands(256, 256, 256), backend=be.name)  # square: compiles (0.4 s each)
    compiled = set(be.compiled)
    first_use.configure(shortlist=len(SPEED), budget=0.3)
    with caplog.at_level(logging.INFO, logger="tiledmm"):
        a, b = _operands(255, 257, 253)  # odd: its current tiles are compiled already
        assert rel_error(tiledmm.matmul(a, b, backend=be.name), a @ b) < 1e-12
    assert tuning.shape_class(255, 257, 253) == "odd"
    runs = _runs(caplog)
    assert runs and max(runs) <= 0.3 + 0.1, runs
    assert be.compiled == compiled  # no candidate begun: each would compile past the budget


def test_a_class_is_tuned_once_and_its_total_is_bounded_over_its_shapes(be, tmp_path, caplog):
    """Calls of one class, each 8x the FLOPs of the last (a refinement each, before): one run,
    and the class's first-use seconds stay within its budget; a new process (the entry says the
    budget is spent) does not tune it again."""
    with caplog.at_level(logging.INFO, logger="tiledmm"):
        for n in (64, 128, 256, 512):
            a, b = _operands(n, n, n)
            assert rel_error(tiledmm.matmul(a, b, backend=be.name), a @ b) < 1e-12
        first_use.reset()
        dispatch.clear_caches()
        tiledmm.matmul(*_operands(1024, 1024, 1024), backend=be.name)
    saved = [r for r in caplog.records if "saved to" in r.getMessage()]
    assert len(saved) == 1, [r.getMessage() for r in saved]
    assert sum(_runs(caplog)) <= BUDGET + 0.15, _runs(caplog)
    [e] = _entries(tmp_path)
    assert e["measured"]["call_shape"] == [1, 64, 64, 64]
    assert any("not tuned again" in r.getMessage() for r in caplog.records)


def test_a_cheap_run_leaves_the_rest_of_the_class_budget_to_a_refinement(be, tmp_path):
    """Without compiles a run takes a fraction of the budget: a call 8x larger refines with
    what is left (the entry sums the class's seconds); once less than half is left, no more."""
    be.compile = 0.0
    tiledmm.matmul(*_operands(64, 64, 64), backend=be.name)
    [e1] = _entries(tmp_path)
    tiledmm.matmul(*_operands(256, 256, 256), backend=be.name)
    [e2] = _entries(tmp_path)
    assert e2["measured"]["call_shape"] == [1, 256, 256, 256]
    total = e2["measured"]["class_seconds"]
    assert total == pytest.approx(e1["measured"]["seconds_spent"]
                                  + e2["measured"]["seconds_spent"], abs=2e-3)  # fmt: skip
    assert total <= BUDGET
    # another process finds the class's budget nearly spent: it is not tuned again
    e2["measured"]["class_seconds"] = 0.6 * BUDGET
    tuning.save_entries([e2])
    first_use.reset()
    dispatch.clear_caches()
    be.calls.clear()
    tiledmm.matmul(*_operands(512, 512, 512), backend=be.name)
    assert {t for _, t, _ in be.calls} == {(16, 16, 16)}  # the entry's tiles, no short list
    assert _entries(tmp_path)[0]["measured"]["call_shape"] == [1, 256, 256, 256]
    # a call past the entry's reach (64x the FLOPs it was timed on): planned as if untuned
    be.calls.clear()
    tiledmm.matmul(*_operands(1024, 1024, 1024), backend=be.name)
    assert {t for _, t, _ in be.calls} == {(32, 32, 32)}  # the default tiles, no short list
    assert 2 * 1024**3 > tuning.FIRST_USE_REACH * 2 * 256**3
    plan = dispatch.plan_for(be, 1024, 1024, 1024, "float64")
    assert "first use" not in plan.geometry_source
    assert "first use" in dispatch.plan_for(be, 512, 512, 512, "float64").geometry_source


def test_first_use_times_a_batch_as_dispatch_runs_it(be, tmp_path):
    """A batched call's candidates are checked and timed through ``run_batched`` on the whole
    batch, as dispatch then runs the product; never one matrix per ``run``."""
    be.compile = 0.0
    first_use.configure(shortlist=len(SPEED), budget=60.0)
    a, b = _operands(8, 64, 64, 64)
    c = tiledmm.matmul(a, b, backend=be.name)
    assert rel_error(c, a @ b) < 1e-12
    on_shape = [(how, shape) for how, _, shape in be.calls if shape[-2:] == (64, 64)]
    assert len(on_shape) > 8  # the candidates, then the call itself
    assert set(on_shape) == {("batched", (8, 64, 64))}
    [e] = _entries(tmp_path)
    assert e["shape_class"] == "batched" and e["measured"]["shape"] == [8, 64, 64, 64]
    assert e["block_tile"] == [16, 16, 16]
    assert e["measured"]["gflops"] == pytest.approx(2 * 8 * 64**3 / 5e-5 / 1e9, rel=1e-3)


def test_tiledmm_tune_times_a_batch_as_dispatch_runs_it(be, tmp_path):
    """The same for ``tiledmm tune``'s tasks: checks, timing and the final race of a batched
    task go through ``run_batched`` on the whole batch; its log key says so."""
    be.compile = 0.0
    tuner = Tuner(be, "float64", budget=30, strategy="exhaustive", resume=False)
    task = Task(tuner, "tiled", "batched", (4, 32, 32, 32))
    tuner.search(task, 30)
    on_shape = {(how, shape) for how, _, shape in be.calls if shape[-2:] == (32, 32)}
    assert on_shape == {("batched", (4, 32, 32))}
    assert task.key.endswith("|as-dispatch")  # (logs of per-matrix launches are not reused)
    assert task.choice is not None and json.loads(task.choice["geometry"])[0] == [16, 16, 16]
    tuner.vendor_gflops(task, task.host)  # the vendor library: one call on the stacks
    assert tuner.vendor[task.key] > 0


def test_the_short_list_ranks_k_slices_for_skinny_products(monkeypatch):
    """CuPy's register space on the H200 (the model, no GPU): for 4096x32x4096 and
    16x8192x8192 the short list holds tiles in K slices (split_k "auto"), which the model ranks
    first; before, each tile took the current tiles' options, without slices."""
    from tiledmm_backends.cupy_cuda import CupyBackend

    from tiledmm.device.nvidia import reference_h200
    from tiledmm.tune.first_run import current_tiles
    from tiledmm.tune.shortlist import Shortlist

    monkeypatch.setenv(tuning.IGNORE_SHIPPED, "1")
    h200 = reference_h200()

    class Offline(CupyBackend):
        def device(self):
            return h200

        def device_key(self):
            return "offline H200"

        def search_space(self, kernel, dtype, device):  # a quarter of it, for time
            return [g for g in super().search_space(kernel, dtype, device)
                    if dict(g.options).get("group_m") == 1 and g.block_tile[2] == 16]  # fmt: skip

    off = Offline()
    for shape in [(1, 4096, 32, 4096), (1, 16, 8192, 8192)]:
        cur = current_tiles(off, "register", "float32", h200, "skinny_mn")
        sl = Shortlist(off, "register", "float32", "skinny_mn", shape, cur, 6,
                       time.monotonic() + 60.0)  # fmt: skip
        ranked = sl.candidates[2:]  # after the current tiles and the shipped default
        assert ranked, shape
        slices = [int(sl.plan(g).options.get("split_k", 1)) for g in ranked]
        assert slices[0] > 1 and dict(ranked[0].options)["split_k"] == "auto", (shape, ranked)


def test_a_backend_whose_one_evaluation_fills_the_budget_starts_no_more_runs(be, tmp_path,
                                                                           caplog):
    """numba-cuda compiled one register kernel in 5-6 s on an H100 (session 19), so every class
    spent 5-13 s of its 2 s. Once one evaluation took the whole class budget, no run could time
    a second candidate: later classes start none (their calls compile only what they run)."""
    be.compile = 1.2  # > BUDGET: the square class's first evaluation alone overruns
    with caplog.at_level(logging.INFO, logger="tiledmm"):
        tiledmm.matmul(*_operands(256, 256, 256), backend=be.name)
        first = _runs(caplog)
        calls = len(be.calls)
        a, b = _operands(255, 257, 253)  # odd: a new class
        t0 = time.monotonic()
        assert rel_error(tiledmm.matmul(a, b, backend=be.name), a @ b) < 1e-12
        took = time.monotonic() - t0
    assert first and first[0] >= 1.2
    assert any("one evaluation on" in r.getMessage() for r in caplog.records)
    assert len(be.calls) == calls + 1  # the user's call alone, no short list
    assert took < 0.2 and _runs(caplog)[-1] < 0.05
