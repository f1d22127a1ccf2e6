"""The report's figures: a log-log roofline and GFLOP/s against size, per device and dtype.

Rows come from :func:`tiledmm.bench.results.load`. Output is deterministic (sorted rows, no
timestamps or software tags in the files).
"""

from __future__ import annotations

from pathlib import Path

from ..bench.results import family_rank, fmt_num, headline, ladder_row, shape_label

__all__ = ["roofline_figure", "size_figure", "hierarchy_figure", "write_figures"]

_COLORS = {"naive": "#d62728", "tiled": "#1f77b4", "register": "#2ca02c"}
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


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
        and ladder_row(r)
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
            label=f"{r['backend']} {r['kernel']} ({shape_label(r)}): {fmt_num(r['gflops'])}",
        )
    for i, be in enumerate(sorted({r["backend"] for r in pts})):
        v = next(r.get("vendor_gflops") for r in pts if r["backend"] == be)
        if v:
            ax.axhline(
                v,
                color="purple",
                lw=1,
                ls=("--", "-.", ":")[i % 3],
                label=f"{be} vendor GEMM: {fmt_num(v)} GFLOP/s",
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
    order = sorted(series, key=lambda t: (t[0], family_rank(t[1])))
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


_LEVEL_MARKERS = {"shared memory": "s", "L1": "^", "L2": "D", "DRAM": "o", "L3": "v"}


def hierarchy_figure(rows: list[dict], device: str, dtype: str, base: Path) -> list[str]:
    """Hierarchical roofline (docs/model.md): one roof per memory level of the reference
    device, and each family's measured FLOP/s at each level's intensity (the headline shape,
    first backend), so naive -> tiled -> register climbs the hierarchy. GPU rows of the
    reference H200 only (the device whose levels are on record); [] otherwise."""
    from ..device.nvidia import reference_h200
    from ..planner.plans import PlanError
    from .modelcheck import plan_for_row

    dev = reference_h200()
    if device != dev.name:
        return []
    import matplotlib.pyplot as plt

    heads = headline(rows)
    pts = {}
    for r in sorted(rows, key=lambda r: r["backend"]):
        if heads.get((r["device"], r["backend"], r["dtype"])) == (r["m"], r["n"], r["k"]):
            if ladder_row(r):
                pts.setdefault(r["kernel"], r)
    if not pts:
        return []
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    peak = dev.clocked("compute", dev.fma_peak(dtype))
    xs = [2.0**e for e in range(-6, 11)]
    for name, bw in dev.levels:
        bw = dev.clocked(name, bw) if name in ("shared memory", "L1") else bw
        ax.plot(xs, [min(peak, x * bw) / 1e12 for x in xs], lw=1, color="0.5",
                ls="--" if name in ("L2", "DRAM") else "-")  # fmt: skip
        ax.annotate(name, (xs[0], xs[0] * bw / 1e12), fontsize=7, color="0.3")
    ax.axhline(peak / 1e12, color="k", lw=1)
    for fam in sorted(pts, key=family_rank):
        r = pts[fam]
        try:
            plan = plan_for_row(r, dev)
        except PlanError:  # a row whose geometry the planner cannot rebuild has no levels
            continue
        y = r["gflops"] / 1e3
        got = [(lv.name, lv.intensity(plan.flops)) for lv in plan.levels
               if lv.name in _LEVEL_MARKERS and lv.amount]  # fmt: skip
        ax.plot([x for _, x in got], [y] * len(got), color=_COLORS.get(fam, "k"), lw=0.8)
        for name, x in got:
            ax.scatter([x], [y], color=_COLORS.get(fam, "k"), marker=_LEVEL_MARKERS[name], s=28,
                       zorder=3, label=f"{fam} @ {name}")  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("intensity at the level (FLOP per byte crossing it)")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(f"{device}, {dtype}: hierarchical roofline (measured points)", fontsize=9)
    ax.legend(fontsize=6, ncol=3, loc="lower right")
    fig.tight_layout()
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
            names += hierarchy_figure(grp, dev, dt, outdir / f"hierarchy-{tag}")
    return sorted(names)
