"""Measured host costs (issue 37): each backend's per-call host cost, from the calibration
record, in every plan's predicted time; first-use calibration measures it (and the device's
ceilings where none are cached) on a backend's first call, once per device and backend per
process, bounded, with first-use tuning's opt-out. A fake host backend on a device of its own,
with tiny calibration sizes (no test depends on this machine's speed)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import tiledmm
from tiledmm import Backend
from tiledmm.core import dispatch
from tiledmm.device.calibration import load_calibration, save_calibration
from tiledmm.tune import calibrate, first_calibration, first_use, host_cost
from tiledmm.util.accuracy import rel_error

DEVICE = "fake calibration device"


class Fake(Backend):
    """A host backend on a device of its own; ``slow`` seconds added to each vendor GEMM (the
    ceilings' probe) or each product (the host-cost probe), ``broken`` vendor GEMMs raise."""

    name, kernels, priority = "fake-calibration", ("tiled",), -100

    def __init__(self):
        self.products = 0
        self.vendor_calls = 0
        self.slow = {"vendor": 0.0, "run": 0.0}
        self.broken = False

    def accepts(self, x):
        return False  # never chosen by backend="auto"

    def device(self):
        spec = replace(tiledmm.host_cpu(), name=DEVICE, launch_overhead=2e-6, host_costs=())
        return spec.with_calibration()

    def vendor_matmul(self, a, b):
        self.vendor_calls += 1
        if self.broken:
            raise RuntimeError("vendor GEMM failed (simulated)")
        time.sleep(self.slow["vendor"])
        return np.matmul(a, b)

    def run(self, plan, a, b, out):
        self.products += 1
        time.sleep(self.slow["run"])
        out[...] = a @ b


_FAKE: list[Fake] = []


@pytest.fixture
def fake(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEDMM_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv(first_use.ENABLE, "1")
    monkeypatch.setenv(first_calibration.ENABLE, "1")
    monkeypatch.delenv(first_calibration.BUDGET, raising=False)
    monkeypatch.setitem(calibrate._SIZES, ("cpu", True), (32, 48))
    monkeypatch.setitem(calibrate._COPY_BYTES, ("cpu", True), 1 << 16)
    monkeypatch.setattr(host_cost, "CALLS", {True: 8, False: 8})
    if not _FAKE:
        _FAKE.append(Fake())
        tiledmm.register_backend(_FAKE[0])
    be = _FAKE[0]
    be.products = be.vendor_calls = 0
    be.slow = {"vendor": 0.0, "run": 0.0}
    be.broken = False
    first_calibration.reset()
    first_calibration.configure(budget=60.0)  # a bound only: a loaded machine must not decide
    dispatch.clear_caches()
    yield be
    first_calibration.configure()
    first_use.configure()
    first_calibration.reset()
    dispatch.clear_caches()


def _record(tmp_path):
    return json.loads((tmp_path / "calibration.json").read_text())[DEVICE]


def _product(be, n=24):
    rng = np.random.default_rng(n)
    a, b = rng.standard_normal((n, n)), rng.standard_normal((n, n))
    c = tiledmm.matmul(a, b, backend=be.name)
    assert rel_error(c, a @ b) < 1e-12
    return c


def test_measured_host_cost_reaches_the_plan(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEDMM_CACHE_DIR", str(tmp_path))
    dispatch.clear_caches()
    host = tiledmm.host_cpu()
    before = tiledmm.plan(64, 64, 64, backend="numpy", kernel="tiled")
    assert "host cost per call 2 us (estimate" in str(before)
    # a record of host costs alone: valid, the ceilings stay estimated, numpy's cost is its own
    save_calibration(host.name, {"host_cost": {"numpy": {"seconds": 1e-3}}})
    dispatch.clear_caches()
    after = tiledmm.plan(64, 64, 64, backend="numpy", kernel="tiled")
    assert after.predicted_seconds == pytest.approx(before.predicted_seconds + 1e-3 - 2e-6)
    assert "host cost per call 1 ms (measured by `tiledmm calibrate`)" in str(after)
    assert after.to_dict()["host_cost"] == 1e-3 and not after.device.ceilings_measured
    dev = tiledmm.host_cpu()
    assert dev.host_cost("numpy") == 1e-3 and dev.host_cost("another") == 2e-6  # the estimate
    assert "estimate" in dev.host_cost_source("another")
    # a full calibration keeps numpy's host cost beside its own backend's
    rec = {"peak_flops": {"float32": 2e11}, "bandwidth": 3e10,
           "host_cost": {"opencl": {"seconds": 5e-4}}}  # fmt: skip
    save_calibration(host.name, rec)
    saved = load_calibration()[host.name]
    assert set(saved["host_cost"]) == {"numpy", "opencl"} and saved["bandwidth"] == 3e10
    dev = tiledmm.host_cpu()
    assert dev.ceilings_measured and dict(dev.host_costs) == {"numpy": 1e-3, "opencl": 5e-4}
    dispatch.clear_caches()


def test_first_call_calibrates_once_and_writes_the_cache(fake, tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="tiledmm"):
        _product(fake)
        _product(fake, 40)
    lines = [r.getMessage() for r in caplog.records if "calibrated" in r.getMessage()]
    assert len(lines) == 1 and fake.name in lines[0] and first_use.ENABLE in lines[0]
    rec = _record(tmp_path)
    cost = rec["host_cost"][fake.name]
    assert rec["first_use"] and cost["seconds"] >= 0 and cost["calls"] == 8
    assert set(rec["peak_flops"]) == {"float32", "float64"} and rec["bandwidth"] > 0
    assert "host_arrays" in cost  # this backend takes no NumPy arrays: the copies measured
    vendor = fake.vendor_calls
    assert vendor > 0
    # the next plan is on the measurements; a new process finds them cached: nothing again
    dev = fake.device()
    assert dev.ceilings_measured and dev.host_cost(fake.name) == cost["seconds"]
    plan = dispatch.plan_for(fake, 24, 24, 24, "float64")
    assert "measured" in plan.to_dict()["host_cost_source"]
    first_calibration.reset()
    _product(fake, 56)
    assert fake.vendor_calls == vendor and _record(tmp_path) == rec


def test_ceilings_on_record_are_kept(fake, tmp_path):
    save_calibration(DEVICE, {"peak_flops": {"float32": 1e11}, "bandwidth": 1e10})
    _product(fake)
    rec = _record(tmp_path)
    assert fake.vendor_calls == 0 and rec["peak_flops"] == {"float32": 1e11}
    assert rec["host_cost"][fake.name]["first_use"] and "first_use" not in rec
    assert "date" not in rec  # the record's own keys stay as they were


@pytest.mark.parametrize("off", ["tuning env", "tuning python", "calibration env",
                                 "calibration python"])  # fmt: skip
def test_opt_out(fake, tmp_path, monkeypatch, off):
    if off == "tuning env":
        monkeypatch.setenv(first_use.ENABLE, "0")
    elif off == "tuning python":
        first_use.configure(enabled=False)
    elif off == "calibration env":
        monkeypatch.setenv(first_calibration.ENABLE, "off")
    else:
        first_calibration.configure(enabled=False)
    _product(fake)
    assert fake.vendor_calls == 0 and not (tmp_path / "calibration.json").exists()
    # off is not remembered: turned on again in this process, the next call calibrates
    monkeypatch.setenv(first_use.ENABLE, "1")
    monkeypatch.setenv(first_calibration.ENABLE, "1")
    first_use.configure()
    first_calibration.configure(budget=60.0)
    _product(fake, 40)
    assert fake.name in _record(tmp_path)["host_cost"]


def test_time_bound_with_a_slow_probe(fake, tmp_path, monkeypatch):
    """The vendor GEMM (the peak probe) takes 0.15 s a call: the first size's four calls run,
    nothing after the budget begins; unbounded it would be 16 calls."""
    fake.slow["vendor"] = 0.15
    monkeypatch.setenv(first_calibration.BUDGET, "0.2")
    first_calibration.configure()
    t0 = time.monotonic()
    _product(fake)
    took = time.monotonic() - t0
    rec = _record(tmp_path)
    assert fake.vendor_calls == 4 and took < 0.2 + 4 * 0.15 + 1.0
    assert list(rec["peak_flops"]) == ["float32"] and "float64" in rec["cut"]
    assert "levels" not in rec and fake.name in rec["host_cost"]


def test_budget_spent_before_the_ceilings(fake, tmp_path):
    """Products of 0.05 s: the host-cost probe's warm-up and five calls spend the 0.1 s budget;
    the record holds the host cost alone and the ceilings stay estimated."""
    fake.slow["run"] = 0.05
    first_calibration.configure(budget=0.1)
    _product(fake)
    rec = _record(tmp_path)
    assert "peak_flops" not in rec and rec["host_cost"][fake.name]["calls"] == host_cost.MIN_CALLS
    assert fake.vendor_calls == 0 and not fake.device().ceilings_measured
    assert fake.device().host_cost(fake.name) == rec["host_cost"][fake.name]["seconds"]


def test_failed_calibration_is_remembered_and_results_stay_right(fake, tmp_path, caplog):
    fake.broken = True
    with caplog.at_level(logging.INFO, logger="tiledmm"):
        _product(fake)
        _product(fake, 40)
    assert fake.vendor_calls == 1  # one attempt this process
    assert any("calibration of fake-calibration failed" in r.getMessage() for r in caplog.records)
    assert not (tmp_path / "calibration.json").exists()
    assert fake.device().host_cost(fake.name) == 2e-6  # the estimate


def test_unwritable_cache_is_a_remembered_failure(fake, tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv("TILEDMM_CACHE_DIR", str(blocker / "cache"))
    monkeypatch.setenv(first_use.ENABLE, "1")
    _product(fake)
    _product(fake, 40)
    assert fake.products > 0 and fake.vendor_calls == 0


_CHILD = """
import json, sys, time
sys.path.insert(0, {tests!r})
import tiledmm
from test_first_calibration import Fake, _product
from tiledmm.tune import calibrate, first_calibration, host_cost
calibrate._SIZES[("cpu", True)] = (32, 48)
calibrate._COPY_BYTES[("cpu", True)] = 1 << 16
host_cost.CALLS = {{True: 8, False: 8}}
be = Fake()
be.slow["run"] = 0.05  # the host-cost probe alone takes over half a second
tiledmm.register_backend(be)
first_calibration.configure(budget=60.0)
ready = {ready!r} + "/" + sys.argv[1]
open(ready, "w").close()
while sum(1 for _ in __import__("pathlib").Path({ready!r}).iterdir()) < 2:
    time.sleep(0.01)
_product(be)
print(json.dumps({{"vendor": be.vendor_calls, "products": be.products}}))
"""


def test_two_processes_calibrate_one_backend_once(tmp_path):
    """Two processes meet an uncalibrated backend at the same moment: one measures, the other
    waits for it and plans on its record; one valid record."""
    ready = tmp_path / "ready"
    ready.mkdir()
    code = _CHILD.format(tests=str(Path(__file__).parent), ready=str(ready))
    env = dict(os.environ, TILEDMM_CACHE_DIR=str(tmp_path / "cache"),
               **{first_use.ENABLE: "1", first_calibration.ENABLE: "1"})  # fmt: skip
    procs = [subprocess.Popen([sys.executable, "-c", code, str(i)], env=env,
                              stdout=subprocess.PIPE, text=True) for i in range(2)]  # fmt: skip
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    counts = [json.loads(o.strip().splitlines()[-1]) for o in outs]
    assert sorted(c["vendor"] > 0 for c in counts) == [False, True], counts
    waiter = next(c for c in counts if c["vendor"] == 0)
    assert waiter["products"] == 1  # the user's own product, nothing measured
    rec = json.loads((tmp_path / "cache" / "calibration.json").read_text())[DEVICE]
    assert rec["first_use"] and rec["host_cost"][Fake.name]["calls"] == 8


def test_the_test_suite_runs_without_first_use_calibration():
    assert os.environ.get(first_calibration.ENABLE) == "0"  # tests/conftest.py
    assert first_calibration.settings(gpu=False).budget == first_calibration.CPU_BUDGET
    assert first_calibration.settings(gpu=True).budget == first_calibration.GPU_BUDGET


def test_modelcheck_adds_the_host_cost_to_wall_timed_rows_only(tmp_path):
    """A results file records each backend's device with its measured host costs; a row timed
    by the wall clock is predicted with its backend's, one timed by device events without."""
    from tiledmm.report import modelcheck

    dev = replace(tiledmm.host_cpu(), host_costs=(("opencl", 1e-3),)).to_dict()
    rows = [{"extra_info": {"backend": "opencl", "kernel": "register", "dtype": "float32",
                            "m": 64, "n": 64, "k": 64, "block_tile": [64, 64, 64],
                            "thread_tile": [8, 8], "seconds": 1e-3, "timer": timer}}
            for timer in ("host perf_counter around a synchronized call",
                          "OpenCLBackend.timings (device events)")]  # fmt: skip
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"machine_info": {"tiledmm": {"devices": {"opencl": dev}}},
                                "benchmarks": rows}))  # fmt: skip
    (wall, events), gpu = modelcheck.check_rows(path, db=[])
    assert not gpu and wall.predicted - events.predicted == pytest.approx(1e-3)


class TwoFamilies(Fake):
    """The fake with two families, recording the family of every product it runs; the first
    product of a family sleeps ``compile`` seconds (a compile, as numba-cpu's), each product
    of a family in ``extra`` that many seconds more (a tiny product padded to a large block,
    as NumPy's register family)."""

    name, kernels = "fake-calibration-two", ("naive", "tiled")

    def __init__(self):
        super().__init__()
        self.families: list[str] = []
        self.compile, self.extra = 0.05, {}

    def run(self, plan, a, b, out):
        if plan.kernel not in self.families:
            time.sleep(self.compile)
        self.families.append(plan.kernel)
        time.sleep(self.extra.get(plan.kernel, 0.0))
        super().run(plan, a, b, out)


_TWO: list[TwoFamilies] = []


def _two() -> TwoFamilies:
    if not _TWO:
        _TWO.append(TwoFamilies())
        tiledmm.register_backend(_TWO[0])
    be = _TWO[0]
    be.families.clear()
    be.compile, be.extra = 0.05, {}
    return be


def test_a_cpu_calibration_runs_the_family_of_the_call_that_starts_it(fake, tmp_path):
    """numba-cpu compiles once per family: calibrating on the tiny product's own family, its
    first 1024^3 call compiled two families (7.7 s on the repository's EPYC) and left first
    use no time for candidates. On a CPU the tiny product now runs the caller's family."""
    be = _two()
    tiny = dispatch.plan_for(be, *host_cost.SHAPE, "float64").kernel
    other = next(f for f in be.kernels if f != tiny)
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((48, 40)), rng.standard_normal((40, 56))
    c = tiledmm.matmul(a, b, backend=be.name, kernel=other)
    assert rel_error(c, a @ b) < 1e-12
    assert _record(tmp_path)["host_cost"][be.name]["family"] == other
    assert set(be.families) == {other}  # the calibration's products and the call's


def test_a_family_that_compiled_nothing_leaves_the_host_cost_to_the_lighter_one(fake, tmp_path):
    """NumPy compiles nothing, and its register family pads the tiny product to a 256^3 block
    (1.16 ms a call on the EPYC, 0.32 ms of it the model's kernel time): measured on that
    family alone, its host cost was 0.84 ms, added to every prediction. Where the caller's
    family compiled nothing, the tiny product's own family is timed too and the lighter kept."""
    be = _two()
    be.compile = 0.0
    tiny = dispatch.plan_for(be, *host_cost.SHAPE, "float64").kernel
    other = next(f for f in be.kernels if f != tiny)
    be.extra = {other: 0.004}
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((48, 40)), rng.standard_normal((40, 56))
    assert rel_error(tiledmm.matmul(a, b, backend=be.name, kernel=other), a @ b) < 1e-12
    cost = _record(tmp_path)["host_cost"][be.name]
    assert cost["family"] == tiny and cost["seconds"] < 0.002
    assert cost["heavier"][other] >= 0.004
    assert set(be.families) == {tiny, other}
