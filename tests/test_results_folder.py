"""``benches/results/`` holds pytest-benchmark results files only (issue 39): the README's own
``tiledmm report benches/results/*.json`` and ``pytest-benchmark compare`` on that glob load
every file without a warning. Other measurements (Nsight counters, probes, tuning logs,
dispatch timings) live in ``benches/data/``."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from tiledmm.bench.results import load

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benches" / "results"
FILES = sorted(RESULTS.glob("*.json"))


class _Log:
    def __init__(self) -> None:
        self.warnings: list[str] = []

    def warning(self, text: str) -> None:
        self.warnings.append(text)

    def info(self, text: str) -> None: ...


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_every_results_file_is_pytest_benchmark_json(path: Path) -> None:
    doc = json.loads(path.read_text())
    assert isinstance(doc, dict), path.name
    missing = {"machine_info", "commit_info", "benchmarks", "datetime", "version"} - set(doc)
    assert not missing, (
        f"{path.name} lacks {sorted(missing)}: not pytest-benchmark JSON (move it to benches/data/)"
    )
    assert isinstance(doc["benchmarks"], list) and doc["benchmarks"], path.name
    for b in doc["benchmarks"]:
        assert {"name", "stats"} <= set(b) and "median" in b["stats"], (path.name, b.get("name"))


def test_the_results_glob_loads_without_a_warning(tmp_path: Path) -> None:
    from pytest_benchmark.storage.file import FileStorage

    assert len(FILES) >= 10
    log = _Log()  # what `pytest-benchmark compare benches/results/*.json` reads them with
    loaded = list(FileStorage(tmp_path, log).load_benchmarks(*map(str, FILES)))
    assert log.warnings == [] and loaded
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # `tiledmm report benches/results/*.json`: no "ignored"
        assert load(FILES)


def test_other_measurements_live_in_data() -> None:
    data = sorted((ROOT / "benches" / "data").glob("*.json"))
    assert {p.name for p in data} >= {"h200-counters.json", "h200-dispatch.json"}
    for p in data:  # each one really is another kind of file (else it belongs in results/)
        assert "benchmarks" not in json.loads(p.read_text()), p.name
