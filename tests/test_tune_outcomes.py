"""How `tiledmm tune` ends (issues 40 and 39): a budget that runs out is not an error and the
closing line says which tasks it stopped; a task whose every candidate failed is exit 1 with
one line on stderr saying why; a resumed run after a SIGKILL ends the same way; the closing
table is true to docs/tuning.md: a class's geometry is never slower than the shipped default
over the class's shapes, and a shape where it is slower says so."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import tiledmm
from tiledmm import Backend, Geometry, cli
from tiledmm.core import dispatch, registry, tuning_check
from tiledmm.tune import command as tune
from tiledmm.tune.search import Tuner
from tiledmm.tune.task import Task


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEDMM_CACHE_DIR", str(tmp_path))
    dispatch.clear_caches()
    yield tmp_path
    registry.reload()
    dispatch.clear_caches()


class Tunable(Backend):
    """numpy's product under any tile; ``broken`` makes every launch fail."""

    name, kernels = "tunable-outcomes", ("tiled",)
    broken = False

    def search_space(self, kernel, dtype, device):
        return [Geometry((t, t, t)) for t in (8, 16, 32)]

    def run(self, plan, a, b, out):
        if self.broken:
            raise RuntimeError("launch failed (simulated)")
        np.matmul(a, b, out=out)


def _tune(capsys, be, *argv):
    tiledmm.register_backend(be)
    code = cli.main(["tune", "--backend", be.name, "--kernel", "tiled", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_budget_that_runs_out_is_not_an_error_and_says_so(capsys):
    code, out, err = _tune(capsys, Tunable(), "--shapes", "64x64x64,96x96x96", "--budget",
                           "0.001")  # fmt: skip
    assert code == 0, err
    assert "tiledmm tune: 0 of 2 task(s) done; 2 not measured: the 0.001 s budget ran out" in out
    assert "run the same command again" in out and "nothing saved" in out
    assert "(not measured: the budget ran out)" in out and "None" not in out
    assert "error" not in err


def test_every_candidate_failing_is_exit_1_with_the_reason(capsys):
    be = Tunable()
    be.broken = True
    code, out, err = _tune(capsys, be, "--shapes", "64x64x64", "--budget", "30s")
    assert code == 1
    (line,) = [x for x in err.splitlines() if "error" in x]
    assert line.startswith("tiledmm tune: error: 1 task(s) found no usable geometry: tiled "
                           "square 1x64x64x64: no correct candidate (")  # fmt: skip
    assert "launch failure" in line and "the log" in line
    assert "(no correct candidate)" in out and "0 of 1 task(s) done" in out


def test_a_finished_tune_is_exit_0_and_saves(capsys, cache):
    code, out, err = _tune(capsys, Tunable(), "--shapes", "64x64x64", "--budget", "30s")
    assert code == 0, err
    assert "tiledmm tune: 1 of 1 task(s) done; 1 entries saved" in out
    (e,) = json.loads((cache / "tuning.json").read_text())["entries"]
    assert e["backend"] == "tunable-outcomes"


RESUMABLE = """
import sys, time, numpy as np, tiledmm
from tiledmm import Backend, Geometry, cli

class Slow(Backend):
    name, kernels = "slow-tunable", ("tiled",)
    def search_space(self, kernel, dtype, device):
        return [Geometry((t, t, t)) for t in (4, 8, 12, 16, 24, 32, 48, 64)]
    def run(self, plan, a, b, out):
        time.sleep(0.02)
        np.matmul(a, b, out=out)

tiledmm.register_backend(Slow())
sys.exit(cli.main(["tune", "--backend", "slow-tunable", "--kernel", "tiled", "--shapes",
                   "64x64x64,odd", "--size", "128", "--budget", sys.argv[1]]))
"""


def test_a_tune_resumed_after_sigkill_ends_with_its_closing_line(cache, tmp_path):
    script = tmp_path / "resumable.py"
    script.write_text(textwrap.dedent(RESUMABLE))
    env = dict(os.environ, TILEDMM_CACHE_DIR=str(cache))
    first = subprocess.Popen([sys.executable, str(script), "5m"], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    logs = cache / "tune"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # killed once it has logged a few candidates
        found = list(logs.glob("*.jsonl")) if logs.exists() else []
        if found and len(found[0].read_bytes().splitlines()) >= 3:
            break
        time.sleep(0.05)
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=60)
    assert first.returncode == -signal.SIGKILL
    with open(found[0], "ab") as f:
        f.write(b'{"task": "float32|tiled|1x64x64x64", "geometry": "[[4')  # a torn last line
    second = subprocess.run([sys.executable, str(script), "60s"], env=env, capture_output=True,
                            text=True, timeout=300)  # fmt: skip
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-2000:]
    assert "tiledmm tune: 3 of 3 task(s) done" in second.stdout, second.stdout[-2000:]
    assert "unreadable line(s) skipped" in second.stderr


# --------------------------------------------------------------------------- the closing table


class Speeds(Tunable):
    """Reported GFLOP/s by block size and task (the race and the search are faked alike)."""

    name = "tunable-speeds"


def _tasks(speed: dict, default: int = 32):
    be = Speeds()
    be.geometry = lambda kernel, dtype, device: Geometry((default,) * 3, source="fake default")
    tuner = Tuner(be, "float32", budget=30, strategy="exhaustive", resume=False)
    small = Task(tuner, "tiled", "square", (1, 64, 64, 64))
    big = Task(tuner, "tiled", "square", (1, 96, 96, 96))
    for t in (small, big):
        data = (*tuner.operands(t.shape), np.empty(t.shape[1:3], np.float32))
        t.host = data[:5]
        for g in t.space:
            rec = tuner.evaluate(t, g, data)
            rec["gflops"] = speed.get((t is big, g.block_tile[0]), 0.5)
    return tuner, small, big


def _won(tuner, task, bm):
    task.choice = dict(task.results[Geometry((bm,) * 3).key()])
    task.default_gflops = 1.0  # the race's; unify replaces it with the search's


def test_a_class_keeps_the_default_when_the_winners_lose_to_it_over_the_class():
    # each task's winner is best on its own shape, but over both shapes the default (32) wins
    speed = {(False, 8): 5.0, (True, 8): 1.0, (False, 16): 1.0, (True, 16): 5.0,
             (False, 32): 3.0, (True, 32): 3.0}  # fmt: skip
    tuner, small, big = _tasks(speed)
    _won(tuner, small, 8)
    _won(tuner, big, 16)
    tuner.unify([small, big])  # 8: sqrt(5) = 2.24, 16: 2.24, the default: 3
    dk = Geometry((32, 32, 32)).key()
    assert small.choice["geometry"] == big.choice["geometry"] == dk
    assert small.default_gflops == big.default_gflops == 3.0 and not small.note


def test_a_shape_where_the_class_geometry_is_slower_says_so(capsys):
    speed = {(False, 8): 2.0, (True, 8): 9.0, (False, 16): 1.0, (True, 16): 1.0,
             (False, 32): 3.0, (True, 32): 3.0}  # fmt: skip
    tuner, small, big = _tasks(speed)
    _won(tuner, small, 32)
    _won(tuner, big, 8)
    tuner.unify([small, big])  # 8: sqrt(18) = 4.24 over the class beats the default's 3
    k8 = Geometry((8, 8, 8)).key()
    assert small.choice["geometry"] == big.choice["geometry"] == k8
    assert small.note.startswith("slower than the default on this shape (0.67); 1.41x it over")
    assert not big.note
    rows = tiledmm.tune.closing.closing(tuner, [small, big])
    assert rows[0]["gflops"] == 2.0 and rows[0]["default_gflops"] == 3.0
    assert "note: slower than the default on this shape" in capsys.readouterr().out
    for r in rows:  # the table's two columns are one way of measuring
        assert r["default_gflops"] == speed[(r["shape"][1] == 96, 32)]


def test_the_docs_state_the_exit_codes():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "tuning.md").read_text()
    assert "## Exit status" in text
    for code in ("0", "1", "2"):
        assert f"| {code} |" in text


def test_the_closing_table_module_is_what_tune_uses():
    assert tune.closing is tiledmm.tune.closing.closing
    assert tuning_check.SHAPE_CLASSES  # the checks import cleanly
