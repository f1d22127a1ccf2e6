"""The Hopper 16-bit kernel's rows in the model check (issue 38): measured / predicted per
variant and shape of ``benches/probes/hopper16.py``'s JSON (CUDA-event medians of the kernel
beside cuBLAS on one H200), each planned with today's model on the reference H200
(:func:`tiledmm.device.nvidia.reference_h200`, its calibrated float16 rate the tensor roof) with
the variant's configuration as plan options. ``python -m tiledmm.report.modelcheck`` prints
this section after the results files' table.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from ..device.nvidia import reference_h200
from ..device.spec import DeviceSpec
from ..planner.geometry import Geometry
from ..planner.make import make_plan
from ..planner.plans import Plan

__all__ = ["COMMITTED_HOPPER", "BAND", "MIN_PRODUCT", "HopperRow", "is_probe", "plan_of",
           "hopper_rows", "format_section"]  # fmt: skip

#: the committed sweeps (session 18, NVIDIA H200, 2026-12-07), relative to a checkout
COMMITTED_HOPPER = tuple(
    f"benches/data/h200-hopper16-{n}-s18.json" for n in ("L", "variants", "Le-Te")
)
BAND = (0.8, 1.25)
MIN_PRODUCT = 1024**3  # as the results table: smaller products are shown, not held


@dataclass(frozen=True)
class HopperRow:
    file: str
    variant: str
    dtype: str
    shape: tuple[int, int, int]
    measured: float
    predicted: float
    binding: str
    vendor: float  # cuBLAS's seconds on the same arrays

    @property
    def ratio(self) -> float:
        return self.measured / self.predicted if self.predicted else math.inf

    @property
    def held(self) -> bool:
        return math.prod(self.shape) >= MIN_PRODUCT


def is_probe(path: Path) -> bool:
    """Whether ``path`` is a ``benches/probes/hopper16.py`` JSON (not a results file)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return False
    info = data.get("tiledmm") if isinstance(data, dict) else None
    return isinstance(info, dict) and "records" in info and "benchmarks" not in data


def plan_of(config: dict, m: int, n: int, k: int, dtype: str, device: DeviceSpec) -> Plan:
    """The plan of one probe row: the variant's configuration as options ``hopper_<key>``
    (a variant without ``epi`` stores C from registers, the probe's default)."""
    cfg = {"epi": 0, **config}
    opts = {"hopper": 1, **{f"hopper_{key}": int(v) for key, v in cfg.items()}}
    geo = Geometry((cfg["bm"], cfg["bn"], 64), (cfg["bm"] // cfg["cm"], cfg["bn"] // cfg["cn"]),
                   tuple(sorted(opts.items())), source="hopper16 probe variant")  # fmt: skip
    return make_plan(m, n, k, dtype=dtype, kernel="mma", device=device, geometry=geo,
                     backend="cupy")  # fmt: skip


def hopper_rows(path: Path, reference: DeviceSpec | None = None) -> list[HopperRow]:
    """Every timed row of one probe JSON, planned on ``reference`` (default the reference
    H200 with the reference's per-call host cost: back-to-back launches timed by events)."""
    dev = reference or reference_h200()
    data = json.loads(Path(path).read_text())
    out = []
    for rec in data["tiledmm"]["records"]:
        if rec.get("failed") or rec.get("wrong"):
            continue
        for t in rec.get("times", []):
            p = plan_of(rec["config"], t["m"], t["n"], t["k"], t["dtype"], dev)
            out.append(HopperRow(Path(path).name, rec["variant"], t["dtype"],
                                 (t["m"], t["n"], t["k"]), t["seconds"], p.predicted_seconds,
                                 p.binding.name if p.binding else p.bound,
                                 t.get("vendor_seconds", 0.0)))  # fmt: skip
    return out


def format_section(rows: list[HopperRow]) -> str:
    """The section: a Markdown table and the count inside the band (held rows: products of
    at least 1024^3)."""
    lines = [
        "\n## Hopper 16-bit kernel (issue 38): benches/probes/hopper16.py rows, NVIDIA H200\n",
        "| file | variant | dtype | shape | measured | predicted | ratio | bound | of cuBLAS "
        "| band |",
        "|---|---|---|---|---:|---:|---:|---|---:|---|",
    ]
    for r in rows:
        inside = BAND[0] <= r.ratio <= BAND[1]
        flag = ("ok" if inside else "OUT") if r.held else "-"
        cublas = f"{r.vendor / r.measured:.3f}" if r.vendor else "-"
        lines.append(f"| {r.file} | {r.variant} | {r.dtype} | {'x'.join(map(str, r.shape))} | "
                     f"{r.measured * 1e6:.4g} us | {r.predicted * 1e6:.4g} us | {r.ratio:.2f} | "
                     f"{r.binding} | {cublas} | {flag} |")  # fmt: skip
    held = [r for r in rows if r.held]
    if held:
        inside = [r for r in held if BAND[0] <= r.ratio <= BAND[1]]
        worst = max(held, key=lambda r: abs(math.log(r.ratio)))
        per = {}
        for r in held:
            got = per.setdefault(r.variant, [0, 0])
            got[0] += BAND[0] <= r.ratio <= BAND[1]
            got[1] += 1
        lines.append(f"\nhopper band {BAND}: {len(inside)}/{len(held)} rows inside; worst "
                     f"{worst.ratio:.2f} ({worst.variant} {worst.dtype} "
                     f"{'x'.join(map(str, worst.shape))}); by variant: "
                     + ", ".join(f"{v} {a}/{b}" for v, (a, b) in per.items()))  # fmt: skip
    return "\n".join(lines)
