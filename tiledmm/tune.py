"""`tiledmm tune`: search a backend's tile space on this device; keep the winners.

For each kernel family and shape class: the backend's search space (``Backend.search_space``),
pruned by the planner's device limits (``make_plan``'s ``PlanError``) before anything compiles;
the shipped default always in it (candidate 0) so the winner is never slower than the default
as measured in this run. Every candidate runs once into a NaN-poisoned output and is checked
against a float64 reference (``tiledmm.accuracy.rel_error``) before it is timed with the
backend's ``timings`` (device events on GPUs); compile errors, launch failures, wrong results
and timeouts are logged and never selected. Strategy ``exhaustive`` tries the whole pruned space
(the default when it has at most ``EXHAUSTIVE_MAX`` candidates); ``random+local`` samples at
random, then walks to better neighbours (one knob changed) of the best so far. Every result
goes to a JSON-lines log per device and backend in the cache directory, so an interrupted run
resumes. The winners go to the user tuning database (``tiledmm.tuning``), which the planner
reads; ``--export FILE`` writes them out to contribute back.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import statistics
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from . import dispatch, tuning
from .accuracy import rel_error
from .backend import KERNEL_FAMILIES, Backend, Geometry
from .planner import PlanError, default_geometry, make_plan

__all__ = ["add_arguments", "main", "Tuner", "parse_budget", "tasks_for", "log_path"]

EXHAUSTIVE_MAX = 64
CLASS_ALIASES = {"squares": ("square",), "skinny": ("skinny_k", "skinny_mn")}
DEFAULT_SHAPES = "squares,odd,skinny,batched"
TOL = {"float16": 5e-3, "float32": 1e-4, "float64": 1e-10}
ODD_CHECK = (97, 131, 67)  # the winner's extra correctness check: edges in every dimension


def parse_budget(text: str) -> float:
    """'10m', '90s', '1h', '2m30s' or plain seconds -> seconds."""
    t = str(text).strip().lower()
    parts = re.fullmatch(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s?)?", t)
    if not t or not parts or not any(parts.groups()):
        raise ValueError(f"budget {text!r}: use seconds or a duration such as 10m, 90s, 1h")
    h, m, s = (float(x) if x else 0.0 for x in parts.groups())
    return h * 3600 + m * 60 + s


def class_shape(cls: str, n: int) -> tuple[int, int, int, int]:
    """(batch, M, N, K) representing a shape class at scale ``n``."""
    q = max(8, n // 4)
    shapes = {
        "square": (1, n, n, n), "odd": (1, n - 23, n - 9, n - 1),
        "skinny_k": (1, n, n, max(8, min(128, n // 4))), "skinny_mn": (1, n, 48, n),
        "batched": (8, q, q, q), "vector": (1, n, 1, n),
    }  # fmt: skip
    return shapes[cls]


def tasks_for(spec: str, n: int) -> list[tuple[str, tuple[int, int, int, int]]]:
    """(shape class, (batch, M, N, K)) per item of ``--shapes``: class names (``squares`` and
    ``skinny`` expand) or explicit ``MxNxK`` / ``BxMxNxK`` shapes."""
    out = []
    for item in (x.strip() for x in spec.split(",") if x.strip()):
        if re.fullmatch(r"\d+(x\d+){2,3}", item):
            dims = tuple(int(x) for x in item.split("x"))
            b, m, nn, k = dims if len(dims) == 4 else (1, *dims)
            out.append((tuning.shape_class(m, nn, k, b), (b, m, nn, k)))
            continue
        for cls in CLASS_ALIASES.get(item, (item,)):
            if cls not in tuning.SHAPE_CLASSES:
                names = ", ".join((*tuning.SHAPE_CLASSES, *CLASS_ALIASES))
                raise ValueError(f"--shapes: {item!r} is no shape class ({names}) or MxNxK")
            out.append((cls, class_shape(cls, n)))
    return out


def log_path(device_name: str, backend: str) -> Path:
    """The resumable log of one device and backend, beside the user tuning database."""
    slug = re.sub(r"[^A-Za-z0-9]+", "-", f"{device_name}--{backend}").strip("-").lower()
    return tuning.database_path().parent / "tune" / f"{slug}.jsonl"


def geo_key(g: Geometry) -> str:
    return json.dumps([list(g.block_tile), list(g.thread_tile), sorted(map(list, g.options))])


def geo_text(g: Geometry) -> str:
    bm, bn, bk = g.block_tile
    opts = ",".join(f"{k}={v}" for k, v in g.options)
    return f"{bm}x{bn}x{bk}/{g.thread_tile[0]}x{g.thread_tile[1]}" + (f" {opts}" if opts else "")


class Task:
    """One family on one shape: the operands, the reference, the candidates and results."""

    def __init__(self, tuner: Tuner, family: str, cls: str, shape: tuple[int, int, int, int]):
        self.tuner, self.family, self.cls, self.shape = tuner, family, cls, shape
        b, m, n, k = shape
        self.flops = 2 * b * m * n * k
        self.key = f"{tuner.dtype}|{family}|{b}x{m}x{n}x{k}"
        self.results: dict[str, dict] = {}
        dev, dt = tuner.device, tuner.dtype
        model = replace(default_geometry(family, dt, dev), source="model default")
        shipped = tuning.select(tuner.be, family, dt, dev, cls, user=False)
        self.default = shipped or model
        base = [model] if tuner.cold else [self.default, model]
        space = tuner.be.search_space(family, dt, dev) or []
        seen, self.space = set(), []
        for g in [x for x in base if x is not None] + list(space):
            if geo_key(g) not in seen and self.plan(g) is not None:
                seen.add(geo_key(g))
                self.space.append(g)
        self.pruned = len(space) + len(base) - len(self.space)
        self.choice: dict | None = None
        self.default_gflops: float | None = None
        self.host: Any = None

    def plan(self, g: Geometry, shape: tuple[int, int, int] | None = None):
        m, n, k = shape or self.shape[1:]
        try:
            t = self.tuner
            return make_plan(m, n, k, dtype=t.dtype, kernel=self.family, device=t.device,
                             geometry=g, backend=t.be.name)  # fmt: skip
        except PlanError:
            return None

    def ok(self) -> list[dict]:
        return [r for r in self.results.values() if r["status"] == "ok"]

    def best(self) -> dict | None:
        return max(self.ok(), key=lambda r: r["gflops"], default=None)


class Tuner:
    """Runs tasks within a time budget, logging every candidate (see the module docstring)."""

    def __init__(self, be: Backend, dtype: str, budget: float, strategy: str = "auto",
                 seed: int = 0, resume: bool = True, log: Path | None = None,
                 cold: bool = False):  # fmt: skip
        self.be, self.dtype, self.budget, self.strategy = be, dtype, budget, strategy
        self.cold = cold
        self.device = be.device()
        self.rng, self.t0 = random.Random(seed), time.monotonic()
        self.np_rng = np.random.default_rng(seed)
        self.log = log or log_path(self.device.name, be.name)
        self.history = self._read_log() if resume else {}
        self.run_id = time.strftime("%Y-%m-%dT%H:%M:%S")
        self.vendor: dict[str, float] = {}

    # ------------------------------------------------------------------ log

    def _read_log(self) -> dict[tuple[str, str], dict]:
        out = {}
        try:
            lines = self.log.read_text().splitlines()
        except OSError:
            return out
        for line in lines:
            try:
                r = json.loads(line)
                out[(r["task"], r["geometry"])] = r
            except (ValueError, KeyError, TypeError):
                continue  # a torn last line of an interrupted run
        return out

    def _write(self, rec: dict) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("a") as f:
            f.write(json.dumps(rec, allow_nan=False, default=str) + "\n")

    def left(self) -> float:
        return self.budget - (time.monotonic() - self.t0)

    # ------------------------------------------------------------------ measuring

    def operands(self, shape: tuple[int, int, int, int]):
        b, m, n, k = shape
        a = self.np_rng.standard_normal((b, m, k))
        bb = self.np_rng.standard_normal((b, k, n))
        dt = np.dtype(self.dtype)
        ref = np.matmul(a.astype(dt).astype(np.float64), bb.astype(dt).astype(np.float64))
        A = [self.be.asarray(a[i].astype(dt), dt) for i in range(b)]
        B = [self.be.asarray(bb[i].astype(dt), dt) for i in range(b)]
        return a.astype(dt), bb.astype(dt), ref, A, B

    def check(self, plan, A, B, ref) -> float:
        """Run ``plan`` once per matrix into NaN-poisoned outputs; the worst relative error."""
        dt = np.dtype(self.dtype)
        worst = 0.0
        for i in range(len(A)):
            C = self.be.asarray(np.full((plan.m, plan.n), np.nan, dt), dt)
            self.be.run(plan, A[i], B[i], C)
            self.be.synchronize()
            worst = max(worst, rel_error(self.be.to_numpy(C), ref[i]))
        return worst

    def seconds(self, be: Backend, fn, first: float) -> float:
        reps = int(min(15, max(3, 0.3 / max(first, 1e-6))))
        return statistics.median(be.timings(fn, repeat=reps, warmup=1))

    def vendor_gflops(self, task: Task, host) -> float:
        if task.key not in self.vendor:
            vb = self.be.vendor_backend()
            dt = np.dtype(self.dtype)
            A = [vb.asarray(x, dt) for x in host[0]]
            B = [vb.asarray(x, dt) for x in host[1]]

            def fn():
                for x, y in zip(A, B, strict=True):
                    vb.vendor_matmul(x, y)

            t0 = time.perf_counter()
            fn()
            vb.synchronize()
            self.vendor[task.key] = (
                task.flops / self.seconds(vb, fn, time.perf_counter() - t0) / 1e9
            )
        return self.vendor[task.key]

    def evaluate(self, task: Task, g: Geometry, data) -> dict:
        """Check, then time one candidate; the record (logged) says what happened."""
        gk = geo_key(g)
        old = self.history.get((task.key, gk))
        if old is not None:
            task.results[gk] = old
            return old
        rec: dict[str, Any] = dict(task=task.key, geometry=gk, family=task.family,
                                   shape=list(task.shape), cls=task.cls, run=self.run_id,
                                   tiles=geo_text(g))  # fmt: skip
        _, _, ref, A, B, _ = data
        plan = task.plan(g)
        t0 = time.perf_counter()
        try:
            err = self.check(plan, A, B, ref)
        except Exception as exc:  # noqa: BLE001 - a broken candidate is a result, never a crash
            name = type(exc).__name__
            kind = "compile error" if re.search(r"compil|build|nvrtc", name + str(exc), re.I) \
                else "launch failure"  # fmt: skip
            rec.update(status=kind, error=f"{name}: {str(exc)[:300]}")
        else:
            first = time.perf_counter() - t0
            rec["rel_error"] = err if math.isfinite(err) else None
            best = task.best()
            limit = max(2.0, 20 * best["seconds"]) if best else 60.0
            if not err <= TOL.get(self.dtype, 1e-4):
                rec.update(status="wrong result")
            elif first > limit + 30 and best:  # the first call also compiles: generous
                rec.update(status="timeout", error=f"first call took {first:.1f} s")
            else:

                def fn():
                    for i in range(len(A)):
                        self.be.run(plan, A[i], B[i], data[5])

                try:
                    s = self.seconds(self.be, fn, min(first, limit))
                    rec.update(status="ok", seconds=s, gflops=task.flops / s / 1e9)
                except Exception as exc:  # noqa: BLE001
                    rec.update(status="launch failure", error=f"{type(exc).__name__}: {exc}"[:300])
        task.results[gk] = rec
        self.history[(task.key, gk)] = rec
        self._write(rec)
        return rec

    # ------------------------------------------------------------------ search

    def search(self, task: Task, share: float, bar=None) -> None:
        """Evaluate candidates of ``task`` until ``share`` seconds pass or the space is done."""
        host = self.operands(task.shape)
        dt = np.dtype(self.dtype)
        out = self.be.asarray(np.zeros(task.shape[1:3], dt), dt)
        data = (*host, out)
        task.host = host
        stop = time.monotonic() + share
        order = self.order(task)
        for g in order:
            if time.monotonic() > stop or self.left() <= 0:
                break
            rec = self.evaluate(task, g, data)
            if bar is not None:
                bar.set_postfix_str(f"{task.cls} {task.family} {rec['status']}", refresh=False)
                bar.update(1)
        self.confirm(task, data)

    def order(self, task: Task):
        """Candidates in the order the strategy visits them (a generator: local search reads
        the results so far)."""
        space = task.space
        exhaustive = self.strategy == "exhaustive" or (
            self.strategy == "auto" and len(space) <= EXHAUSTIVE_MAX
        )
        yield space[0]  # the shipped default first: every later candidate is compared to it
        rest = space[1:]
        if exhaustive:
            yield from rest
            return
        pool = rest[:]
        self.rng.shuffle(pool)
        explore = max(8, len(pool) // 10)
        done = {geo_key(space[0])}
        for g in pool[:explore]:
            done.add(geo_key(g))
            yield g
        while len(done) < len(space):
            best = task.best()
            near = [g for g in rest if geo_key(g) not in done and best
                    and _distance(g, json.loads(best["geometry"])) == 1]  # fmt: skip
            nxt = near[0] if near else next(g for g in pool if geo_key(g) not in done)
            done.add(geo_key(nxt))
            yield nxt

    def confirm(self, task: Task, data) -> None:
        """Pick the winner: the three fastest candidates that are also right on an odd shape,
        re-timed with the shipped default in alternating rounds; the fastest in the median of
        those rounds wins, and the default stays when it is that fastest (``--cold``: the
        default only competes if the search itself reached it). Sets ``task.choice`` and
        ``task.default_gflops``."""
        dk = geo_key(task.default)
        base = task.results.get(dk)
        base = base if base and base["status"] == "ok" else None
        task.choice = None if self.cold else base
        task.default_gflops = base["gflops"] if base else None
        top = []
        for cand in sorted(task.ok(), key=lambda r: -r["gflops"]):
            if len(top) == 3:
                break
            if cand["geometry"] == dk or self.odd_ok(task, _geometry(cand["geometry"])):
                top.append(cand)
            else:
                cand.update(status="wrong result", error=f"wrong on {ODD_CHECK}")
                self._write(cand)
        if not top:
            return
        racers = [c for c in top if c["geometry"] != dk]
        fits = task.plan(task.default) is not None
        geos = ([task.default] if fits else []) + [_geometry(c["geometry"]) for c in racers]
        try:
            times = self.rounds(task, geos, data)
        except Exception:  # noqa: BLE001 - the default itself fails here: no race
            times, fits = self.rounds(task, geos[1:], data) if fits else [], False
        if fits:
            tb, times = times[0], times[1:]
            task.default_gflops = task.flops / tb / 1e9
            racers.append(dict(base or {}, geometry=dk, status="ok", tiles=geo_text(task.default)))
            times.append(tb)
        eligible = [(t, i) for i, (t, c) in enumerate(zip(times, racers, strict=True))
                    if not (self.cold and c["geometry"] == dk and dk not in task.results)
                    and (c["geometry"] != dk or base is not None)]  # fmt: skip
        if eligible:
            t, i = min(eligible)
            task.choice = dict(racers[i], gflops=task.flops / t / 1e9, seconds=t)

    def odd_ok(self, task: Task, g: Geometry) -> bool:
        plan = task.plan(g, ODD_CHECK)
        if plan is None:
            return True  # the winner does not fit this shape: nothing to check
        host = self.operands((1, *ODD_CHECK))
        try:
            return self.check(plan, host[3], host[4], host[2]) <= TOL.get(self.dtype, 1e-4)
        except Exception:  # noqa: BLE001
            return False

    def rounds(self, task: Task, geos: list[Geometry], data, n: int = 3) -> list[float]:
        _, _, _, A, B, C = data
        times: list[list[float]] = [[] for _ in geos]
        plans = [task.plan(g) for g in geos]
        for _ in range(n):
            for i, plan in enumerate(plans):

                def fn(plan=plan):
                    for j in range(len(A)):
                        self.be.run(plan, A[j], B[j], C)

                times[i].append(statistics.median(self.be.timings(fn, repeat=3, warmup=1)))
        return [statistics.median(t) for t in times]


def _geometry(key: str) -> Geometry:
    bt, tt, opts = json.loads(key)
    return Geometry(tuple(bt), tuple(tt), tuple(tuple(o) for o in opts), source="tiledmm tune")


def _distance(g: Geometry, key: list) -> int:
    """How many knobs (BM, BN, BK, thread tile, each option) differ from a logged geometry."""
    bt, tt, opts = key
    d = sum(a != b for a, b in zip(g.block_tile, bt, strict=True)) + (list(g.thread_tile) != tt)
    mine, theirs = dict(g.options), {k: v for k, v in opts}
    return d + sum(mine.get(k) != theirs.get(k) for k in set(mine) | set(theirs))


# --------------------------------------------------------------------------- the command


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``tiledmm tune``."""
    p.add_argument("--backend", default="auto", help="backend to tune (default: auto)")
    p.add_argument("--dtype", default="float32")
    p.add_argument(
        "--kernel",
        default="register",
        help="family to tune, a comma list, or 'all' (default: register)",
    )
    p.add_argument(
        "--shapes",
        default=DEFAULT_SHAPES,
        help="shape classes (squares, odd, skinny, batched, skinny_k, skinny_mn, "
        f"vector) or MxNxK shapes, comma-separated (default: {DEFAULT_SHAPES})",
    )
    p.add_argument(
        "--size", type=int, help="scale of the class shapes (default: 4096 on a GPU, 1024 on a CPU)"
    )
    p.add_argument("--budget", default="10m", help="time for the whole run: 10m, 90s, 1h")
    p.add_argument(
        "--strategy",
        default="auto",
        choices=["auto", "exhaustive", "random+local"],
        help=f"auto: exhaustive up to {EXHAUSTIVE_MAX} candidates, else random+local",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fresh", action="store_true", help="ignore the log of earlier runs")
    p.add_argument(
        "--cold",
        action="store_true",
        help="start from the model default, not the shipped geometry (which is then "
        "only measured, for the closing table)",
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
    """Run ``tiledmm tune``; returns the exit status (1 when a class found nothing valid)."""
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
    for f in fams:
        if f not in KERNEL_FAMILIES or f not in be.kernels:
            raise ValueError(f"backend {be.name!r} has no {f!r} kernel; it has {be.kernels}")
    dev = be.device()
    if be.search_space(fams[0], args.dtype, dev) is None:
        raise ValueError(f"backend {be.name!r} declares no search space (Backend.search_space)")
    size = args.size or (4096 if dev.is_gpu else 1024)
    tuner = Tuner(be, args.dtype, parse_budget(args.budget), args.strategy, args.seed,
                  resume=not args.fresh, cold=args.cold)  # fmt: skip
    todo = tasks_for(args.shapes, size)
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
            tuner.search(t, max(0.0, tuner.left()) / (len(tasks) - i), bar)
    finally:
        if bar is not None:
            bar.close()
    for t in tasks:  # last: the vendor library's threads must not slow the candidates down
        if t.host is not None:
            tuner.vendor_gflops(t, t.host)
    rows = closing(tuner, tasks)
    if not args.no_save:
        entries = [entry(tuner, t) for t in tasks if t.choice]
        if entries:
            path = tuning.save_entries(entries)
            dispatch.clear_caches()
            print(f"saved {len(entries)} entries to {path}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1, default=str))
    return 0 if all(t.choice for t in tasks) else 1


def _bar(total: int, enabled: bool | None):
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    import sys

    on = sys.stderr.isatty() if enabled is None else enabled
    return tqdm(total=total, unit="cand", disable=not on, file=sys.stderr, leave=False)


def entry(tuner: Tuner, t: Task) -> dict:
    """The tuning-database entry of a task's winner."""
    g, dev, c = _geometry(t.choice["geometry"]), tuner.device, t.choice
    vendor = tuner.vendor.get(t.key)
    meas = dict(gflops=round(c["gflops"], 3), seconds=c["seconds"], shape=list(t.shape),
                date=tuner.run_id, of_vendor=round(c["gflops"] / vendor, 4) if vendor else None,
                default_gflops=round(t.default_gflops, 3) if t.default_gflops else None,
                default=geo_text(t.default), candidates=len(t.results))  # fmt: skip
    e = dict(device=dev.name, vendor=dev.vendor, kind=dev.kind, backend=tuner.be.name,
             dtype=tuner.dtype, family=t.family, shape_class=t.cls, block_tile=list(g.block_tile),
             thread_tile=list(g.thread_tile), options=dict(g.options), measured=meas,
             source=f"tiledmm tune on {dev.name}, {tuner.run_id[:10]}")  # fmt: skip
    if tuning.device_arch(dev):
        e["arch"] = tuning.device_arch(dev)
    return e


def closing(tuner: Tuner, tasks: list[Task]) -> list[dict]:
    """Print and return the closing table: per task, the winner and the shipped default, as
    GFLOP/s and fractions of the vendor library measured in this run."""
    rows = []
    for t in tasks:
        v = tuner.vendor.get(t.key)
        fails: dict[str, int] = {}
        for r in t.results.values():
            if r["status"] != "ok":
                fails[r["status"]] = fails.get(r["status"], 0) + 1
        c = t.choice
        rows.append(dict(shape_class=t.cls, shape=t.shape, family=t.family,
                         best=c["tiles"] if c else None, gflops=c["gflops"] if c else None,
                         default=geo_text(t.default), default_gflops=t.default_gflops,
                         vendor_gflops=v, tried=len(t.results), space=len(t.space),
                         failures=fails))  # fmt: skip
    print(
        f"\n{'class':10} {'shape':>20} {'family':8} {'best geometry':44} {'GFLOP/s':>9} "
        f"{'of vendor':>9} {'default':>9} {'of vendor':>9}  tried/space  failures"
    )
    for r in rows:
        b, m, n, k = r["shape"]
        shape = (f"{b}x" if b > 1 else "") + f"{m}x{n}x{k}"
        v = r["vendor_gflops"] or math.nan
        g, d = r["gflops"] or math.nan, r["default_gflops"] or math.nan
        fails = ", ".join(f"{n} {s}" for s, n in r["failures"].items()) or "-"
        print(
            f"{r['shape_class']:10} {shape:>20} {r['family']:8} {str(r['best'])[:44]:44} "
            f"{g:9.4g} {g / v:9.3f} {d:9.4g} {d / v:9.3f}  {r['tried']:>5}/{r['space']:<5}  "
            f"{fails}"
        )
    vb = tuner.be.vendor_backend()
    print(
        f"vendor: {vb.name}'s vendor_matmul, timed in this run; default: the shipped table's "
        f"geometry ({tuning.IGNORE_SHIPPED}={'1' if tuning.ignore_shipped() else '0'})"
    )
    return rows
