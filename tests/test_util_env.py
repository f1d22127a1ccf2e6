"""tiledmm.util.env: one rule for on/off switches and durations from environment variables,
used by first-use tuning, first-use calibration and the shipped-table switch."""

from __future__ import annotations

import pytest

from tiledmm.core import tuning
from tiledmm.tune import first_calibration, first_use
from tiledmm.util import env


@pytest.mark.parametrize("text,default,want", [
    ("", True, True), ("", False, False), ("1", False, True), ("yes", False, True),
    ("0", True, False), ("OFF", True, False), (" false ", True, False), ("no", True, False),
])  # fmt: skip
def test_switch(monkeypatch, text, default, want):
    monkeypatch.setenv("TILEDMM_TEST_SWITCH", text)
    assert env.switch("TILEDMM_TEST_SWITCH", default) is want


@pytest.mark.parametrize("text,want", [
    ("", 7.0), ("2", 2.0), ("2.5s", 2.5), ("500ms", 0.5), ("soon", 7.0), (" 3S ", 3.0),
])  # fmt: skip
def test_seconds(monkeypatch, text, want):
    monkeypatch.setenv("TILEDMM_TEST_SECONDS", text)
    assert env.seconds("TILEDMM_TEST_SECONDS", 7.0) == pytest.approx(want)


def test_first_use_and_calibration_read_budgets_alike(monkeypatch):
    """Both first-use budgets take milliseconds (the calibration's once ignored them)."""
    first_use.configure()
    first_calibration.configure()
    monkeypatch.setenv(first_use.BUDGET, "750ms")
    monkeypatch.setenv(first_calibration.BUDGET, "750ms")
    monkeypatch.setenv(first_use.ENABLE, "1")
    monkeypatch.setenv(first_calibration.ENABLE, "1")
    assert first_use.settings().budget == pytest.approx(0.75)
    assert first_calibration.settings().budget == pytest.approx(0.75)
    monkeypatch.setenv(first_use.ENABLE, "off")
    assert not first_use.settings().enabled and not first_calibration.settings().enabled


def test_ignore_shipped(monkeypatch):
    monkeypatch.delenv(tuning.IGNORE_SHIPPED, raising=False)
    assert not tuning.ignore_shipped()
    monkeypatch.setenv(tuning.IGNORE_SHIPPED, "1")
    assert tuning.ignore_shipped()
