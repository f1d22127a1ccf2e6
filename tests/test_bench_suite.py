"""``pytest benches/`` skips what ``tiledmm bench`` skips (one rule: tiledmm.bench.pace), shows its
progress, and times each call once (issue 39). Predicted times are injected, never measured,
so no outcome depends on this host's speed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import tiledmm
from tiledmm.bench import pace
from tiledmm.bench import sweep as bench

ROOT = Path(__file__).resolve().parent.parent

#: A pytest plugin for the suite's process: naive at 32^3 and above is predicted at a minute a
#: call, whatever this host measured; numpy's kernel calls are counted per case; the first
#: call at 16^3 of the register family takes over 2 s, and at 32^3 of the tiled one 0.6 s.
INJECT = """
import json, os, time
from collections import Counter

import pytest
import tiledmm
import tiledmm.bench.pace

def predict(self, backend, kernel, dtype, flops):
    return 60.0 if kernel == "naive" and flops >= 2 * 32**3 else None

tiledmm.bench.pace.Pace.predict = predict
CALLS = Counter()
kind = type(tiledmm.get_backend("numpy"))
run = kind.run

def counted(self, plan, a, b, out):
    key = f"{plan.kernel}-{a.shape[0]}"
    CALLS[key] += 1
    if key == "register-16" and CALLS[key] == 1:
        time.sleep(2.1)  # a first call (a JIT compile, say) over 4x the cap: still timed
    if key == "tiled-32" and CALLS[key] == 1:
        time.sleep(0.6)  # a check over the 0.5 s cap after 16^3 ran: correct, not timed
    return run(self, plan, a, b, out)

kind.run = counted

def pytest_sessionfinish(session):
    with open(os.environ["CALLS_FILE"], "w") as f:
        json.dump(CALLS, f)
"""


def _predict(self, backend, kernel, dtype, flops):
    return 60.0 if kernel == "naive" and flops >= 2 * 32**3 else None


def test_pace_predicts_from_the_last_shape_of_the_same_kind() -> None:
    p = pace.Pace()
    assert p.skip_reason("numpy", "naive", "float32", 2 * 2048**3, 5.0) is None  # nothing yet
    p.record("numpy", "naive", "float32", 2 * 1024**3, 1.5)  # 1024^3 in 1.5 s
    assert p.predict("numpy", "naive", "float32", 2 * 2048**3) == pytest.approx(12.0)
    reason = p.skip_reason("numpy", "naive", "float32", 2 * 2048**3, 5.0)
    assert reason == "about 12 s per call, over the 5.0 s cap"
    assert p.skip_reason("numpy", "tiled", "float32", 2 * 2048**3, 5.0) is None  # its own rate
    assert p.skip_reason("numpy", "naive", "float32", 2 * 1024**3, 5.0) is None
    # a check call over the cap: not timed, unless it was the first of its kind (a compile)
    assert p.after_check("numpy", "tiled", "float32", 2 * 256**3, 30.0, 5.0) is None
    reason = p.after_check("numpy", "naive", "float32", 2 * 1024**3, 7.5, 5.0)
    assert reason == "its check call took 7.5 s, over the 5.0 s cap"
    assert p.predict("numpy", "naive", "float32", 2 * 2048**3) == pytest.approx(60.0)
    assert p.after_check("numpy", "naive", "float32", 2 * 1024**3, 4.0, 5.0) is None


class _Timed:
    """A backend whose timings are injected: each call takes ``seconds``."""

    def __init__(self, seconds: float) -> None:
        self.seconds, self.warmups, self.calls = seconds, [], 0

    def timings(self, fn, *, repeat=10, warmup=2):
        self.warmups.append(warmup)
        self.calls += repeat
        return [self.seconds] * repeat


def test_a_call_longer_than_the_budget_is_timed_three_times_without_warm_up() -> None:
    s = bench.Settings.for_mode(False)  # budget 1 s, 5..30 rounds, 2 warm-up calls
    slow = _Timed(2.0)
    assert pace.time_fn(slow, lambda: None, s, first=2.1) == [2.0] * 3
    assert slow.warmups == [0, 0] and slow.calls == 3  # the check call was the warm-up
    fast = _Timed(0.01)
    assert len(pace.time_fn(fast, lambda: None, s, first=0.012)) == 30
    assert fast.warmups == [2, 0]
    mid = _Timed(0.5)  # under the budget: the usual minimum of 5 rounds
    assert len(pace.time_fn(mid, lambda: None, s, first=0.6)) == 5 and mid.warmups[0] == 2
    extra = []
    times = pace.time_fn(fast, lambda: None, s, rest=lambda n: extra.append(n) or [0.02] * n)
    assert extra == [29] and times == [0.01] + [0.02] * 29  # the rounds after the probe


def test_tiledmm_bench_skips_by_the_shared_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pace.Pace, "predict", _predict)
    be = tiledmm.get_backend("numpy")
    check = bench.check_case

    def slow_check(case, plan):  # the tiled check at 32^3 reports 9 s: injected, not measured
        err = check(case, plan)
        if plan.kernel == "tiled" and case.inputs.m == 32:
            case.checked = 9.0
        return err

    monkeypatch.setattr(bench, "check_case", slow_check)
    res = bench.run_sweep([be], shapes=[(16, 16, 16), (32, 32, 32)], quick=True, progress=False)
    naive, tiled = sorted(res.skipped, key=lambda s: s["kernel"])
    assert (naive["kernel"], naive["m"], tiled["kernel"], tiled["m"]) == ("naive", 32, "tiled", 32)
    assert naive["reason"] == "about 60 s per call, over the 0.5 s cap"
    assert tiled["reason"] == "its check call took 9 s, over the 0.5 s cap"
    assert len(res.benchmarks) == 2 * len(be.kernels) - 2


def _suite(tmp_path: Path, *extra: str) -> tuple[str, dict, dict]:
    (tmp_path / "inject_pace.py").write_text(textwrap.dedent(INJECT))
    out, calls = tmp_path / "b.json", tmp_path / "calls.json"
    env = dict(
        os.environ,
        TILEDMM_BENCH_QUICK="1",
        TILEDMM_BENCH_BACKENDS="numpy",
        TILEDMM_BENCH_SIZES="16,32",
        PYTHONPATH=str(tmp_path),
        CALLS_FILE=str(calls),
    )
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        str(ROOT / "benches"),
        "-p",
        "inject_pace",
        "-p",
        "no:cacheprovider",
        f"--benchmark-json={out}",
        "--rootdir",
        str(ROOT),
        *extra,
    ]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    return proc.stdout, json.loads(out.read_text()), json.loads(calls.read_text())


def test_benches_suite_skips_what_tiledmm_bench_skips_and_shows_progress(tmp_path: Path) -> None:
    out, doc, calls = _suite(tmp_path)
    ran = sorted(b["param"] for b in doc["benchmarks"])
    assert "numpy-naive-float32-32x32x32" not in ran and "numpy-tiled-float32-32x32x32" not in ran
    assert len(ran) == 4  # no other skip rule: register at 16^3 is timed after its 2.1 s call
    assert "SKIPPED" in out and "about 60 s per call, over the 0.5 s cap" in out
    assert "its check call took 0.6" in out and calls["tiled-32"] == 1  # checked, not timed
    assert "naive-32" not in calls  # skipped before any call
    # progress: a line per case as it runs, with its time when it passes; the load at the end
    assert "test_matmul[numpy-register-float32-32x32x32] PASSED (" in out
    assert "cases predicted over 0.5 s a call are skipped, as by `tiledmm bench`" in out
    assert "(1, 5, 15 min) when the run started, on " in out.split("benchmark: 5 tests")[-1]
    info = doc["machine_info"]["tiledmm"]
    assert len(info["loadavg_1_5_15min"]) == len(info["loadavg_at_end"]) == 3
    for b in doc["benchmarks"]:  # one timing loop: check, warm-up, probe, pytest-benchmark's
        e = b["extra_info"]  # rounds (before: the timed rounds, then as many again for it)
        assert e["timer"].startswith("host")
        assert calls[f"{e['kernel']}-{e['m']}"] <= 3 + b["stats"]["rounds"]
    out, doc, _ = _suite(tmp_path, "--tiledmm-all")
    assert len(doc["benchmarks"]) == 6 and "every case runs (--tiledmm-all)" in out


class _SlowVendor(tiledmm.Backend):
    """A vendor GEMM whose first call sleeps past a tiny budget; its timings are injected."""

    name, kernels = "slowvendor-test", ("naive",)

    def __init__(self) -> None:
        self.warmups: list[int] = []

    def run(self, plan, a, b, out):
        out[...] = a @ b

    def vendor_matmul(self, a, b):
        time.sleep(0.02)  # at least 0.02 s on any host: over the 0.01 s budget below
        return a @ b

    def timings(self, fn, *, repeat=10, warmup=2):
        self.warmups.append(warmup)
        return [0.05] * repeat


def test_a_slow_vendor_call_is_its_own_warm_up() -> None:
    be = _SlowVendor()
    case = bench.Case(be, bench.Inputs(8, 8, 8, "float32"))
    settings = bench.Settings(budget=0.01, min_rounds=5, max_rounds=30, warmup=2)
    vendor = bench.vendor_result(case, settings)
    assert be.warmups == [0, 0] and vendor["seconds"] == 0.05  # probe + 2 rounds, no warm-up
