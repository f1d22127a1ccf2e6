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
import json
import math
import sys
from collections import Counter
from pathlib import Path

__all__ = ["load", "headline", "markdown", "write_figures", "render", "main"]

FAMILIES = ("naive", "tiled", "register")
_COLORS = {"naive": "#d62728", "tiled": "#1f77b4", "register": "#2ca02c"}
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def _key(r: dict) -> tuple:
    fam = FAMILIES.index(r["kernel"]) if r["kernel"] in FAMILIES else 9
    return (
        r["device"],
        r["backend"],
        r["dtype"],
        r["m"] * r["n"] * r["k"],
        r["m"],
        r["n"],
        r["k"],
        fam,
        r["kernel"],
    )


def load(paths: list[str | Path]) -> list[dict]:
    """One row per (device, backend, kernel, dtype, shape); later files (sorted) win."""
    rows: dict[tuple, dict] = {}
    for path in sorted(str(p) for p in paths):
        doc = json.loads(Path(path).read_text())
        for b in doc.get("benchmarks", []):
            e = dict(b.get("extra_info", {}))
            if not {"backend", "kernel", "device", "dtype", "m", "n", "k", "gflops"} <= set(e):
                continue
            e["file"] = Path(path).name
            e.setdefault("seconds", b.get("stats", {}).get("median"))
            rows[_key(e)] = e
    return [rows[k] for k in sorted(rows)]


def _roof(r: dict) -> float:
    """Attainable FLOP/s at the row's planned intensity under its recorded ceilings."""
    peak, bw, ai = r.get("peak_flops") or 0, r.get("bandwidth") or 0, r.get("intensity") or 0
    return min(peak, ai * bw) if peak and bw and ai else peak


def _shape(r: dict) -> str:
    return f"{r['m']}^3" if r["m"] == r["n"] == r["k"] else f"{r['m']}x{r['n']}x{r['k']}"


def headline(rows: list[dict]) -> dict[tuple, tuple]:
    """(device, backend, dtype) -> the square shape with the most families (largest on ties)."""
    count: Counter = Counter()
    for r in rows:
        if r["m"] == r["n"] == r["k"]:
            count[(r["device"], r["backend"], r["dtype"], r["m"])] += 1
    best: dict[tuple, tuple] = {}
    for (dev, be, dt, n), c in sorted(count.items()):
        if (dev, be, dt) not in best or (c, n) >= best[(dev, be, dt)][1:]:
            best[(dev, be, dt)] = ((n, n, n), c, n)
    return {k: v[0] for k, v in best.items()}


def _num(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "-"
    return f"{x:,.0f}" if x >= 100 else f"{x:.1f}" if x >= 10 else f"{x:.2f}"


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


def _line(r: dict, naive: dict[tuple, float]) -> str:
    nv = naive.get((r["device"], r["backend"], r["dtype"], r["m"], r["n"], r["k"]))
    roof = _roof(r)
    cells = [
        r["device"],
        r["backend"],
        r["kernel"],
        r["dtype"],
        _shape(r),
        _num(r["gflops"]),
        _pct(r["gflops"] / r["vendor_gflops"]) if r.get("vendor_gflops") else "-",
        _pct(r["gflops"] * 1e9 / roof) if roof else "-",
        f"{r['gflops'] / nv:.1f}x" if nv else "-",
        _time(r.get("predicted_seconds")),
        _time(r.get("seconds")),
        f"{r['rel_error']:.1e}" if r.get("rel_error") is not None else "-",
    ]
    return "| " + " | ".join(str(c) for c in cells) + " |"


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
        f"- {dev} / {be} / {dt}: {_num(v)} GFLOP/s" for (dev, be, dt), v in sorted(vendors.items())
    ]
    out += ["", "## Every shape", "", _HEAD] + [_line(r, naive) for r in rows]
    files = sorted({r["file"] for r in rows})
    out += ["", "Sources: " + ", ".join(files) + "."]
    if figures:
        out += ["", "Figures: " + ", ".join(figures) + "."]
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- figures


def _slug(text: str) -> str:
    import re

    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "device"


def _ceilings(rows: list[dict]) -> tuple[float, float, str]:
    best = sorted(
        rows,
        key=lambda r: (not str(r.get("ceilings_source", "")).startswith("measured"), r["backend"]),
    )[0]
    src = str(best.get("ceilings_source", ""))
    return (
        best.get("peak_flops") or 0.0,
        best.get("bandwidth") or 0.0,
        ("measured" if src.startswith("measured") else "estimated"),
    )


def _save(fig, base: Path) -> list[str]:
    fig.savefig(base.with_suffix(".png"), dpi=110, metadata={"Software": None})
    fig.savefig(base.with_suffix(".svg"), metadata={"Date": None, "Creator": None})
    return [base.with_suffix(".png").name, base.with_suffix(".svg").name]


def _markers(rows: list[dict]) -> dict[str, str]:
    return {
        be: _MARKERS[i % len(_MARKERS)] for i, be in enumerate(sorted({r["backend"] for r in rows}))
    }


def roofline_figure(rows: list[dict], device: str, dtype: str, base: Path) -> list[str]:
    """Log-log roofline, one point per backend x family at the headline shape."""
    import matplotlib.pyplot as plt

    heads = headline(rows)
    pts = [
        r
        for r in rows
        if heads.get((r["device"], r["backend"], r["dtype"])) == (r["m"], r["n"], r["k"])
        and r.get("intensity")
    ]
    peak, bw, how = _ceilings(rows)
    if not pts or not peak or not bw:
        return []
    ridge = peak / bw
    ais = [r["intensity"] for r in pts]
    lo, hi = min(min(ais), ridge) / 4, max(max(ais), ridge) * 4
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    fig, ax = plt.subplots(figsize=(8.5, 5.2), layout="constrained")
    ax.plot(
        xs,
        [min(peak, x * bw) / 1e9 for x in xs],
        color="black",
        lw=2,
        label=f"roofline ({how}): {peak / 1e9:,.1f} GFLOP/s, {bw / 1e9:,.1f} GB/s",
    )
    ax.axvline(ridge, color="gray", lw=0.8, ls=":")
    ax.annotate(
        f"ridge {ridge:.3g} FLOP/B",
        (ridge, peak / 1e9),
        textcoords="offset points",
        xytext=(4, -14),
        fontsize=8,
        color="gray",
    )
    marks = _markers(rows)
    for r in pts:
        ax.scatter(
            r["intensity"],
            r["gflops"],
            s=70,
            marker=marks[r["backend"]],
            color=_COLORS.get(r["kernel"], "gray"),
            edgecolor="black",
            lw=0.6,
            zorder=3,
            label=f"{r['backend']} {r['kernel']} ({_shape(r)}): {_num(r['gflops'])}",
        )
    for i, be in enumerate(sorted({r["backend"] for r in pts})):
        v = next(r.get("vendor_gflops") for r in pts if r["backend"] == be)
        if v:
            ax.axhline(
                v,
                color="purple",
                lw=1,
                ls=("--", "-.", ":")[i % 3],
                label=f"{be} vendor GEMM: {_num(v)} GFLOP/s",
            )
    ax.set(
        xscale="log",
        yscale="log",
        xlim=(lo, hi),
        xlabel="arithmetic intensity (FLOP/byte of global traffic, planner's model)",
        ylabel=f"performance (GFLOP/s, {dtype})",
        title=f"Roofline: {device}",
    )
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=7.5, loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
    fig.get_layout_engine().set(rect=(0, 0, 1, 1))
    names = _save(fig, base)
    plt.close(fig)
    return names


def size_figure(rows: list[dict], device: str, dtype: str, base: Path) -> list[str]:
    """GFLOP/s against (M N K)^(1/3); lines through squares, open markers for other shapes."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8.5, 5.2), layout="constrained")
    marks = _markers(rows)
    series: dict[tuple, list[dict]] = {}
    for r in rows:
        series.setdefault((r["backend"], r["kernel"]), []).append(r)
    vend: dict[tuple, float] = {}
    for r in rows:
        vend[(r["backend"], r["m"], r["n"], r["k"])] = r.get("vendor_gflops") or 0
    order = sorted(series, key=lambda t: (t[0], FAMILIES.index(t[1]) if t[1] in FAMILIES else 9))
    lines = [(key, series[key], _COLORS.get(key[1], "gray")) for key in order]
    for be in sorted({r["backend"] for r in rows}):
        pts = [
            {"m": m, "n": n, "k": k, "gflops": g}
            for (b, m, n, k), g in sorted(vend.items())
            if b == be and g
        ]
        lines.append(((be, "vendor GEMM"), pts, "purple"))
    for (be, kern), pts, color in lines:
        size = [(r["m"] * r["n"] * r["k"]) ** (1 / 3) for r in pts]
        sq = [
            (s, r["gflops"]) for s, r in zip(size, pts, strict=True) if r["m"] == r["n"] == r["k"]
        ]
        odd = [
            (s, r["gflops"])
            for s, r in zip(size, pts, strict=True)
            if not r["m"] == r["n"] == r["k"]
        ]
        ls = "--" if kern == "vendor GEMM" else "-"
        if sq:
            ax.plot(
                *zip(*sorted(sq), strict=True),
                ls=ls,
                marker=marks[be],
                color=color,
                label=f"{be} {kern}",
            )
        if odd:
            ax.scatter(
                *zip(*sorted(odd), strict=True),
                marker=marks[be],
                facecolor="none",
                edgecolor=color,
                s=50,
                label=f"{be} {kern}, non-square" if not sq else None,
            )
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="problem size (M·N·K)^(1/3)",
        ylabel=f"GFLOP/s ({dtype})",
        title=f"{device}: GFLOP/s by size (open markers: non-square shapes)",
    )
    ticks = sorted({round((r["m"] * r["n"] * r["k"]) ** (1 / 3)) for r in rows})
    ax.set_xticks(ticks, [str(t) for t in ticks], rotation=45 if len(ticks) > 6 else 0)
    ax.xaxis.set_minor_formatter(plt.NullFormatter())
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=7.5, loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
    names = _save(fig, base)
    plt.close(fig)
    return names


def write_figures(rows: list[dict], outdir: Path) -> list[str]:
    """Write the per-device figures; returns their file names (sorted)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names: list[str] = []
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["device"], r["dtype"]), []).append(r)
    with plt.rc_context({"svg.hashsalt": "tiledmm", "font.size": 9, "path.simplify": True}):
        for (dev, dt), grp in sorted(groups.items()):
            tag = f"{_slug(dev)}-{dt}"
            names += roofline_figure(grp, dev, dt, outdir / f"roofline-{tag}")
            names += size_figure(grp, dev, dt, outdir / f"gflops-{tag}")
    return sorted(names)


def render(paths: list[str | Path], outdir: str | Path, figures: bool = True) -> str:
    """Load, write ``tiling-table.md`` (and figures) into ``outdir``; return the Markdown."""
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    rows = load(paths)
    names: list[str] = []
    if figures and rows:
        try:
            names = write_figures(rows, outdir)
        except ImportError as exc:  # matplotlib is the `bench` extra
            print(f"figures skipped ({exc}): pip install 'tiledmm[bench]'", file=sys.stderr)
    text = markdown(rows, [n for n in names if n.endswith(".png")])
    (outdir / "tiling-table.md").write_text(text)
    return text


README_BEGIN, README_END = "<!-- tiledmm report: begin -->", "<!-- tiledmm report: end -->"


def headline_markdown(text: str) -> str:
    """The headline section of the report (the tiling table and vendor figures)."""
    return text.split("\n## Every shape", 1)[0].split("\n", 1)[1].strip() + "\n"


def update_readme(readme: str | Path, text: str) -> None:
    """Replace what stands between the report markers in ``readme`` by the headline."""
    path = Path(readme)
    doc = path.read_text()
    if README_BEGIN not in doc or README_END not in doc:
        raise ValueError(f"{path} has no {README_BEGIN} ... {README_END} block")
    head, rest = doc.split(README_BEGIN, 1)
    tail = rest.split(README_END, 1)[1]
    path.write_text(f"{head}{README_BEGIN}\n{headline_markdown(text)}{README_END}{tail}")


def main(args: argparse.Namespace) -> int:
    """``tiledmm report FILE... [-o DIR] [--readme README.md]``."""
    text = render(args.files, args.output, figures=not getattr(args, "no_figures", False))
    if getattr(args, "readme", None):
        update_readme(args.readme, text)
    print(text)
    return 0
