"""The Hopper rung in the planner (issue 38): a 16-bit plan on a compute capability 9.x device
carries the Hopper kernel's geometry and model (tiledmm.planner.hopper, tiledmm.model.hopper),
its prediction holds the committed H200 rows, 8.x plans are unchanged, and the CuPy backend's
search space holds only configurations its kernel builds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tiledmm_backends.cupy_cuda import CupyBackend, hopper, mma

from tiledmm.device import nvidia
from tiledmm.device.nvidia import reference_h200
from tiledmm.model import hopper as hm
from tiledmm.planner import hopper as hplan
from tiledmm.planner.geometry import Geometry
from tiledmm.planner.make import make_plan
from tiledmm.planner.plans import PlanError
from tiledmm.report import hoppercheck

ROOT = Path(__file__).resolve().parents[1]
H200 = reference_h200()
A100 = nvidia.device_spec("NVIDIA A100-SXM4-80GB", (8, 0), dict(sms=108, clock_khz=1410000,
                          mem_clock_khz=1593000, bus_bits=5120, l2=40 << 20,
                          shared_optin=163 * 1024), launch_overhead=5e-6)  # fmt: skip


@pytest.fixture(autouse=True)
def _no_switch(monkeypatch):
    monkeypatch.delenv(hplan.ENV, raising=False)
    monkeypatch.setattr(hplan, "DEFAULT_ON", True)


def _measured(variant: str, shape: tuple[int, int, int], dtype: str = "float16") -> float:
    for name in hoppercheck.COMMITTED_HOPPER:
        for rec in json.loads((ROOT / name).read_text())["tiledmm"]["records"]:
            for t in rec["times"] if rec["variant"] == variant else ():
                if (t["m"], t["n"], t["k"]) == shape and t["dtype"] == dtype:
                    return t["seconds"]
    raise KeyError((variant, shape))


def test_h200_float16_plan_describes_the_hopper_kernel():
    p = make_plan(4096, 4096, 4096, dtype="float16", kernel="mma", device=H200, backend="cupy")
    o = p.options
    assert o["hopper"] == 1 and p.block_tile == (128, 256, 64) and p.thread_tile == (64, 256)
    assert {k[7:]: v for k, v in o.items() if k.startswith("hopper_")} == hplan.CONFIGS["large"]
    assert hopper.config(p) == hplan.CONFIGS["large"]  # what the backend runs
    assert p.threads_per_block == 384 and p.shared_bytes == hplan.smem_bytes(o | {"bm": 128,
           "bn": 256, "stages": 3, "epi": 1})  # fmt: skip
    names = [lv.name for lv in p.levels]
    assert names == ["tensor cores", "shared memory", "L2", "latency", "DRAM"]
    text = str(p)
    for words in ("Hopper kernel", "TMA", "wgmma m64n256k16", "persistent", "3.88 waves",
                  "TMA writes", "wgmma operand reads", "grouped tile order", "Hopper 'large'"):
        assert words in text, words
    # the tensor roof is the calibrated float16 rate, the shared pipe at the clock it implies
    assert p.level("tensor cores").ceiling == nvidia.H200_MEASURED["peak_flops"]["float16"]
    ratio = _measured("Le", (4096, 4096, 4096)) / p.predicted_seconds
    assert hoppercheck.BAND[0] <= ratio <= hoppercheck.BAND[1], ratio


def test_the_model_counts_what_the_kernel_moves():
    """128x256x64, 2 consumers of m64n256k16: per stage 48 KiB of TMA writes and 80 KiB of
    wgmma operand reads (128 B per clock at the full tensor rate: 4096 FLOP per clock per SM);
    L2 lines per row of 2000 bytes (1.875); the busiest SM's tiles (3000x5000x1000: 480 tiles,
    4 on 84 SMs)."""
    p = make_plan(3000, 5000, 1000, dtype="float16", kernel="mma", device=H200)
    parts = dict(p.level("shared memory").parts)
    stages = 480 * 16
    assert parts["TMA writes"] == stages * 48 * 1024
    assert parts["wgmma reads"] == stages * 80 * 1024
    assert hm.line_reads(2000, 3000) == 1.875 and hm.line_reads(8192, 4096) == 1.0
    t = hm.tiles_of(dict(m=3000, n=5000, k=1000, bm=128, bn=256, cluster=1), 132)
    assert (t["tiles"], t["per"], t["kb"], t["blocks"]) == (480, 4, 16, 132)
    assert hm.copies(4095, 4095, 4095) == (("A", 4095 * 4095), ("B", 4095 * 4095))
    assert hm.copies(4096, 4095, 4096) == (("B", 4096 * 4095),)
    odd = make_plan(4095, 4095, 4095, dtype="float16", kernel="mma", device=H200)
    even = make_plan(4096, 4096, 4096, dtype="float16", kernel="mma", device=H200)
    assert odd.level("tensor cores").serial > even.level("tensor cores").serial + 100e-6
    assert "C stored from registers" in str(odd)  # C's rows of 8190 bytes: no TMA stores


def test_committed_rows_of_the_shipped_configurations_are_inside_the_band():
    rows = [r for p in hoppercheck.COMMITTED_HOPPER for r in hoppercheck.hopper_rows(ROOT / p)]
    held = [r for r in rows if r.held]
    assert len(rows) == 78 and len(held) == 64
    for r in held:
        if r.variant in ("L", "Le", "Te"):
            assert hoppercheck.BAND[0] <= r.ratio <= hoppercheck.BAND[1], r
    inside = sum(hoppercheck.BAND[0] <= r.ratio <= hoppercheck.BAND[1] for r in held)
    assert inside >= 53
    text = hoppercheck.format_section(rows)
    assert f"hopper band (0.8, 1.25): {inside}/64 rows inside" in text


def test_decode_and_requested_tiles_and_switches(monkeypatch):
    d2 = make_plan(8, 14336, 4096, dtype="float16", kernel="mma", device=H200)
    assert d2.options["hopper"] == 1  # decode takes the Hopper kernel too, its own tiles
    assert d2.block_tile == (64, 256, 64) and hopper.config(d2) == hplan.CONFIGS["decode"]
    asked = Geometry((256, 128, 64), (128, 128), (), None, "requested")
    p = make_plan(4096, 4096, 4096, dtype="float16", kernel="mma", device=H200, geometry=asked)
    assert p.options["hopper"] == 1 and p.options["hopper_bm"] == 256 and p.block_tile[1] == 128
    sync = Geometry((128, 256, 32), (64, 64), (("fk", 16), ("fm", 16), ("fn", 8)), None,
                    "requested")  # fmt: skip
    p = make_plan(4096, 4096, 4096, dtype="float16", kernel="mma", device=H200, geometry=sync)
    assert p.options["hopper"] == 0 and p.block_tile == (128, 256, 32)  # only mma.sync has it
    with pytest.raises(PlanError, match="shared memory"):
        make_plan(4096, 4096, 4096, dtype="float16", kernel="mma", device=H200,
                  geometry=Geometry((1, 1, 1), (1, 1), (("hopper_stages", 4),)))  # fmt: skip
    monkeypatch.setenv(hplan.ENV, "0")
    off = make_plan(4096, 4096, 4096, dtype="float16", kernel="mma", device=H200)
    assert off.options["hopper"] == 0 and off.block_tile == (128, 256, 32)
    dec = make_plan(8, 14336, 4096, dtype="float16", kernel="mma", device=H200)
    assert dec.options["hopper"] == 0 and "mma.sync" in str(dec)  # mma.sync when asked


#: the A100 plans of the code before the Hopper rung reached the planner (20e65ad): tiles,
#: options and predicted seconds, per dtype and shape
BEFORE = {(4096, 4096, 4096): 0.00046979432624113474, (1000, 3000, 777): 2.3156028368794327e-05,
          (8, 14336, 4096): 9.795886524822695e-05}  # fmt: skip


def test_compute_capability_8_plans_are_unchanged():
    """An A100 (8.0): no Hopper kernel, no ``hopper`` option; the mma.sync plan of before."""
    for dtype in ("float16", "bfloat16"):
        for shape, seconds in BEFORE.items():
            p = make_plan(*shape, dtype=dtype, kernel="mma", device=A100, backend="cupy")
            assert p.predicted_seconds == seconds
            assert (p.block_tile, p.thread_tile) == ((128, 256, 32), (64, 64))
            assert p.options == dict(fk=16, fm=16, fn=8, group_m=8, stages=3)
            assert "mma.sync" in str(p) and "Hopper" not in str(p)
    assert not hplan.runs("float16", (8, 0), {"hopper": 1}, 4096)
    assert not hplan.runs("float16", (10, 0), {}, 4096)
    space = mma.search_space("mma", "float16", A100)
    assert space and all("hopper" not in dict(g.options) for g in space)


def test_search_space_holds_only_configurations_the_kernel_builds():
    space = mma.search_space("mma", "float16", H200)
    hop = [g for g in space if dict(g.options).get("hopper") == 1]
    sync = [g for g in space if dict(g.options).get("hopper") == 0]
    assert len(hop) + len(sync) == len(space) and len(hop) >= 100 and sync
    seen = set()
    for g in hop:
        o = dict(g.options)
        cfg = {k[7:]: v for k, v in o.items() if k.startswith("hopper_")}
        hopper.defines("float16", cfg)  # raises for one it cannot build
        assert g.block_tile == (cfg["bm"], cfg["bn"], 64)
        seen.add((cfg["stages"] > 0, cfg["cluster"], cfg["epi"], cfg["group_m"]))
    assert {c for _, c, _, _ in seen} == {1, 2} and {e for _, _, e, _ in seen} == {0, 1}
    be = CupyBackend()
    for g in hop[:: max(1, len(hop) // 12)] + sync[:2]:
        p = make_plan(2048, 2048, 2048, dtype="float16", kernel="mma", device=H200, geometry=g,
                      backend="cupy")  # fmt: skip
        assert be.plan_problem(p) is None
        assert p.options["hopper"] == dict(g.options)["hopper"]
    bad = make_plan(2048, 2048, 2048, dtype="float16", kernel="mma", device=H200)
    bad.options["hopper_cm"] = 4  # a plan no kernel build takes
    assert "consumer" in be.plan_problem(bad)
