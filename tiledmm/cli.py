"""Command line: ``tiledmm info | plan | plugins | calibrate | bench | tune | report``."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from .report.info import cmd_info
from .util import exits

if TYPE_CHECKING:
    from .core.backend import Backend

__all__ = ["main", "CLIError"]


class CLIError(Exception):
    """A user error the CLI reports as one line (no traceback) with a non-zero exit."""


class _Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line on stderr (exit 2), like every CLI error."""

    def error(self, message: str):  # noqa: D102 - argparse's hook
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def _tile(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.lower().replace(",", "x").split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected sizes like 128x128x8, got {text!r}") from None


def cmd_plan(args: argparse.Namespace) -> int:
    import tiledmm

    if args.workers:  # one level up: chunks of a Dask cluster as tiles
        from .dask.cluster import plan_from_args

        cp = plan_from_args(args)
        print(json.dumps(cp.to_dict(), indent=2, default=str) if args.json else str(cp))
        return 0
    p = tiledmm.plan(
        args.m,
        args.n,
        args.k,
        dtype=args.dtype,
        backend=args.backend,
        kernel=args.kernel,
        block_tile=args.block_tile,
        thread_tile=args.thread_tile,
        precision=args.precision,
    )
    from .tune.provenance import origin

    came = origin(p.geometry_source)
    if args.json:
        print(json.dumps(dict(p.to_dict(), tiles_from=came), indent=2, default=str))
        return 0
    print(p)
    hint = ""
    if came not in ("first use", "tiledmm tune", "requested"):
        hint = ("; matmul's first call of this shape class times a short list on this device "
                "(first use), `tiledmm tune --quick` does it now")  # fmt: skip
    print(f"  tiles from: {came}{hint}")
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
    from .tune.calibrate import calibrate

    for name, rec, path in calibrate(args.backend, quick=args.quick):
        peaks = ", ".join(f"{k} {v / 1e9:.4g} GFLOP/s" for k, v in rec["peak_flops"].items())
        costs = "; ".join(f"{b} host cost {e['seconds'] * 1e6:.3g} us per call"
                          + (f" ({e['host_arrays'] * 1e6:.3g} us from host arrays)"
                             if "host_arrays" in e else "")
                          for b, e in rec.get("host_cost", {}).items())  # fmt: skip
        print(f"{name}: {peaks}; bandwidth {rec['bandwidth'] / 1e9:.4g} GB/s; {costs} -> {path}")
    return 0


def _select_backends(names: list[str] | None) -> list[Backend]:
    """The named backends (each must exist and be available), or every available one."""
    import tiledmm

    if names:
        return [tiledmm.get_backend(n) for n in dict.fromkeys(names)]
    found = [tiledmm.get_backend(r.name) for r in tiledmm.backends() if r.available]
    if not found:
        raise RuntimeError("no backend is available here; `tiledmm info` says why")
    return found


def output_folder(path: str | Path) -> Path:
    """``path`` as a folder that exists and can be written (checked before any measuring)."""
    out = Path(path)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OSError(f"cannot create the output folder {out}: {exc.strerror or exc}") from None
    if not os.access(out, os.W_OK):
        raise OSError(f"cannot write to the output folder {out}")
    return out


def cmd_bench(args: argparse.Namespace) -> int:
    """``tiledmm bench``: sweep, write JSON, then the figures and the table (report.py).

    Returns :data:`exits.WRONG_RESULT` when a case failed its check (after writing everything);
    raises (status :data:`exits.ERROR`) when nothing was measured or the report fails; an
    impossible request (unknown backend, kernel or dtype; an output folder that cannot be
    written) raises before any measuring."""
    if args.dask:
        from .bench.dask_bench import bench_dask

        return bench_dask(args)
    from .bench.busy import BusyMachineWarning, busy_reasons, cpus, load_average, load_text
    from .bench.results import write_results
    from .bench.sweep import check_request, run_sweep
    from .util.args import parse_shapes

    start = load_average()  # before any work of ours: the load of other work
    backends = _select_backends(args.backend)
    dtypes = check_request(backends, args.kernel, args.dtype.split(","))
    shapes = parse_shapes(args.sizes) if args.sizes else None
    outdir = output_folder(args.output)
    if getattr(args, "calibrate", False):
        from .tune.calibrate import calibrate

        for be in backends:
            for dev, rec, path in calibrate(be, quick=args.quick):
                print(f"calibrated {dev}: {rec['method']} -> {path}", file=sys.stderr)
    t0 = time.perf_counter()
    res = run_sweep(
        backends,
        kernels=args.kernel,
        dtypes=dtypes,
        shapes=shapes,
        quick=args.quick,
        seed=getattr(args, "seed", 0),
    )
    res.loadavg = start
    res.busy = busy_reasons(start, cpus(), (b["extra_info"] for b in res.benchmarks))
    command = "tiledmm " + " ".join(getattr(args, "argv", None) or sys.argv[1:])
    paths = write_results(res, outdir, getattr(args, "name", None), command)
    for s in res.skipped:
        print(f"skipped: {s}", file=sys.stderr)
    for f in res.failures:
        print(f"FAILED: {f}", file=sys.stderr)
    where = ", ".join(str(p) for p in paths)
    took = time.perf_counter() - t0
    if not res.benchmarks and res.failures:  # every case ran, and none was right
        print(f"0 results in {took:.1f} s ({len(res.failures)} failed) -> {where}", file=sys.stderr)
        return exits.WRONG_RESULT
    if not res.benchmarks:
        raise RuntimeError(
            f"0 results in {took:.1f} s ({len(res.skipped)} skipped, {len(res.failures)} failed;"
            f" listed above) -> {where}"
        )
    print(f"{len(res.benchmarks)} results in {took:.1f} s -> {where}", file=sys.stderr)
    from .report.render import render

    print(render(paths, outdir, figures=not getattr(args, "no_figures", False)))
    print(load_text(start, load_average()))  # beside the table: what else ran here
    for text in res.busy:
        warnings.warn(text, BusyMachineWarning, stacklevel=1)
    return exits.WRONG_RESULT if res.failures else exits.OK


def cmd_tune(args: argparse.Namespace) -> int:
    from .tune.command import main as tune_main

    return tune_main(args)


def cmd_report(args: argparse.Namespace) -> int:
    from .report.render import main as report_main

    return report_main(args)


def build_parser() -> argparse.ArgumentParser:
    import tiledmm

    from .planner.geometry import KERNEL_FAMILIES
    from .util import args as A  # every numeric and list argument is checked when parsed

    p = _Parser(prog="tiledmm", description=__doc__)
    p.add_argument("--version", action="version", version=f"tiledmm {tiledmm.__version__}")
    p.add_argument("--debug", action="store_true", help="show the traceback of an error")
    sub = p.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)  # --debug also after the command
    common.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS
    )

    def command(name: str, **kw) -> argparse.ArgumentParser:
        return sub.add_parser(name, parents=[common], **kw)

    s = command("info", help="backends: available or why not, devices, limits, ceilings")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_info)

    s = command("plan", help="explain the plan for one M x N x K product")
    s.add_argument("m", type=A.non_negative_int)
    s.add_argument("n", type=A.non_negative_int)
    s.add_argument("k", type=A.non_negative_int)
    s.add_argument("--dtype", default="float32")
    s.add_argument("--backend", default="auto")
    s.add_argument("--kernel", default="auto", choices=["auto", *KERNEL_FAMILIES])
    s.add_argument("--block-tile", type=_tile, help="BMxBNxBK, e.g. 128x128x8")
    s.add_argument("--thread-tile", type=_tile, help="TMxTN, e.g. 8x8 (mma: the warp tile)")
    s.add_argument("--precision", choices=["tf32"], help="float32 on tensor cores (mma)")
    s.add_argument("--workers", type=A.positive_int,
                   help="plan chunks for a Dask cluster of W workers")  # fmt: skip
    s.add_argument("--worker-memory", type=A.size_text,
                   help="per worker, e.g. 80GiB (default: this host's RAM)")  # fmt: skip
    s.add_argument("--link-bandwidth", type=A.size_text,
                   help="into one worker, e.g. 25GB/s (default 10GB/s)")  # fmt: skip
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_plan)

    s = command("plugins", help="installed plugins, versions, backends, status")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_plugins)

    s = command("calibrate", help="measure peak FLOP/s, bandwidth and the backend's per-call host "
                "cost; cache them")
    s.add_argument("--backend", default="numpy")
    s.add_argument("--quick", action="store_true")
    s.set_defaults(func=cmd_calibrate)

    s = command(
        "bench",
        help="run a sweep, write JSON + figures, print the table",
        description="Run a sweep, write JSON + figures, print the table.",
        epilog=f"exit status: {exits.OK} every result correct; {exits.WRONG_RESULT} a result "
        "was wrong (the run finished and wrote everything; listed as FAILED); "
        f"{exits.ERROR} an error stopped the run (one line on stderr); {exits.USAGE} a "
        f"malformed command line; {exits.INTERRUPTED} interrupted",
    )
    s.add_argument(
        "--backend", action="append", help="backend name (repeatable); default: all available"
    )
    s.add_argument("--kernel", action="append", help="kernel family (repeatable); default: all")
    s.add_argument("--sizes", type=A.size_list, help="comma list of N (square) or MxNxK shapes")
    s.add_argument("--dtype", default="float32", help="float32, float64 or both (comma list)")
    s.add_argument("--quick", action="store_true", help="small sizes, few repeats (< 1 minute)")
    s.add_argument("-o", "--output", default="tiledmm-results", help="output folder")
    s.add_argument("--name", type=A.results_name,
                   help="results file name in the output folder (NAME.json, all devices in one "
                   "file)")  # fmt: skip
    s.add_argument("--seed", type=A.non_negative_int, default=0, help="seed of the random inputs")
    s.add_argument("--calibrate", action="store_true", help="measure the ceilings first")
    s.add_argument("--no-figures", action="store_true", help="skip the plots")
    s.add_argument("--dask", action="store_true", help="tiledmm on a Dask cluster vs one device")
    s.add_argument("--workers", type=A.positive_int,
                   help="with --dask: workers (default: all local GPUs)")  # fmt: skip
    s.add_argument("--reps", type=A.positive_int, default=2,
                   help="with --dask: timed runs per case")  # fmt: skip
    s.add_argument("--link-bandwidth", type=A.positive_float,
                   help="with --dask: bytes/s into one worker")  # fmt: skip
    s.add_argument("--worker-memory", type=A.positive_float,
                   help="with --dask: bytes per worker")  # fmt: skip
    s.set_defaults(func=cmd_bench)

    s = command("tune", help="autotune tiles on this device; keep them in the tuning database")
    from .tune.command import add_arguments as tune_arguments

    tune_arguments(s)
    s.set_defaults(func=cmd_tune)

    s = command("report", help="merge result files into the tiling table and figures")
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


def _one_line(exc: BaseException) -> str:
    """An exception as one line: OSError as 'what: file', newlines folded."""
    if isinstance(exc, OSError) and exc.strerror:
        names = [str(f) for f in (exc.filename, exc.filename2) if f is not None]
        text = exc.strerror + (f": {' -> '.join(names)}" if names else "")
    else:
        text = str(exc) or type(exc).__name__
    if isinstance(exc, KeyError) and exc.args:
        text = f"missing key {exc.args[0]!r}"
    return " ".join(part.strip() for part in text.splitlines() if part.strip())


# Errors of the user's making: the message alone. Anything else also names its type.
_USER_ERRORS = (CLIError, ValueError, TypeError, OSError, RuntimeError)


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    text = " ".join(part.strip() for part in str(message).splitlines() if part.strip())
    print(f"tiledmm: warning: {text}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """Run one command; every error is one line on stderr and a non-zero exit status
    (:mod:`tiledmm.util.exits`: 2 usage, 1 error, 130 interrupted; ``bench``: 3 a wrong result).
    ``--debug`` shows the traceback instead."""
    try:
        args = build_parser().parse_args(argv)
        args.argv = list(sys.argv[1:] if argv is None else argv)
    except SystemExit as exc:  # --help, or a usage error already printed on one line
        return exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 2
    where = f"tiledmm {args.command}"
    with warnings.catch_warnings():
        if not args.debug:
            warnings.showwarning = _show_warning
        try:
            return args.func(args) or 0
        except KeyboardInterrupt:
            if args.debug:
                raise
            print(f"{where}: interrupted", file=sys.stderr)
            return exits.INTERRUPTED
        except Exception as exc:  # noqa: BLE001 - the last resort: one line, never a traceback
            if args.debug:
                raise
            if isinstance(exc, _USER_ERRORS):
                print(f"{where}: error: {_one_line(exc)}", file=sys.stderr)
            else:
                msg = f"{type(exc).__name__}: {_one_line(exc)}"
                print(f"{where}: error: {msg} (--debug shows where)", file=sys.stderr)
            return exits.ERROR


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
