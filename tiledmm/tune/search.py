"""The search behind `tiledmm tune` (``tiledmm.tune.command``): tasks (one family on one shape, its
pruned candidates and results: :mod:`tiledmm.tune.task`, re-exported here), the budgeted tuner
(exhaustive or random+local, every candidate checked against a float64 reference before it is
timed, every result logged to a resumable JSON-lines file) and the race of the best candidates
that picks a winner.
"""

from __future__ import annotations

import json
import math
import random
import re
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..core.backend import Backend
from ..planner.geometry import Geometry
from ..util.accuracy import reference, rel_error
from ..util.atomicfile import append_line
from .log import log_path, read_log
from .task import Task, launch, stacked

__all__ = ["Tuner"]

EXHAUSTIVE_MAX = 64
EXPLORE_SHARE = 0.4  # of a task's time: random exploring stops after it (local search follows)
#: random+local: the planner's fastest predictions (at most MODEL_FIRST tiles) go before the
#: random sample where it predicts them MODEL_GAIN times faster than the default: grid effects
#: (K slices, small grids), which it ranks right, not the near-ties between options it cannot
#: tell apart (a numba-cuda cold start spent its 3-4 tries per square task on those: 0.87 of
#: the shipped tiles, benches/results/logs/h200-tune-coldstart-numba-cuda-s9b.log)
MODEL_FIRST, MODEL_GAIN = 3, 1.25
#: a candidate times out when a call (after the one that compiled it) takes over 20x the best
#: so far, and at least this many seconds
TIMEOUT_MIN = 2.0
TOL = {"float16": 5e-3, "float32": 1e-4, "float64": 1e-10}
ODD_CHECK = (97, 131, 67)  # the winner's extra correctness check: edges in every dimension


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
        #: family -> (shape class, geometry) of each geometry that won an earlier task
        self.winners: dict[str, list[tuple[str, str]]] = {}
        self.run_id = time.strftime("%Y-%m-%dT%H:%M:%S")
        self.vendor: dict[str, float] = {}

    # ------------------------------------------------------------------ log

    def _read_log(self) -> dict[tuple[str, str], dict]:
        return read_log(self.log)

    def _write(self, rec: dict) -> None:
        append_line(self.log, json.dumps(rec, allow_nan=False, default=str))

    def left(self) -> float:
        return self.budget - (time.monotonic() - self.t0)

    # ------------------------------------------------------------------ measuring

    def operands(self, shape: tuple[int, int, int, int]):
        """Host operands (``(b, m, k)``, ``(b, k, n)``), the float64 reference, and the device
        operands as dispatch gets them: one matrix each, or stacks for a batch."""
        b, m, n, k = shape
        a = self.np_rng.standard_normal((b, m, k))
        bb = self.np_rng.standard_normal((b, k, n))
        dt = np.dtype(self.dtype)
        # on a CPU, the reference on one BLAS thread: its spinning workers would take the
        # cores from the candidates timed next (tiledmm.util.accuracy)
        ref = reference(a.astype(dt), bb.astype(dt), one_thread=self.device.kind == "cpu")
        a, bb = a.astype(dt), bb.astype(dt)
        return a, bb, ref, stacked(self.be, a, dt), stacked(self.be, bb, dt)

    def output(self, A, m: int, n: int, fill: float = 0.0):
        """A device result for operands ``A`` (one matrix or a stack) of ``m`` x ``n``."""
        dt = np.dtype(self.dtype)
        return self.be.asarray(np.full((*A.shape[:-2], m, n), fill, dt), dt)

    def check(self, plan, A, B, ref) -> float:
        """Run ``plan`` once as dispatch runs it (a stack in one batched call) into a
        NaN-poisoned output; the worst relative error of its matrices."""
        C = self.output(A, plan.m, plan.n, np.nan)
        launch(self.be, plan, A, B, C)
        self.be.synchronize()
        c = self.be.to_numpy(C).reshape(-1, plan.m, plan.n)
        return max(rel_error(c[i], ref[i]) for i in range(len(c)))

    def again(self, plan, A, B, out) -> float:
        """Seconds of one more call of ``plan`` (compiled by now), as dispatch runs it."""
        t0 = time.perf_counter()
        launch(self.be, plan, A, B, out)
        self.be.synchronize()
        return time.perf_counter() - t0

    def seconds(self, be: Backend, fn, first: float) -> float:
        reps = int(min(15, max(3, 0.3 / max(first, 1e-6))))
        return statistics.median(be.timings(fn, repeat=reps, warmup=1))

    def vendor_gflops(self, task: Task, host) -> float:
        if task.key not in self.vendor:
            vb = self.be.vendor_backend()
            dt = np.dtype(self.dtype)
            A, B = stacked(vb, host[0], dt), stacked(vb, host[1], dt)  # a batch: one call

            def fn():
                vb.vendor_matmul(A, B)

            t0 = time.perf_counter()
            fn()
            vb.synchronize()
            self.vendor[task.key] = (
                task.flops / self.seconds(vb, fn, time.perf_counter() - t0) / 1e9
            )
        return self.vendor[task.key]

    def evaluate(self, task: Task, g: Geometry, data) -> dict:
        """Check, then time one candidate; the record (logged) says what happened."""
        gk = g.key()
        old = self.history.get((task.key, gk))
        if old is not None:
            task.results[gk] = old
            return old
        rec: dict[str, Any] = dict(task=task.key, geometry=gk, family=task.family,
                                   shape=list(task.shape), cls=task.cls, run=self.run_id,
                                   tiles=str(g))  # fmt: skip
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
            # the first call's seconds, its compile included (what first use's budget pays)
            rec.update(rel_error=err if math.isfinite(err) else None, first_seconds=round(first, 4))
            best = task.best()
            limit = max(TIMEOUT_MIN, 20 * best["seconds"]) if best else 60.0
            if first > limit and best and err <= TOL.get(self.dtype, 1e-4):
                # the first call also compiled (numba-cuda: 35 s for some 8x8 thread tiles,
                # which then ran as fast as the rest): the limit is on a second call
                rec["compile_seconds"] = round(first, 1)
                first = self.again(plan, A, B, data[5])
            if not err <= TOL.get(self.dtype, 1e-4):
                rec.update(status="wrong result")
            elif first > limit and best:
                rec.update(status="timeout", error=f"a call took {first:.1f} s")
            else:

                def fn():
                    launch(self.be, plan, A, B, data[5])

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
        data = (*host, self.output(host[3], *task.shape[1:3]))
        task.host = host
        start = time.monotonic()
        stop = start + share
        order = self.order(task, start + EXPLORE_SHARE * share)
        for g in order:
            if time.monotonic() > stop or self.left() <= 0:
                break
            rec = self.evaluate(task, g, data)
            if bar is not None:
                bar.set_postfix_str(f"{task.cls} {task.family} {rec['status']}", refresh=False)
                bar.update(1)
        self.confirm(task, data)

    def order(self, task: Task, explore_until: float = math.inf):
        """Candidates in the order the strategy visits them (a generator: local search reads
        the results so far). random+local: the default, then what other backends tuned on
        this device (``Task.siblings``: CuPy's tiles for OpenCL, one kernel source), then the
        winners of this run's earlier tasks of the family and shape class (good tiles for one
        shape are the best first guess for the next), then the planner's :data:`MODEL_FIRST`
        fastest predictions where they beat the default's by :data:`MODEL_GAIN` (a cold
        start's skinny tasks: K slices, which a random tenth of a large space can miss), then
        the winners of other classes, then a random sample (a tenth of the space, or until
        ``explore_until``: the budget decides how much of it is exploring), then local search
        around the best so far."""
        space = task.space
        exhaustive = self.strategy == "exhaustive" or (
            self.strategy == "auto" and len(space) <= EXHAUSTIVE_MAX
        )
        yield space[0]  # the shipped default first: every later candidate is compared to it
        rest = space[1:]
        if exhaustive:
            yield from rest
            return
        done = {space[0].key()}
        by_key = {g.key(): g for g in rest}
        won = self.winners.get(task.family, [])

        def seeds(keys):
            for gk in keys:
                if gk in by_key and gk not in done:
                    done.add(gk)
                    yield by_key[gk]

        yield from seeds(task.siblings + [gk for cls, gk in won if cls == task.cls])
        pred = task.predicted  # every candidate of the space has its prediction
        ranked = sorted((g for g in rest if g.key() not in done), key=lambda g: pred[g.key()])
        tiles: set = set()  # one per block/thread tile: the model rarely tells options apart
        bar = pred[space[0].key()] / MODEL_GAIN
        for g in ranked:
            if len(tiles) == MODEL_FIRST or pred[g.key()] >= bar:
                break
            if (g.block_tile, g.thread_tile) not in tiles:
                tiles.add((g.block_tile, g.thread_tile))
                done.add(g.key())
                yield g
        # a skinny task's 4-8 tries (numba-cuda: ~8 s of compiling each) went to the squares'
        # winners before its K slices (H200, logs/h200-tune-coldstart-numba-cuda-s10a.log)
        yield from seeds([gk for cls, gk in won if cls != task.cls])
        pool = [g for g in rest if g.key() not in done]
        self.rng.shuffle(pool)
        explore = max(8, len(pool) // 10)
        for i, g in enumerate(pool[:explore]):
            if i >= 8 and time.monotonic() > explore_until:
                break
            done.add(g.key())
            yield g
        while len(done) < len(space):
            best = task.best()
            near = [g for g in rest if g.key() not in done and best
                    and _distance(g, json.loads(best["geometry"])) == 1]  # fmt: skip
            nxt = near[0] if near else next(g for g in pool if g.key() not in done)
            done.add(nxt.key())
            yield nxt

    def confirm(self, task: Task, data) -> None:
        """Pick the winner: the three fastest candidates that are also right on an odd shape,
        re-timed with the shipped default in alternating rounds; the fastest in the median of
        those rounds wins, and the default stays when it is that fastest (``--cold``: the
        default only competes if the search itself reached it). Sets ``task.choice`` and
        ``task.default_gflops``."""
        dk = task.default.key()
        base = task.results.get(dk)
        base = base if base and base["status"] == "ok" else None
        task.choice = None if self.cold else base
        task.default_gflops = base["gflops"] if base else None
        top = []
        for cand in sorted(task.ok(), key=lambda r: -r["gflops"]):
            if len(top) == 3:
                break
            if cand["geometry"] == dk or self.odd_ok(task, Geometry.from_key(cand["geometry"])):
                top.append(cand)
            else:
                cand.update(status="wrong result", error=f"wrong on {ODD_CHECK}")
                self._write(cand)
        if not top:
            return
        won = self.winners.setdefault(task.family, [])
        won.extend((task.cls, c["geometry"]) for c in top if (task.cls, c["geometry"]) not in won)
        racers = [c for c in top if c["geometry"] != dk]
        fits = task.plan(task.default) is not None
        geos = ([task.default] if fits else []) + [Geometry.from_key(c["geometry"]) for c in racers]
        try:
            times = self.rounds(task, geos, data)
        except Exception:  # noqa: BLE001 - the default itself fails here: no race
            times, fits = self.rounds(task, geos[1:], data) if fits else [], False
        if fits:
            tb, times = times[0], times[1:]
            task.default_gflops = task.flops / tb / 1e9
            racers.append(dict(base or {}, geometry=dk, status="ok", tiles=str(task.default)))
            times.append(tb)
        eligible = [(t, i) for i, (t, c) in enumerate(zip(times, racers, strict=True))
                    if not (self.cold and c["geometry"] == dk and dk not in task.results)
                    and (c["geometry"] != dk or base is not None)]  # fmt: skip
        if eligible:
            t, i = min(eligible)
            task.choice = dict(racers[i], gflops=task.flops / t / 1e9, seconds=t)

    def unify(self, tasks: list[Task]) -> None:
        """Tasks of one family and shape class (4096^3 and 8192^3 are both ``square``) share
        one database entry: of their winners and the shipped default, the one with the best
        geometric mean over all of them (each measured on every such task, as the search
        measured it: mostly from the log) becomes each one's choice, so a class entry is never
        slower than the default over the class's shapes (``--cold``: the default competes only
        where the search reached it). Each task's default GFLOP/s is then the search's too
        (one way of measuring for both columns of the closing table); a task where the class's
        geometry is slower than the default on its own shape gets ``note`` saying so."""
        groups: dict[tuple[str, str], list[Task]] = {}
        for t in tasks:
            if t.choice:
                groups.setdefault((t.family, t.cls), []).append(t)
        for group in (g for g in groups.values() if len(g) > 1):
            dk = group[0].default.key()
            keys = [t.choice["geometry"] for t in group]
            if not self.cold or all(dk in t.results for t in group):
                keys.append(dk)
            best, score, base = None, -math.inf, None
            for gk in dict.fromkeys(keys):
                recs = [self._measured(t, gk) for t in group]
                if all(r is not None for r in recs):
                    s = statistics.fmean(math.log(r["gflops"]) for r in recs)
                    base = (recs, s) if gk == dk else base
                    if s > score or (s == score and gk == dk):
                        best, score = recs, s
            for t, r in zip(group, best or [], strict=False):
                t.choice = dict(r)
            if base is None or best is None:
                continue
            gain = math.exp(score - base[1])
            for t, r, d in zip(group, best, base[0], strict=True):
                t.default_gflops = d["gflops"]
                if r["gflops"] < d["gflops"]:
                    t.note = (
                        f"slower than the default on this shape ({r['gflops'] / d['gflops']:.2f}"
                        f"); {gain:.2f}x it over the class's {len(group)} shapes"
                    )

    def _measured(self, task: Task, gk: str) -> dict | None:
        """``task``'s ok record of geometry ``gk``, measuring it if the search did not."""
        r = task.results.get(gk)
        if r is None and task.host is not None and task.plan(Geometry.from_key(gk)) is not None:
            out = self.output(task.host[3], *task.shape[1:3])
            r = self.evaluate(task, Geometry.from_key(gk), (*task.host, out))
        return r if r is not None and r["status"] == "ok" else None

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
                    launch(self.be, plan, A, B, C)

                times[i].append(statistics.median(self.be.timings(fn, repeat=3, warmup=1)))
        return [statistics.median(t) for t in times]


def _distance(g: Geometry, key: list) -> int:
    """How many knobs (BM, BN, BK, thread tile, each option) differ from a logged geometry."""
    bt, tt, opts = key
    d = sum(a != b for a, b in zip(g.block_tile, bt, strict=True)) + (list(g.thread_tile) != tt)
    mine, theirs = dict(g.options), {k: v for k, v in opts}
    return d + sum(mine.get(k) != theirs.get(k) for k in set(mine) | set(theirs))


# --------------------------------------------------------------------------- the command
