"""First-use tuning (issue 37): the first call of a shape class on an untuned device times a
short list and keeps the winner. A fake host backend whose timings are injected per block tile
(no test depends on this machine's speed), with broken candidates: a wrong result, a simulated
compile error and rows left unwritten on large outputs only."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import tiledmm
from tiledmm import Backend, Geometry
from tiledmm.core import dispatch, tuning, tuning_check
from tiledmm.tune import first_use
from tiledmm.util.accuracy import rel_error

ROOT = Path(__file__).resolve().parents[1]

SPEED = {  # seconds per call, injected per block tile (the fastest three are broken)
    (24, 24, 24): 1e-5,  # wrong result
    (13, 13, 13): 2e-5,  # compile error
    (40, 40, 8): 3e-5,  # leaves rows >= 200 unwritten: right on 97x131x67, wrong on 256^3
    (16, 16, 16): 5e-5,  # the fastest correct one
    (32, 32, 32): 1e-4,  # the shipped default
    (64, 64, 64): 2e-4,
    (8, 8, 8): 4e-4,
}


class Fake(Backend):
    """A tunable host backend whose timings come from :data:`SPEED` (never the clock)."""

    name, kernels, priority = "fake-first-use", ("tiled",), -100

    def __init__(self):
        self.ran: list[tuple] = []
        self.lock = threading.Lock()

    def accepts(self, x):
        return False  # never chosen by backend="auto"

    def device(self):  # fixed rates: what is "too small to time" must not depend on the host
        return replace(tiledmm.host_cpu(), name="fake first-use device", launch_overhead=2e-6,
                       peak_flops=(("float32", 1e11), ("float64", 5e10)))  # fmt: skip

    def geometry(self, kernel, dtype, device):
        return Geometry((32, 32, 32), source="fake default")

    def search_space(self, kernel, dtype, device):
        return [Geometry(s) for s in SPEED]

    def run(self, plan, a, b, out):
        bm, bn, _ = plan.block_tile
        with self.lock:
            self.ran.append((plan.block_tile, plan.m, plan.n, plan.k))
        if bm == 13:
            raise RuntimeError("nvrtc: compile error (simulated)")
        out[...] = a @ b
        if bm == 24:
            out[0, 0] += 1.0
        if bm == 40 and out.shape[0] > 200:
            out[200:] = np.nan

    def timings(self, fn, *, repeat=10, warmup=2):
        fn()
        with self.lock:
            last = self.ran[-1][0]
        return [SPEED[last]] * repeat

    def tiles_run(self) -> set:
        return {t for t, *_ in self.ran}


_FAKE: list[Fake] = []


def _registered() -> Fake:
    """The one Fake of this process (a name registers once)."""
    if not _FAKE:
        _FAKE.append(Fake())
        tiledmm.register_backend(_FAKE[0])
    return _FAKE[0]


@pytest.fixture
def fake(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEDMM_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv(first_use.ENABLE, "1")
    monkeypatch.delenv(first_use.BUDGET, raising=False)
    first_use.reset()
    # every candidate, and a budget that only bounds (a loaded machine must not decide)
    first_use.configure(shortlist=len(SPEED) + 2, budget=60.0)
    be = _registered()
    be.ran.clear()
    dispatch.clear_caches()
    yield be
    first_use.configure()
    first_use.reset()
    dispatch.clear_caches()


def _operands(m, n, k, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((m, k)), rng.standard_normal((k, n))


def _entries(tmp_path):
    return json.loads((tmp_path / "tuning.json").read_text())["entries"]


def test_first_call_times_the_short_list_and_keeps_the_fastest_correct(fake, tmp_path, caplog):
    a, b = _operands(256, 256, 256)
    with caplog.at_level(logging.INFO, logger="tiledmm"):
        c = tiledmm.matmul(a, b, backend=fake.name)
    assert rel_error(c, a @ b) < 1e-12  # the user's call is right, with the winner's tiles
    assert fake.ran[-1][0] == (16, 16, 16)
    [e] = _entries(tmp_path)
    assert tuning_check.entry_problem(e) is None and tuning.is_first_use(e)
    assert (e["backend"], e["family"], e["shape_class"]) == (fake.name, "tiled", "square")
    assert e["block_tile"] == [16, 16, 16] and e["device"] == "fake first-use device"
    assert e["measured"]["call_shape"] == [1, 256, 256, 256]
    assert e["measured"]["default"].startswith("32x32x32")  # what ran before
    # the same fields as `tiledmm tune` writes (tiledmm.tune.command.entry)
    assert {"device", "vendor", "kind", "backend", "dtype", "family", "shape_class", "block_tile",
            "thread_tile", "options", "measured", "source"} <= set(e)  # fmt: skip
    assert {"gflops", "seconds", "shape", "date", "of_vendor", "default_gflops", "default",
            "candidates"} <= set(e["measured"])  # fmt: skip
    # one INFO line says so
    lines = [r for r in caplog.records if r.name == "tiledmm" and "first use" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.INFO
    assert "16x16x16" in lines[0].getMessage() and first_use.ENABLE in lines[0].getMessage()
    # the next plan of the class (another shape too) runs the winner and says where it came from
    p = tiledmm.plan(512, 512, 512, dtype="float64", backend=fake.name)
    assert p.block_tile == (16, 16, 16) and p.geometry_source.startswith("first use on this")


def test_broken_candidates_are_tried_but_never_kept(fake, tmp_path):
    a, b = _operands(256, 256, 256)
    tiledmm.matmul(a, b, backend=fake.name)
    tried = fake.tiles_run()
    assert {(24, 24, 24), (13, 13, 13), (40, 40, 8)} <= tried  # checked ...
    # ... but the wrong one failed on the edge product, and the one that leaves rows
    # unwritten on large outputs was caught on the caller's shape (97x131x67 passed)
    assert any(t == (40, 40, 8) and m == 256 for t, m, *_ in fake.ran)
    assert _entries(tmp_path)[0]["block_tile"] == [16, 16, 16]


def test_off_switch_runs_and_writes_nothing(fake, tmp_path, monkeypatch):
    monkeypatch.setenv(first_use.ENABLE, "0")
    a, b = _operands(256, 256, 256)
    before = tiledmm.plan(256, 256, 256, dtype="float64", backend=fake.name)
    c = tiledmm.matmul(a, b, backend=fake.name)
    assert rel_error(c, a @ b) < 1e-12
    assert fake.tiles_run() == {(32, 32, 32)}  # only the call itself, with today's tiles
    assert not (tmp_path / "tuning.json").exists()
    dispatch.clear_caches()
    assert tiledmm.plan(256, 256, 256, dtype="float64", backend=fake.name) == before
    first_use.configure(enabled=True, budget=60.0)  # Python's setting wins over the environment
    tiledmm.matmul(*_operands(256, 256, 200), backend=fake.name)
    assert (tmp_path / "tuning.json").exists()


def test_budget_bounds_the_list_and_a_failed_list_is_remembered(fake, tmp_path, monkeypatch):
    ticks = iter(range(0, 10_000))
    monkeypatch.setattr(first_use, "clock", lambda: float(next(ticks)))  # 1 s per look
    first_use.configure(budget=3.0, shortlist=len(SPEED) + 2)
    tiledmm.matmul(*_operands(256, 256, 256), backend=fake.name)
    checked = {t for t, m, *_ in fake.ran if m == 256}
    assert len(checked) <= 4  # the current tiles and what 3 s of (fake) clock allowed
    assert len(checked) < len(SPEED)
    # every candidate broken: nothing kept, and the class is not tried again this process
    fake.ran.clear()
    monkeypatch.setattr(Fake, "timings", lambda self, fn, **kw: (_ for _ in ()).throw(
        RuntimeError("launch failure")))  # fmt: skip
    first_use.reset()
    (tmp_path / "tuning.json").unlink(missing_ok=True)
    monkeypatch.setattr(first_use, "clock", lambda: 0.0)
    for n in (300, 301, 302):
        tiledmm.matmul(*_operands(n, n, n), backend=fake.name)
    assert not (tmp_path / "tuning.json").exists()
    odd = {m for t, m, *_ in fake.ran if t != (32, 32, 32) and m != 97}
    assert odd == {300}  # the short list ran for the first call only


def test_threads_meeting_one_class_tune_it_once(fake, tmp_path):
    a, b = _operands(256, 256, 256)
    errors = []

    def call(i):
        try:
            c = tiledmm.matmul(a + i, b, backend=fake.name)
            assert rel_error(c, (a + i) @ b) < 1e-12
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    edge_checks = [t for t, m, *_ in fake.ran if m == 97 and t == (16, 16, 16)]
    assert len(edge_checks) == 1  # one short list, not four
    assert len(_entries(tmp_path)) == 1


def test_small_products_wait_larger_calls_refine(fake, tmp_path):
    tiledmm.matmul(*_operands(2, 2, 2), backend=fake.name)  # launch-bound: nothing to time
    assert not (tmp_path / "tuning.json").exists()
    tiledmm.matmul(*_operands(64, 64, 64), backend=fake.name)
    assert _entries(tmp_path)[0]["measured"]["call_shape"] == [1, 64, 64, 64]
    tiledmm.matmul(*_operands(96, 96, 96), backend=fake.name)  # 3.4x the FLOPs: kept
    assert _entries(tmp_path)[0]["measured"]["call_shape"] == [1, 64, 64, 64]
    first_use.reset()  # a new process: the file says what it was tuned for
    tiledmm.matmul(*_operands(256, 256, 256), backend=fake.name)  # 64x: tuned again
    [e] = _entries(tmp_path)
    assert e["measured"]["call_shape"] == [1, 256, 256, 256]


def test_host_bound_products_wait_for_a_larger_call(fake, tmp_path, monkeypatch):
    """Where the backend's measured host cost outweighs the product's kernel whatever the
    tiles, first use leaves the class to a larger call (PoCL on the EPYC spent 3.84 s of the
    class's 5 on 64^3: 12 us of kernel beside 257 us of host cost)."""
    dev = replace(fake.device(), host_costs=((fake.name, 1e-3),))
    monkeypatch.setattr(fake, "device", lambda: dev)
    tiledmm.matmul(*_operands(64, 64, 64), backend=fake.name)
    assert not (tmp_path / "tuning.json").exists()
    tiledmm.matmul(*_operands(512, 512, 512), backend=fake.name)
    assert _entries(tmp_path)[0]["measured"]["call_shape"] == [1, 512, 512, 512]


def test_a_full_tune_entry_is_never_overridden(fake, tmp_path):
    dev = fake.device()
    mine = dict(device=dev.name, vendor=dev.vendor, kind=dev.kind, backend=fake.name,
                dtype="float64", family="tiled", shape_class="square", block_tile=[64, 64, 64],
                thread_tile=[1, 1], options={},
                measured=dict(gflops=1.0, date="2026-12-01"))  # fmt: skip
    tuning.save_entries([mine])
    tiledmm.matmul(*_operands(256, 256, 256), backend=fake.name)
    assert fake.tiles_run() == {(64, 64, 64)}
    assert _entries(tmp_path) == [mine]


def test_corrupt_database_degrades_with_one_warning(fake, tmp_path):
    (tmp_path / "tuning.json").write_text("{not json")
    a, b = _operands(256, 256, 256)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        c = tiledmm.matmul(a, b, backend=fake.name)
        tiledmm.matmul(*_operands(300, 300, 300), backend=fake.name)
    assert rel_error(c, a @ b) < 1e-12
    assert [w.category for w in got] == [tuning.TuningWarning], [str(w.message) for w in got]
    assert fake.tiles_run() == {(32, 32, 32)}  # untuned
    assert (tmp_path / "tuning.json").read_text() == "{not json"


def test_unwritable_database_degrades_with_one_warning(fake, tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("TILEDMM_CACHE_DIR", str(blocker / "cache"))
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        for n in (256, 300):
            a, b = _operands(n, n, n)
            assert rel_error(tiledmm.matmul(a, b, backend=fake.name), a @ b) < 1e-12
    assert len(got) == 1 and "cannot be written" in str(got[0].message)
    assert fake.tiles_run() == {(32, 32, 32)}


def test_tune_quick_prewarms_every_class(fake, tmp_path, capsys):
    from tiledmm import cli

    rc = cli.main(["tune", "--backend", fake.name, "--kernel", "tiled", "--dtype", "float64",
                   "--quick", "--size", "256", "--shapes", "squares,odd"])  # fmt: skip
    assert rc == 0, capsys.readouterr()
    got = {e["shape_class"]: e for e in _entries(tmp_path)}
    assert set(got) == {"square", "odd"}
    assert all(tuning.is_first_use(e) and e["block_tile"] == [16, 16, 16] for e in got.values())


def test_processes_meeting_one_class_leave_one_valid_entry(tmp_path):
    """Three processes tune one class at once into one database: one valid entry."""
    code = (
        "import sys, numpy as np, tiledmm\n"
        f"sys.path.insert(0, {str(ROOT / 'tests')!r})\n"
        "from test_first_use import Fake\n"
        "be = Fake()\n"
        "tiledmm.register_backend(be)\n"
        "a = np.ones((256, 256))\n"
        "assert (tiledmm.matmul(a, a, backend=be.name) == 256).all()\n"
        "assert any(t == (16, 16, 16) for t, *_ in be.ran)\n"
    )
    env = dict(os.environ, TILEDMM_CACHE_DIR=str(tmp_path), **{first_use.ENABLE: "1"})
    env[first_use.SIZE] = str(len(SPEED) + 2)  # every candidate, whatever the model ranks
    env[first_use.BUDGET] = "120"  # a bound only: on a loaded machine every candidate is timed
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, cwd=ROOT) for _ in range(3)]
    assert all(p.wait(timeout=300) == 0 for p in procs)
    [e] = _entries(tmp_path)
    assert tuning_check.entry_problem(e) is None and e["block_tile"] == [16, 16, 16]


def test_settings_from_the_environment(monkeypatch):
    first_use.configure()
    monkeypatch.setenv(first_use.ENABLE, "off")
    monkeypatch.setenv(first_use.BUDGET, "750ms")
    monkeypatch.setenv(first_use.SIZE, "3")
    s = first_use.settings(gpu=True)
    assert (s.enabled, s.budget, s.shortlist) == (False, 0.75, 3)
    monkeypatch.delenv(first_use.BUDGET)
    monkeypatch.delenv(first_use.ENABLE)
    assert first_use.settings(gpu=True).budget == first_use.GPU_BUDGET
    assert first_use.settings(gpu=False).budget == first_use.CPU_BUDGET
    assert first_use.settings(gpu=False).enabled
    with pytest.raises(ValueError):
        first_use.configure(shortlist=0)


def test_the_test_suite_runs_without_first_use_tuning():
    assert os.environ.get(first_use.ENABLE) == "0"  # tests/conftest.py


def test_info_plan_and_bench_rows_say_where_the_tiles_came_from(fake, capsys):
    from tiledmm import cli
    from tiledmm.bench.sweep import run_sweep
    from tiledmm.tune import provenance

    assert cli.main(["plan", "256", "256", "256", "--backend", fake.name, "--dtype",
                     "float64"]) == 0  # fmt: skip
    assert "tiles from: shipped default; matmul's first call" in capsys.readouterr().out
    tiledmm.matmul(*_operands(256, 256, 256), backend=fake.name)
    assert cli.main(["plan", "512", "512", "512", "--backend", fake.name, "--dtype",
                     "float64"]) == 0  # fmt: skip
    assert "tiles from: first use\n" in capsys.readouterr().out
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out.split(f"{fake.name} ", 1)[1]
    assert "tiles: first use: tiled/float64/square; shipped: shipped defaults for cpu" in out
    assert "calibration: " in out and "tuning: first use on" in out
    res = run_sweep([fake], kernels=["tiled"], dtypes=["float64"],
                    shapes=[(320, 320, 320), (300, 300, 300)], quick=True,
                    progress=False)  # fmt: skip
    # the square entry serves squares; an odd product is not planned on a square's first use
    got = [b["extra_info"]["tiles_from"] for b in res.benchmarks]
    assert got == ["first use", "shipped default"]
    for src, want in [("tuned on this device, 2026-12-01 (...)", "tiledmm tune"),
                      ("shipped table for NVIDIA H200: ...", "shipped table"),
                      ("shipped default for gpu: ...", "shipped default"),
                      ("model default", "model default"), ("requested", "requested")]:  # fmt: skip
        assert provenance.origin(src) == want


def test_an_error_while_tuning_is_remembered_and_the_call_still_runs(fake, tmp_path, monkeypatch):
    from tiledmm.tune import shortlist

    calls = []

    def boom(self):
        calls.append(self.shape)
        raise RuntimeError("out of memory (simulated)")

    monkeypatch.setattr(shortlist.Shortlist, "operands", boom)
    for n in (256, 384, 512):  # one class (square)
        a, b = _operands(n, n, n)
        assert rel_error(tiledmm.matmul(a, b, backend=fake.name), a @ b) < 1e-12
    assert len(calls) == 1 and not (tmp_path / "tuning.json").exists()


def test_a_device_with_its_own_shipped_table_is_left_alone(fake, tmp_path, monkeypatch):
    def geometry(self, kernel, dtype, device):  # a table for this device's name
        own = device.name == "fake first-use device"
        return Geometry((64, 64, 64) if own else (32, 32, 32), source="fake table")

    monkeypatch.setattr(Fake, "geometry", geometry)
    monkeypatch.delenv(tuning.IGNORE_SHIPPED, raising=False)
    tiledmm.matmul(*_operands(256, 256, 256), backend=fake.name)
    assert fake.tiles_run() == {(64, 64, 64)} and not (tmp_path / "tuning.json").exists()
    monkeypatch.setenv(tuning.IGNORE_SHIPPED, "1")  # cold experiments hide it: then it tunes
    first_use.reset()
    dispatch.clear_caches()
    tiledmm.matmul(*_operands(256, 256, 256), backend=fake.name)
    assert _entries(tmp_path)[0]["block_tile"] == [16, 16, 16]


def test_a_win_within_the_noise_keeps_the_tiles_before(fake, tmp_path, monkeypatch):
    """The fastest correct candidate timed 2% faster than the tiles before (the default,
    32^3): within KEEP_MARGIN, so the entry keeps the tiles before; 10% faster replaces them."""
    from tiledmm.tune import first_run

    monkeypatch.setitem(SPEED, (16, 16, 16), SPEED[(32, 32, 32)] / 1.02)
    tiledmm.matmul(*_operands(256, 256, 256), backend=fake.name)
    [e] = _entries(tmp_path)
    assert e["block_tile"] == [32, 32, 32] and 1.02 < first_run.KEEP_MARGIN
    first_use.reset()
    monkeypatch.setitem(SPEED, (16, 16, 16), SPEED[(32, 32, 32)] / 1.1)
    first_use.tune_class(fake, "tiled", "float64", (1, 256, 256, 256), force=True)
    assert _entries(tmp_path)[0]["block_tile"] == [16, 16, 16]
