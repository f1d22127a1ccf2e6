"""The tuning database and the tuner's log under stress (issue 40): two processes saving at
once keep every entry; an entry that passes the schema but that the planner or the backend
refuses is dropped with one warning naming the file and the entry, and the next source
answers; duplicate keys follow the stated rule; any parse error degrades to that warning;
the tuner's log is read line by line, undecodable and torn lines skipped and counted."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import tiledmm
from tests.conftest import requires_backend
from tiledmm.core import dispatch, tuning, tuning_check
from tiledmm.core.tuning import TuningWarning
from tiledmm.tune.search import Tuner
from tiledmm.tune.task import Task


@pytest.fixture(autouse=True)
def cache(tuning_cache):
    return tuning_cache


def _entry(dev, backend="numpy", family="register", cls="square", bt=(64, 64, 64), tt=(8, 8),
           date="2026-12-01", **kw):  # fmt: skip
    e = dict(device=dev.name, vendor=dev.vendor, kind=dev.kind, backend=backend,
             dtype="float32", family=family, shape_class=cls, block_tile=list(bt),
             thread_tile=list(tt), options={}, measured=dict(gflops=10.0, date=date))  # fmt: skip
    e.update(kw)
    return e


# --------------------------------------------------------------------------- two writers

WRITER = """
import sys, time
from tiledmm.core import tuning
who, start = sys.argv[1], float(sys.argv[2])
while time.time() < start:
    time.sleep(0.001)
for i in range(100):
    e = dict(device=f"device {who}-{i}", backend="numpy", dtype="float32", family="tiled",
             shape_class="square", block_tile=[16, 16, 16], thread_tile=[1, 1], options={},
             measured=dict(gflops=1.0 + i, date="2026-12-01"))
    tuning.save_entries([e])
"""

READER = """
import sys, time
from pathlib import Path
from tiledmm.core import tuning_check
path, start = Path(sys.argv[1]), float(sys.argv[2])
torn = reads = 0
while time.time() < start + 60:
    if path.exists():
        entries, problems = tuning_check.read_database(path)
        reads += 1
        torn += bool(problems)
        if len(entries) == 200:
            break
print(reads, torn)
"""


def test_two_processes_saving_at_once_keep_every_entry(cache):
    import time

    start = f"{time.time() + 3:.3f}"  # both start together, after their imports
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, who, start],
                              stderr=subprocess.PIPE, text=True) for who in ("a", "b")]  # fmt: skip
    path = str(cache / "tuning.json")
    reader = subprocess.Popen([sys.executable, "-c", READER, path, start], text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    out, err = reader.communicate(timeout=300)
    assert reader.returncode == 0, err
    entries, problems = tuning_check.read_database(cache / "tuning.json")
    assert not problems
    names = {e["device"] for e in entries}
    assert names == {f"device {w}-{i}" for w in "ab" for i in range(100)}
    reads, torn = map(int, out.split())
    assert reads > 0 and torn == 0  # a reader never saw a half-written file
    assert not [p for p in cache.iterdir() if p.name.endswith(".tmp")]


# --------------------------------------------------------------------------- usable entries


@pytest.mark.parametrize(
    "change, why",
    [
        (dict(thread_tile=[7, 5]), "not a multiple of thread tile 7x5"),
        (dict(block_tile=[2**20, 64, 64]), "the planner refuses it"),
        (dict(options={"stages": "two"}), "cannot be planned"),
    ],
)
def test_an_entry_the_planner_refuses_is_dropped_and_named(cache, change, why):
    be = tiledmm.get_backend("numpy")
    dev = be.device()
    shipped = tiledmm.plan(1024, 1024, 1024, backend="numpy", kernel="register")
    tuning.save_entries([_entry(dev, **change)])  # it passes the schema
    dispatch.clear_caches()
    with pytest.warns(TuningWarning) as seen:
        p = tiledmm.plan(1024, 1024, 1024, backend="numpy", kernel="register")
    msgs = [str(w.message) for w in seen if issubclass(w.category, TuningWarning)]
    assert len(msgs) == 1
    assert str(cache / "tuning.json") in msgs[0] and why in msgs[0]
    assert "numpy/register/float32/square" in msgs[0]
    assert p.block_tile == shipped.block_tile and p.geometry_source == shipped.geometry_source
    a = np.ones((40, 30), np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once: the verdict is kept
        dispatch.clear_caches()
        np.testing.assert_array_equal(
            tiledmm.matmul(a, a.T, backend="numpy", kernel="register"), a @ a.T
        )


def test_a_refused_device_entry_falls_back_to_a_usable_arch_entry(cache):
    dev = tiledmm.get_backend("numpy").device()
    arch = tuning.device_arch(dev)
    if not arch:
        pytest.skip("this CPU has no architecture label")
    bad = _entry(dev, tt=(7, 5))
    good = dict(_entry(dev, bt=(32, 32, 32), tt=(4, 4)), arch=arch)
    del good["device"]
    tuning.save_entries([bad, good])
    with pytest.warns(TuningWarning, match="7x5"):
        p = tiledmm.plan(1024, 1024, 1024, backend="numpy", kernel="register")
    assert p.block_tile == (32, 32, 32) and "user tuning database" in p.geometry_source


def test_an_entry_that_fails_to_plan_one_product_falls_back_for_it(cache, monkeypatch):
    """The check plans an entry on one product of its class; should another product of the
    class still fail to plan, dispatch uses the next source for it, with one warning."""
    from tiledmm.core import tuning_check

    dev = tiledmm.get_backend("numpy").device()
    shipped = tiledmm.plan(1024, 1024, 1024, backend="numpy", kernel="register")
    tuning.save_entries([_entry(dev, tt=(7, 5))])
    monkeypatch.setattr(tuning, "unusable", lambda e, be, device: None)  # as if it passed
    assert tuning_check.unusable is not tuning.unusable
    with pytest.warns(TuningWarning, match="does not plan 1024x1024x1024 .*7x5"):
        dispatch.clear_caches()
        p = tiledmm.plan(1024, 1024, 1024, backend="numpy", kernel="register")
    assert p.block_tile == shipped.block_tile and "tuned" not in p.geometry_source


@requires_backend("numba-cpu")
def test_an_entry_the_backend_refuses_is_dropped(cache):
    be = tiledmm.get_backend("numba-cpu")
    tuning.save_entries([_entry(be.device(), backend="numba-cpu", bt=(128, 128, 128))])
    with pytest.warns(TuningWarning, match="backend 'numba-cpu' refuses it .*4 x TN"):
        p = tiledmm.plan(512, 512, 512, backend="numba-cpu", kernel="register")
    assert p.thread_tile[0] == 4 and not p.geometry_source.startswith("tuned")
    a = np.ones((64, 64), np.float32)
    np.testing.assert_allclose(tiledmm.matmul(a, a, backend="numba-cpu", kernel="register"), a @ a)


@requires_backend("opencl")
def test_an_opencl_entry_with_an_impossible_vector_width_is_dropped(cache):
    be = tiledmm.get_backend("opencl")
    dev = be.device()
    if dev.is_gpu:
        pytest.skip("the CPU micro-kernel's cpu_vec: PoCL")
    shipped = tiledmm.plan(1024, 1024, 1024, backend="opencl", kernel="register")
    opts = dict(shipped.options, cpu_vec=3)
    bm, tm = shipped.block_tile[0], shipped.thread_tile[0]
    e = _entry(dev, backend="opencl", bt=(bm, 48, 1), tt=(tm, 24), options=opts)
    tuning.save_entries([e])
    dispatch.clear_caches()
    with pytest.warns(TuningWarning, match="backend 'opencl' refuses it .*cpu_vec"):
        p = tiledmm.plan(1024, 1024, 1024, backend="opencl", kernel="register")
    assert p.options.get("cpu_vec") != 3


# --------------------------------------------------------------------------- the file


def test_duplicate_keys_newest_wins_then_the_later_and_are_named(cache):
    dev = tiledmm.get_backend("numpy").device()
    old = _entry(dev, bt=(16, 16, 16), tt=(4, 4), date="2026-11-01")
    new = _entry(dev, bt=(32, 32, 32), tt=(4, 4), date="2026-12-01")
    same_day = _entry(dev, bt=(64, 64, 64), tt=(4, 4), date="2026-12-01")
    (cache / "tuning.json").write_text(json.dumps({"entries": [new, old, same_day]}))
    with pytest.warns(TuningWarning) as seen:
        entries = tuning.user_entries()
    assert [e["block_tile"] for e in entries] == [[64, 64, 64]]
    text = " ".join(str(w.message) for w in seen)
    assert "entry 0 (" in text and "entry 1 (" in text and "has the same key" in text
    p = tiledmm.plan(1024, 1024, 1024, backend="numpy", kernel="register")
    assert p.block_tile == (64, 64, 64)
    tuning.save_entries([old, new])  # one save with two of a key: the last one is kept
    assert [e["block_tile"] for e in tuning_check.read_database(cache / "tuning.json")[0]] == [
        [32, 32, 32]
    ]


@pytest.mark.parametrize("text", ["[" * 100_000, '{"entries": [' + "[" * 100_000])
def test_a_deeply_nested_file_is_one_warning(cache, text):
    (cache / "tuning.json").write_text(text)
    with pytest.warns(TuningWarning, match="ignored, because it is not valid JSON"):
        p = tiledmm.plan(256, 256, 256, backend="numpy", kernel="register")
    assert p.geometry_source.startswith("shipped")


def test_a_deeply_nested_calibration_cache_is_one_warning(cache):
    from tiledmm.device.calibration import CalibrationWarning, load_calibration

    (cache / "calibration.json").write_text("[" * 100_000)
    with pytest.warns(CalibrationWarning, match="nested too deeply"):
        assert load_calibration() == {}


# --------------------------------------------------------------------------- the tuner's log


class Tunable(tiledmm.Backend):
    """A tunable host backend (numpy's product, any tile is right)."""

    name, kernels = "tunable-test", ("tiled",)

    def search_space(self, kernel, dtype, device):
        return [tiledmm.Geometry((t, t, t)) for t in (8, 16, 32)]

    def run(self, plan, a, b, out):
        np.matmul(a, b, out=out)


@pytest.fixture
def tunable():
    from tiledmm.core import registry

    be = Tunable()
    tiledmm.register_backend(be)
    yield be
    registry.reload()


def test_the_log_is_read_line_by_line_bad_lines_counted(cache):
    be = Tunable()
    log = tune_search_log(be)
    good = dict(task="t", geometry="g", status="ok", gflops=1.0, seconds=0.1)
    lines = [json.dumps(good).encode(), b"\xff\xfe not utf-8 \x80", b'{"task": "t", "geo',
             json.dumps(dict(good, geometry="h", status="ok")).replace('"gflops": 1.0, ', "")
             .encode(), b"[1, 2]", json.dumps(dict(good, geometry="k")).encode()]  # fmt: skip
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_bytes(b"\n".join(lines))  # the last line has no newline: torn
    with pytest.warns(TuningWarning, match=rf"tune log {log}: 4 unreadable line"):
        tuner = Tuner(be, "float32", budget=1, log=log)
    assert set(tuner.history) == {("t", "g"), ("t", "k")}


def tune_search_log(be):
    from tiledmm.tune.log import log_path

    return log_path(be.device().name, be.name)


def test_a_tune_with_a_non_utf8_log_runs_and_says_so(cache, capsys, tunable):
    from tiledmm import cli

    log = tune_search_log(tunable)
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_bytes(b"\xff\xfe\x00garbage\n")
    code = cli.main(["tune", "--backend", tunable.name, "--kernel", "tiled", "--shapes",
                     "64x64x64", "--budget", "20s", "--no-save"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 0, err
    assert f"tune log {log}: 1 unreadable line(s) skipped" in err


def test_tuner_log_lines_are_whole_under_concurrent_appends(cache):
    code = textwrap.dedent(
        """
        import sys
        from pathlib import Path
        from tiledmm.util.atomicfile import append_line
        path, who = Path(sys.argv[1]), sys.argv[2]
        for i in range(300):
            append_line(path, '{"who": "%s", "i": %d, "pad": "%s"}' % (who, i, "x" * 5000))
        """
    )
    path = cache / "log.jsonl"
    procs = [subprocess.Popen([sys.executable, "-c", code, str(path), w]) for w in "ab"]
    for p in procs:
        assert p.wait(timeout=300) == 0
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    assert sorted((r["who"], r["i"]) for r in recs) == [(w, i) for w in "ab" for i in range(300)]


# --------------------------------------------------------------------------- search spaces


@pytest.mark.parametrize("name", ["numpy", "opencl", "numba-cpu"])
def test_every_candidate_of_a_cpu_space_is_one_its_kernels_accept(name):
    from tests.conftest import backend_reason
    from tiledmm.planner.make import make_plan
    from tiledmm.planner.plans import PlanError

    if backend_reason(name):
        pytest.skip(f"{name}: {backend_reason(name)}")
    be = tiledmm.get_backend(name)
    dev = be.device()
    for fam in be.kernels:
        for dtype in be.dtypes:
            space = be.search_space(fam, dtype, dev) or []
            for g in space:
                try:
                    plan = make_plan(256, 256, 256, dtype=dtype, kernel=fam, device=dev,
                                     geometry=g, backend=name)  # fmt: skip
                except PlanError:
                    continue  # the planner's device limits prune it in the tuner
                assert be.plan_problem(plan) is None, (fam, dtype, g)
            tuner = Tuner(be, dtype, budget=1, resume=False)
            task = Task(tuner, fam, "square", (1, 256, 256, 256))
            for g in task.space:  # the defaults the tuner adds are checked too
                assert be.plan_problem(task.plan(g)) is None, (fam, dtype, g)


@requires_backend("numba-cpu")
def test_numba_cpus_tune_never_tries_a_tile_its_kernel_refuses(cache):
    be = tiledmm.get_backend("numba-cpu")
    tuner = Tuner(be, "float32", budget=1, resume=False)
    task = Task(tuner, "register", "square", (1, 256, 256, 256))
    model = tiledmm.planner.make.default_geometry("register", "float32", be.device())
    assert model.thread_tile == (8, 8)  # what the audit saw tried
    assert all(g.thread_tile[0] == 4 for g in task.space) and task.space
