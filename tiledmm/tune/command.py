"""`tiledmm tune`: search a backend's tile space on this device; keep the winners.

For each kernel family and shape class: the backend's search space (``Backend.search_space``),
pruned by the planner's device limits (``make_plan``'s ``PlanError``) before anything compiles;
the shipped default always in it (candidate 0) so the winner is never slower than the default
as measured in this run. Every candidate runs once into a NaN-poisoned output and is checked
against a float64 reference (``tiledmm.util.accuracy.rel_error``) before it is timed with the
backend's ``timings`` (device events on GPUs); compile errors, launch failures, wrong results
and timeouts are logged and never selected. Strategy ``exhaustive`` tries the whole pruned space
(the default when it has at most ``EXHAUSTIVE_MAX`` candidates); ``random+local`` samples at
random, then walks to better neighbours (one knob changed) of the best so far. Every result
goes to a JSON-lines log per device and backend in the cache directory, so an interrupted run
resumes. The winners go to the user tuning database (``tiledmm.core.tuning``), which the planner
reads; ``--export FILE`` writes them out to contribute back.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from ..core import dispatch, tuning, tuning_check
from ..planner.geometry import KERNEL_FAMILIES
from ..util.args import checked, non_negative_int, positive_int
from .closing import closing, entry, verdict
from .search import EXHAUSTIVE_MAX, Tuner
from .task import Task

__all__ = ["add_arguments", "main", "parse_budget", "tasks_for"]

CLASS_ALIASES = {"squares": ("square",), "skinny": ("skinny_k", "skinny_mn")}
DEFAULT_SHAPES = "squares,odd,skinny,batched"


def parse_budget(text: str) -> float:
    """'10m', '90s', '1h', '2m30s' or plain seconds -> seconds (more than 0)."""
    t = str(text).strip().lower()
    parts = re.fullmatch(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s?)?", t)
    if not t or not parts or not any(parts.groups()):
        raise ValueError(f"budget {text!r}: use seconds or a duration such as 10m, 90s, 1h")
    h, m, s = (float(x) if x else 0.0 for x in parts.groups())
    if h * 3600 + m * 60 + s <= 0:
        raise ValueError(f"budget {text!r}: give more than 0 s (10m, 90s, 1h)")
    return h * 3600 + m * 60 + s


def class_shape(cls: str, n: int) -> tuple[int, int, int, int]:
    """(batch, M, N, K) representing a shape class at scale ``n`` (the first of
    :func:`class_shapes`)."""
    return class_shapes(cls, n)[0]


def class_shapes(cls: str, n: int) -> list[tuple[int, int, int, int]]:
    """(batch, M, N, K) shapes representing a shape class at scale ``n``: two where one tile
    serves the class badly (on the H200 a skinny tile tuned at N = 48 ran M = 16 at 0.57 of
    the shipped one; mid-size odd products fill the grid differently from large ones). The
    tuner keeps one geometry per class, the best geometric mean over its shapes."""
    q = max(8, n // 4)
    shapes = {
        "square": [(1, n, n, n)],
        "odd": [(1, n - 23, n - 9, n - 1), (1, q + 7, 3 * q - 3, n // 5 + 9)],
        "skinny_k": [(1, n, n, max(8, min(128, n // 4)))],
        "skinny_mn": [(1, n, 48, n), (1, 16, n, n)],
        "batched": [(8, q, q, q)], "vector": [(1, n, 1, n)],
    }  # fmt: skip
    return shapes[cls]


def tasks_for(spec: str, n: int) -> list[tuple[str, tuple[int, int, int, int]]]:
    """(shape class, (batch, M, N, K)) per item of ``--shapes``: class names (``squares`` and
    ``skinny`` expand) or explicit ``MxNxK`` / ``BxMxNxK`` shapes."""
    out = []
    for item in (x.strip() for x in spec.split(",") if x.strip()):
        if re.fullmatch(r"\d+(x\d+){2,3}", item):
            dims = tuple(int(x) for x in item.split("x"))
            if min(dims) < 1:
                raise ValueError(f"--shapes: {item!r} has a zero size; sizes are positive")
            b, m, nn, k = dims if len(dims) == 4 else (1, *dims)
            out.append((tuning.shape_class(m, nn, k, b), (b, m, nn, k)))
            continue
        for cls in CLASS_ALIASES.get(item, (item,)):
            if cls not in tuning_check.SHAPE_CLASSES:
                names = ", ".join((*tuning_check.SHAPE_CLASSES, *CLASS_ALIASES))
                raise ValueError(f"--shapes: {item!r} is no shape class ({names}) or MxNxK")
            out += [(cls, shape) for shape in class_shapes(cls, n)]
    if not out:
        raise ValueError(f"--shapes {spec!r} names no shape: give shape classes or MxNxK")
    return out


def _shapes_arg(text: str) -> str:
    tasks_for(text, 1024)  # the classes and sizes are checked here; --size scales them later
    return text


def _kernels_arg(text: str) -> str:
    names = [x.strip() for x in text.split(",")]
    if text != "all" and (not all(names) or set(names) - set(KERNEL_FAMILIES)):
        raise ValueError(f"{text!r}: give 'all' or families of {', '.join(KERNEL_FAMILIES)}, "
                         "comma-separated")  # fmt: skip
    return text


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``tiledmm tune``."""
    p.add_argument("--backend", default="auto", help="backend to tune (default: auto)")
    p.add_argument("--dtype", default="float32")
    p.add_argument(
        "--kernel",
        default="register",
        type=checked(_kernels_arg),
        help="family to tune, a comma list, or 'all' (default: register)",
    )
    p.add_argument(
        "--shapes",
        default=DEFAULT_SHAPES,
        type=checked(_shapes_arg),
        help="shape classes (squares, odd, skinny, batched, skinny_k, skinny_mn, "
        f"vector) or MxNxK shapes, comma-separated (default: {DEFAULT_SHAPES})",
    )
    p.add_argument(
        "--size",
        type=positive_int,
        help="scale of the class shapes (default: 4096 on a GPU, 1024 on a CPU)",
    )
    p.add_argument(
        "--budget",
        default="10m",
        type=checked(parse_budget),
        help="time for the whole run: 10m, 90s, 1h (running out is not an error)",
    )
    p.add_argument(
        "--strategy",
        default="auto",
        choices=["auto", "exhaustive", "random+local"],
        help=f"auto: exhaustive up to {EXHAUSTIVE_MAX} candidates, else random+local",
    )
    p.add_argument("--seed", type=non_negative_int, default=0)
    p.add_argument("--fresh", action="store_true", help="ignore the log of earlier runs")
    p.add_argument(
        "--cold",
        action="store_true",
        help="start from the model default, not the shipped geometry (which is then "
        "only measured, for the closing table)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="time first use's short list per class now (seconds, not minutes): pre-warms a "
        "machine for deployment (TILEDMM_FIRST_USE_BUDGET, TILEDMM_FIRST_USE_SHORTLIST)",
    )
    p.add_argument("--no-save", action="store_true", help="do not write the tuning database")
    p.add_argument(
        "--export",
        metavar="FILE",
        help="only write this device's tunings (of --backend, unless auto) to FILE",
    )
    p.add_argument("--json", metavar="FILE", help="also write the closing table as JSON")
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bar (default: when stderr is a terminal)",
    )


def main(args: argparse.Namespace) -> int:
    """Run ``tiledmm tune``; returns the exit status (``tiledmm.tune.closing``: 0 when every
    task is done or only the budget stopped some, 1 when a task found no usable geometry)."""
    be = dispatch.resolve_backend(args.backend, dtype=args.dtype)
    if args.export:
        n = tuning.export(Path(args.export), be.device(),
                          None if args.backend == "auto" else be.name)  # fmt: skip
        print(f"wrote {n} tuning entries for {be.device().name} to {args.export}")
        return 0
    reason = be.unavailable_reason()
    if reason:
        raise RuntimeError(f"backend {be.name!r} is not available: {reason}")
    if args.dtype not in be.dtypes:
        raise ValueError(f"backend {be.name!r} runs {', '.join(be.dtypes)}, not {args.dtype}")
    fams = be.kernels if args.kernel == "all" else tuple(args.kernel.split(","))
    if args.kernel == "all" and args.dtype == "float32":  # mma on float32 is TF32: never implied
        fams = tuple(f for f in fams if f != "mma")
    for f in fams:
        if f not in KERNEL_FAMILIES or f not in be.kernels:
            raise ValueError(f"backend {be.name!r} has no {f!r} kernel; it has {be.kernels}")
    dev = be.device()
    if be.search_space(fams[0], args.dtype, dev) is None:
        raise ValueError(f"backend {be.name!r} declares no search space (Backend.search_space)")
    size = args.size or (4096 if dev.is_gpu else 1024)
    if getattr(args, "quick", False):  # the short list of first use, per class
        from .first_use import prewarm

        return prewarm(be, args.dtype, fams, tasks_for(args.shapes, size))
    tuner = Tuner(be, args.dtype, parse_budget(args.budget), args.strategy, args.seed,
                  resume=not args.fresh, cold=args.cold)  # fmt: skip
    todo = tasks_for(args.shapes, size)
    # the ladder's top family first: where the budget runs out, what `auto` runs is measured
    fams = tuple(sorted(fams, key=KERNEL_FAMILIES.index, reverse=True))
    tasks = [Task(tuner, f, cls, shape) for f in fams for cls, shape in todo]
    total = sum(len(t.space) for t in tasks)
    print(
        f"tuning {be.name} on {dev.name}, {args.dtype}: {len(tasks)} task(s), {total} "
        f"candidates after pruning, budget {tuner.budget:.0f} s; log {tuner.log}",
        flush=True,
    )
    bar = _bar(total, args.progress)
    try:
        for i, t in enumerate(tasks):
            if tuner.left() > 0:  # else: not measured, the budget ran out (tune_report)
                tuner.search(t, tuner.left() / (len(tasks) - i), bar)
    finally:
        if bar is not None:
            bar.close()
    tuner.unify(tasks)  # one winner per family and shape class
    for t in tasks:  # last: the vendor library's threads must not slow the candidates down
        if t.host is not None:
            tuner.vendor_gflops(t, t.host)
    rows = closing(tuner, tasks)
    entries = [entry(tuner, t) for t in tasks if t.choice] if not args.no_save else []
    if entries:
        path = tuning.save_entries(entries)
        dispatch.clear_caches()
        print(f"saved {len(entries)} entries to {path}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1, default=str))
    return verdict(tuner, tasks, len(entries))


def _bar(total: int, enabled: bool | None):
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    import sys

    on = sys.stderr.isatty() if enabled is None else enabled
    return tqdm(total=total, unit="cand", disable=not on, file=sys.stderr, leave=False)
