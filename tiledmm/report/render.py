"""``tiledmm report``: merge results files from several machines into the tiling table and plots.

Reads pytest-benchmark JSON written by ``tiledmm bench`` or ``pytest benches/``
(``extra_info`` per benchmark) and writes, into the output folder:

- ``tiling-table.md``: per device x backend x dtype, the headline shape's GFLOP/s per kernel
  family, fraction of the vendor library (same run), fraction of the roofline at the plan's
  intensity, speedup over the naive family, predicted vs measured time; then every shape;
- ``roofline-<device>-<dtype>.png|svg``: log-log roofline from the ceilings recorded in the
  file, one point per backend x family at its planned intensity;
- ``gflops-<device>-<dtype>.png|svg``: GFLOP/s against problem size, vendor dashed.

Output is deterministic: rows are sorted and the figures carry no timestamps.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from ..bench.results import fmt_num, headline, ladder_row, load, shape_label
from .figures import write_figures

__all__ = ["markdown", "render", "main"]


def _roof(r: dict) -> float:
    """Attainable FLOP/s at the row's planned intensity under its recorded ceilings."""
    peak, bw, ai = r.get("peak_flops") or 0, r.get("bandwidth") or 0, r.get("intensity") or 0
    return min(peak, ai * bw) if peak and bw and ai else peak


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%" if x >= 0.1 else f"{100 * x:.1f}%"


def _time(t: float | None) -> str:
    if not t:
        return "-"
    return f"{t:.3g} s" if t >= 1 else f"{t * 1e3:.3g} ms" if t >= 1e-3 else f"{t * 1e6:.3g} us"


_HEAD = (
    "| Device | Backend | Family | dtype | Shape | GFLOP/s | of vendor | of roofline | "
    "x naive | predicted | measured | rel. error |\n"
    "|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|"
)
_HEAD_ALL = (
    "| Device | Backend | Family | dtype | Shape | GFLOP/s | of vendor | of roofline | "
    "x naive | predicted | measured | measured / predicted | rel. error |\n"
    "|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
)


def _line(r: dict, naive: dict[tuple, float], ratio: bool = False) -> str:
    nv = naive.get((r["device"], r["backend"], r["dtype"], r["m"], r["n"], r["k"]))
    roof = _roof(r)
    cells = [
        r["device"],
        r["backend"],
        f"auto: {r['kernel']}" if r.get("requested_kernel") == "auto" else r["kernel"],
        r["dtype"],
        shape_label(r),
        fmt_num(r["gflops"]),
        _pct(r["gflops"] / r["vendor_gflops"]) if r.get("vendor_gflops") else "-",
        _pct(r["gflops"] * 1e9 / roof) if roof else "-",
        f"{r['gflops'] / nv:.1f}x" if nv else "-",
        _time(_predicted(r)),
        _time(r.get("seconds")),
        *([_ratio(r)] if ratio else []),
        f"{r['rel_error']:.1e}" if r.get("rel_error") is not None else "-",
    ]
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _predicted(r: dict) -> float | None:
    """The row's predicted time for the whole call: a batched row recorded with one product's
    prediction (no ``predicted_batch``) has none."""
    if (r.get("batch") or 1) > 1 and not r.get("predicted_batch"):
        return None
    return r.get("predicted_seconds")


def _ratio(r: dict) -> str:
    p, t = _predicted(r), r.get("seconds")
    return f"{t / p:.2f}" if p and t else "-"


def worst_ratio(rows: list[dict]) -> str:
    """One line per device kind: among the rows the planner is held to (``modelcheck``'s
    bands: the three families at M*N*K >= 1024^3, not the NumPy backend's emulated ones), the
    one whose measured / predicted time is farthest from 1 (docs/model.md)."""
    from .modelcheck import held_band

    def held_row(r: dict, kind: str) -> bool:
        if str(r.get("device_kind", "")) != kind or not (_predicted(r) and r.get("seconds")):
            return False
        shape = (r["m"], r["n"], r["k"])
        return held_band(r["backend"], r["kernel"], shape, kind == "gpu") is not None

    out = []
    for kind in sorted({str(r.get("device_kind", "")) for r in rows}):
        held = [r for r in rows if held_row(r, kind)]
        if not held:
            continue
        w = max(held, key=lambda r: abs(math.log(r["seconds"] / _predicted(r))))
        out.append(
            f"- {kind or 'device'}: worst measured / predicted {_ratio(w)} "
            f"({w['backend']} {w['kernel']} {w['dtype']} {shape_label(w)})"
        )
    return "\n".join(out)


def markdown(rows: list[dict], figures: list[str] = ()) -> str:
    """The tiling table (headline shapes), then every measured shape."""
    naive = {
        (r["device"], r["backend"], r["dtype"], r["m"], r["n"], r["k"]): r["gflops"]
        for r in rows
        if r["kernel"] == "naive"
    }
    heads = headline(rows)
    top = [
        r
        for r in rows
        if heads.get((r["device"], r["backend"], r["dtype"])) == (r["m"], r["n"], r["k"])
        and ladder_row(r)
    ]
    vendors = {}
    for r in top:
        vendors[(r["device"], r["backend"], r["dtype"])] = r.get("vendor_gflops")
    out = [
        "## Tiling pays on every device",
        "",
        "Largest square shape with every family measured, per device and backend. "
        "*of vendor*: the vendor GEMM on the same shape in the same run; *of roofline*: "
        "min(peak, intensity x bandwidth) at the plan's intensity, from the ceilings "
        "recorded with the run (the model counts no cache reuse, so naive can exceed it); "
        "*predicted*: the planner's roofline time.",
        "",
        _HEAD,
    ]
    out += [_line(r, naive) for r in top]
    out += ["", "Vendor library on the headline shape:", ""]
    out += [
        f"- {dev} / {be} / {dt}: {fmt_num(v)} GFLOP/s"
        for (dev, be, dt), v in sorted(vendors.items())
    ]
    out += ["", "## Every shape", "", _HEAD_ALL] + [_line(r, naive, True) for r in rows]
    worst = worst_ratio(rows)
    if worst:
        out += ["", "The planner's worst case (measured / predicted time, as each run predicted):",
                "", worst]  # fmt: skip
    files = sorted({r["file"] for r in rows})
    out += ["", "Sources: " + ", ".join(files) + "."]
    if figures:
        out += ["", "Figures: " + ", ".join(figures) + "."]
    return "\n".join(out) + "\n"


def render(
    paths: list[str | Path], outdir: str | Path, figures: bool = True, rows: list | None = None
) -> str:
    """Load (unless ``rows`` are given), write ``tiling-table.md`` (and figures) into
    ``outdir``; return the Markdown."""
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    rows = load(paths) if rows is None else rows
    names: list[str] = []
    if figures and rows:
        try:
            names = write_figures(rows, outdir)
        except ImportError as exc:  # matplotlib is the `bench` extra
            print(f"figures skipped ({exc}): pip install 'tiledmm[bench]'", file=sys.stderr)
    text = markdown(rows, [n for n in names if n.endswith(".png")])
    files = {r["file"] for r in rows}
    text += model_today([p for p in map(Path, paths) if p.name in files])
    (outdir / "tiling-table.md").write_text(text)
    return text


def model_today(paths: list[Path]) -> str:
    """Every held row of ``paths`` rebuilt with today's model (``tiledmm.report.modelcheck``): rows
    inside each band and the worst, as a Markdown section ("" when nothing is held)."""
    from .modelcheck import check_files

    try:
        rows = check_files(paths)
    except (KeyError, ValueError, TypeError) as exc:  # a file the checker cannot rebuild
        return f"\n## The planner today\n\nNot checked: {exc!r}\n"
    lines = []
    for bnd in sorted({b for _, b in rows if b is not None}):
        held = [r for r, b in rows if b == bnd]
        inside = sum(bnd[0] <= r.ratio <= bnd[1] for r in held)
        w = max(held, key=lambda r: abs(math.log(r.ratio)))
        shape = "x".join(map(str, w.shape))
        lines.append(f"- {bnd}: {inside}/{len(held)} rows inside; worst {w.ratio:.2f} "
                     f"({w.backend} {w.kernel} {w.dtype} {shape}, {w.file})")  # fmt: skip
    if not lines:
        return ""
    head = (
        "\n## The planner today\n\nEvery row rebuilt with today's model and measured / "
        "predicted time held to its band at M*N*K >= 1024^3 (`python -m tiledmm.report.modelcheck "
        "FILES`, docs/model.md; the table above shows each run's own prediction):\n\n"
    )
    return head + "\n".join(lines) + "\n"


README_BEGIN, README_END = "<!-- tiledmm report: begin -->", "<!-- tiledmm report: end -->"


def headline_markdown(text: str) -> str:
    """The headline section of the report (the tiling table and vendor figures)."""
    return text.split("\n## Every shape", 1)[0].split("\n", 1)[1].strip() + "\n"


def _readme_parts(path: Path) -> tuple[str, str]:
    """What stands before the begin marker and after the end marker of ``path``."""
    doc = path.read_text()
    if README_BEGIN not in doc or README_END not in doc.split(README_BEGIN, 1)[1]:
        raise ValueError(f"{path} has no {README_BEGIN} ... {README_END} block")
    head, rest = doc.split(README_BEGIN, 1)
    return head, rest.split(README_END, 1)[1]


def update_readme(readme: str | Path, text: str) -> None:
    """Replace what stands between the report markers in ``readme`` by the headline."""
    path = Path(readme)
    head, tail = _readme_parts(path)
    path.write_text(f"{head}{README_BEGIN}\n{headline_markdown(text)}{README_END}{tail}")


def main(args: argparse.Namespace) -> int:
    """``tiledmm report FILE... [-o DIR] [--readme README.md]``: raises ValueError when the
    files hold no tiledmm result, and checks the README's markers before writing anything."""
    readme = getattr(args, "readme", None)
    if readme:
        _readme_parts(Path(readme))
    rows = load(args.files)
    if not rows:
        raise ValueError(f"no tiledmm results in {', '.join(map(str, args.files))}")
    figures = not getattr(args, "no_figures", False)
    text = render(args.files, args.output, figures, rows=rows)
    if readme:
        update_readme(readme, text)
    print(text)
    return 0
