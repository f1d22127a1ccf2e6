"""``tiledmm report``: merged files give one deterministic table and deterministic figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tiledmm import cli
from tiledmm.bench.results import load
from tiledmm.report import render as report

GFLOPS = {"naive": 2.0, "tiled": 10.0, "register": 40.0}


def _doc(device: str, backend: str, sizes: list[int], vendor: float, scale: float) -> dict:
    benches = []
    for n in sizes:
        for fam, g in GFLOPS.items():
            info = {
                "backend": backend,
                "kernel": fam,
                "device": device,
                "dtype": "float32",
                "m": n,
                "n": n,
                "k": n,
                "gflops": g * scale,
                "seconds": 2 * n**3 / g / 1e9,
                "vendor_gflops": vendor,
                "intensity": {"naive": 0.25, "tiled": 8.0, "register": 32.0}[fam],
                "predicted_seconds": 1e-3,
                "rel_error": 1e-7,
                "peak_flops": 100e9,
                "bandwidth": 20e9,
                "ceilings_source": "measured 2026-11-29 (test)",
            }
            benches.append(
                {
                    "name": f"test_matmul[{backend}-{fam}]",
                    "group": "g",
                    "stats": {"median": info["seconds"]},
                    "extra_info": info,
                }
            )
    return {"machine_info": {}, "commit_info": {}, "benchmarks": benches, "version": "5"}


@pytest.fixture
def files(tmp_path: Path) -> list[Path]:
    a, b = tmp_path / "cpu.json", tmp_path / "gpu.json"
    a.write_text(json.dumps(_doc("Test CPU", "numpy", [64, 128], 80.0, 1.0)))
    b.write_text(json.dumps(_doc("Test GPU", "cupy", [128, 256], 400.0, 5.0)))
    return [b, a]


def test_table_contents(files: list[Path]) -> None:
    text = report.markdown(load(files))
    head = text.split("## Every shape")[0]
    # headline: largest square per device/backend; fractions of vendor and roofline
    assert "| Test CPU | numpy | register | float32 | 128^3 | 40.0 | 50% | 40% | 20.0x |" in head
    assert "| Test GPU | cupy | naive | float32 | 256^3 | 10.0 | 2.5% | 200% | 1.0x |" in head
    assert head.index("Test CPU") < head.index("Test GPU")
    assert text.count("| Test CPU | numpy |") == 3 + 6


def test_report_regenerates_identical_output(files: list[Path], tmp_path: Path) -> None:
    out1, out2 = tmp_path / "r1", tmp_path / "r2"
    assert cli.main(["report", *map(str, files), "-o", str(out1)]) == 0
    assert cli.main(["report", *map(str, reversed(files)), "-o", str(out2)]) == 0
    names = sorted(p.name for p in out1.iterdir())
    assert "tiling-table.md" in names and "roofline-test-gpu-float32.svg" in names
    assert len([n for n in names if n.endswith(".png")]) == 4
    for name in names:
        assert (out1 / name).read_bytes() == (out2 / name).read_bytes(), name


def test_report_rebuilds_the_held_rows_with_todays_model():
    """The committed GPU files: the report's last section is modelcheck's band count and worst
    row, the same as ``python -m tiledmm.report.modelcheck`` gives (not each run's recorded
    time)."""
    from tiledmm.report.modelcheck import GPU_BAND, check_files

    base = Path(__file__).parents[1] / "benches" / "results"
    paths = [base / "h200-cupy.json", base / "h200-shapes.json"]
    text = report.model_today(paths)
    held = [r for r, b in check_files(paths) if b == GPU_BAND]
    inside = sum(GPU_BAND[0] <= r.ratio <= GPU_BAND[1] for r in held)
    assert "## The planner today" in text and f"{inside}/{len(held)} rows inside" in text
    assert report.model_today([]) == ""
