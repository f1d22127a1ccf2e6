"""Command line: ``tiledmm info | plan | plugins | calibrate | bench | report``."""

from __future__ import annotations

import argparse
import json
import sys

__all__ = ["main"]


def _tile(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.lower().replace(",", "x").split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected sizes like 128x128x8, got {text!r}") from None


def cmd_info(args: argparse.Namespace) -> int:
    import tiledmm

    rows = tiledmm.backends()
    if args.json:
        out = []
        for r in rows:
            d = dict(r.__dict__)
            if r.available:
                d["devices"] = [dev.to_dict() for dev in tiledmm.get_backend(r.name).devices()]
            out.append(d)
        print(json.dumps(out, indent=2, default=str))
        return 0
    for r in rows:
        alias = f" (aliases: {', '.join(r.aliases)})" if r.aliases else ""
        print(f"{r.name}{alias} [{r.plugin}]")
        if not r.available:
            print(f"  unavailable, because {r.reason}")
            continue
        print(f"  kernels: {', '.join(r.kernels)}; dtypes: {', '.join(r.dtypes)}")
        for dev in tiledmm.get_backend(r.name).devices():
            print(f"  device: {dev.name} ({dev.kind}{', ' + dev.vendor if dev.vendor else ''})")
            print(
                f"    {dev.compute_units} compute units, warp {dev.warp_size}, "
                f"{dev.max_threads_per_block} threads/block, "
                f"{dev.max_shared_per_block // 1024} KiB shared(local)/block"
                + (f", {dev.registers_per_unit} registers/unit" if dev.is_gpu else "")
            )
            if dev.caches:
                print("    caches: " + ", ".join(f"{k} {v // 1024} KiB" for k, v in dev.caches))
            peaks = ", ".join(f"{k} {v / 1e12:.3g} TFLOP/s" for k, v in dev.peak_flops)
            print(f"    ceilings: {peaks}, {dev.bandwidth / 1e9:.4g} GB/s ({dev.ceilings_source})")
            for key, value in dev.extra:
                print(f"    {key}: {value}")
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    import tiledmm

    p = tiledmm.plan(
        args.m,
        args.n,
        args.k,
        dtype=args.dtype,
        backend=args.backend,
        kernel=args.kernel,
        block_tile=args.block_tile,
        thread_tile=args.thread_tile,
    )
    print(json.dumps(p.to_dict(), indent=2, default=str) if args.json else str(p))
    return 0


def cmd_plugins(args: argparse.Namespace) -> int:
    import tiledmm

    infos = tiledmm.plugins()
    if args.json:
        print(json.dumps([i.__dict__ for i in infos], indent=2))
        return 0
    for i in infos:
        print(
            f"{i.name:14} {i.distribution:22} {i.version:10} {i.status:9} "
            f"backends: {', '.join(i.backends) or '-'}"
        )
        if i.error:
            print(f"{'':14} error: {i.error}")
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    from .calibrate import calibrate

    for name, rec, path in calibrate(args.backend, quick=args.quick):
        peaks = ", ".join(f"{k} {v / 1e9:.4g} GFLOP/s" for k, v in rec["peak_flops"].items())
        print(f"{name}: {peaks}; bandwidth {rec['bandwidth'] / 1e9:.4g} GB/s -> {path}")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from .bench import main as bench_main

    return bench_main(args)


def cmd_report(args: argparse.Namespace) -> int:
    from .report import main as report_main

    return report_main(args)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tiledmm", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("info", help="backends: available or why not, devices, limits, ceilings")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_info)

    s = sub.add_parser("plan", help="explain the plan for one M x N x K product")
    s.add_argument("m", type=int)
    s.add_argument("n", type=int)
    s.add_argument("k", type=int)
    s.add_argument("--dtype", default="float32")
    s.add_argument("--backend", default="auto")
    s.add_argument("--kernel", default="auto", choices=["auto", "naive", "tiled", "register"])
    s.add_argument("--block-tile", type=_tile, help="BMxBNxBK, e.g. 128x128x8")
    s.add_argument("--thread-tile", type=_tile, help="TMxTN, e.g. 8x8")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_plan)

    s = sub.add_parser("plugins", help="installed plugins, versions, backends, status")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_plugins)

    s = sub.add_parser("calibrate", help="measure peak FLOP/s and bandwidth; cache them")
    s.add_argument("--backend", default="numpy")
    s.add_argument("--quick", action="store_true")
    s.set_defaults(func=cmd_calibrate)

    s = sub.add_parser("bench", help="run a sweep, write JSON + figures, print the table")
    s.add_argument(
        "--backend", action="append", help="backend name (repeatable); default: all available"
    )
    s.add_argument("--kernel", action="append", help="kernel family (repeatable); default: all")
    s.add_argument("--sizes", help="comma list of N (square) or MxNxK shapes")
    s.add_argument("--dtype", default="float32", help="float32, float64 or both (comma list)")
    s.add_argument("--quick", action="store_true", help="small sizes, few repeats (< 1 minute)")
    s.add_argument("-o", "--output", default="tiledmm-results", help="output folder")
    s.add_argument("--name", help="results file name (NAME.json, all devices in one file)")
    s.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    s.add_argument("--calibrate", action="store_true", help="measure the ceilings first")
    s.add_argument("--no-figures", action="store_true", help="skip the plots")
    s.set_defaults(func=cmd_bench)

    s = sub.add_parser("report", help="merge result files into the tiling table and figures")
    s.add_argument("files", nargs="+")
    s.add_argument("-o", "--output", default="report", help="output folder")
    s.add_argument("--no-figures", action="store_true", help="only the Markdown table")
    s.add_argument(
        "--readme",
        help="also rewrite the headline table between the report "
        "markers of this Markdown file (README.md)",
    )
    s.set_defaults(func=cmd_report)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args) or 0
    except (ValueError, RuntimeError) as exc:
        print(f"tiledmm {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
