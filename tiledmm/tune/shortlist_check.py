"""How well the planner ranks tiles: the model as first use's shortlister, checked offline
against the tuner's logs (issue 37).

    python -m tiledmm.tune.shortlist_check benches/results/logs/h200-tune-coldstart-cupy.jsonl
    python -m tiledmm.tune.shortlist_check                     # every committed tuner log

Every JSON-lines record of ``tiledmm tune`` names a task (family, shape), a geometry and what
it measured. Per task with at least :data:`MIN_CANDIDATES` correct candidates, each
geometry's plan is rebuilt with today's model on the device the log was measured on (GPU logs:
:func:`tiledmm.device.nvidia.reference_h200`; CPU logs: the device recorded in a results file of the
same machine, ``--device FILE``) as dispatch would run it (``shapefit.for_product``), and the
candidates are ranked by predicted time. Printed per log and overall: how often the measured
best is among the model's top k (k = 1..8), what the best of the model's top k reaches of the
measured best (the speed a shortlist of k would keep), and Spearman's rank correlation between
predicted and measured time; and the same reach by tile (a tile's fastest prediction and its
best measured option: whether the model finds the tiles, where options are left to timing).

Then issue 37's criterion, per log, per device and overall: the fraction of tasks (a shape of
a class each) whose model top k holds a candidate within 5% of the task's measured best
(``WITHIN``), k the first-use short list's size (``first_use.settings().shortlist``:
``TILEDMM_FIRST_USE_SHORTLIST``, default :data:`~tiledmm.tune.first_use.SHORTLIST`; ``--k``),
and whether it reaches :data:`TARGET` (90%). Tasks of k candidates or fewer pass whatever the
model says; the lines count them apart.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
from dataclasses import fields
from pathlib import Path

from ..core import tuning
from ..device.nvidia import reference_h200
from ..device.spec import DeviceSpec
from ..planner import shapefit
from ..planner.geometry import Geometry
from ..planner.make import make_plan
from ..planner.plans import PlanError
from . import first_use

__all__ = ["rank_task", "check_log", "read_tasks", "spearman", "device_from_record", "criterion",
           "main", "KS", "WITHIN", "TARGET"]  # fmt: skip

KS = tuple(range(1, 9))
#: a candidate "within 5%" of the best: at least this fraction of its measured rate
WITHIN = 0.95
#: the share of tasks the criterion asks to pass
TARGET = 0.90
MIN_CANDIDATES = 4
TIE_DRAWS = 32
ROOT = Path(__file__).resolve().parents[2]
LOGS = ROOT / "benches" / "results" / "logs"
BACKENDS = ("numba-cuda", "numba-cpu", "cupy", "opencl", "numpy")


def device_from_record(d: dict) -> DeviceSpec:
    """A DeviceSpec from ``DeviceSpec.to_dict()`` as results files record it."""
    known = {f.name for f in fields(DeviceSpec)}
    d = {k: v for k, v in d.items() if k in known}
    for key in ("caches", "peak_flops", "extra", "levels", "fma_peaks", "host_costs"):
        if isinstance(d.get(key), dict):
            d[key] = tuple(d[key].items())
    if isinstance(d.get("loop_costs"), dict):
        d["loop_costs"] = tuple((k, tuple(v)) for k, v in d["loop_costs"].items())
    if "loaded" in d:
        d["loaded"] = tuple(d["loaded"])
    return DeviceSpec(**d)


def _recorded_device(path: Path, backend: str) -> DeviceSpec | None:
    try:
        devs = json.loads(path.read_text())["machine_info"]["tiledmm"]["devices"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    d = devs.get(backend) or next(iter(devs.values()), None)
    return device_from_record(d) if d else None


def spearman(x: list[float], y: list[float]) -> float:
    """Spearman's rank correlation (average ranks for ties)."""

    def ranks(v):
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0.0] * len(v)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for t in range(i, j + 1):
                r[order[t]] = (i + j) / 2
            i = j + 1
        return r

    rx, ry = ranks(x), ranks(y)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    sx = math.sqrt(sum((a - mx) ** 2 for a in rx))
    sy = math.sqrt(sum((b - my) ** 2 for b in ry))
    return sxy / (sx * sy) if sx and sy else math.nan


def rank_task(records: list[dict], device: DeviceSpec, backend: str, dtype: str,
              ks: tuple[int, ...] = KS) -> dict | None:  # fmt: skip
    """One task's candidates ranked by the model: the measured best's position, what the
    model's top k reach of it (``reach``) and how often (over the draws that break the model's
    ties) that is within 5% of it (``within``), for k in ``ks``, and the rank correlation;
    None with too few candidates."""
    pred, meas, tiles = [], [], []
    for r in records:
        b, m, n, k = r["shape"]
        g = Geometry.from_key(r["geometry"])
        cls = tuning.shape_class(m, n, k, b)
        g = shapefit.for_product(g, r["family"], m, n, k, device, cls, b, dtype, backend)
        try:
            plan = make_plan(m, n, k, dtype=dtype, kernel=r["family"], device=device,
                             geometry=g, backend=backend)  # fmt: skip
        except PlanError:
            continue
        pred.append(plan.predicted_seconds)
        meas.append(r["gflops"])
        tiles.append((tuple(plan.block_tile), tuple(plan.thread_tile)))
    if len(pred) < MIN_CANDIDATES:
        return None
    best = max(meas)
    # the model's ties (equal predictions) are broken at random, averaged over TIE_DRAWS
    # draws: the log's order follows the tuner's guesses and measurements, never the model's
    rng = random.Random(0)
    ks = tuple(sorted(set(KS) | set(ks)))
    hit = dict.fromkeys(ks, 0.0)
    reach = dict.fromkeys(ks, 0.0)
    reach_t = dict.fromkeys(ks, 0.0)
    within = dict.fromkeys(ks, 0.0)
    within_t = dict.fromkeys(ks, 0.0)
    positions = []
    for _ in range(TIE_DRAWS):
        noise = [rng.random() for _ in pred]
        order = sorted(range(len(pred)), key=lambda i: (pred[i], noise[i]))
        position = 1 + min(i for i, j in enumerate(order) if meas[j] == best)
        positions.append(position)
        # by tile (what first use lists): a tile's fastest prediction, its best measured option
        best_t: dict[tuple, tuple[float, float, float]] = {}
        for j in order:
            old = best_t.get(tiles[j], (math.inf, 0.0, 0.0))
            best_t[tiles[j]] = (min(old[0], pred[j]), old[1] or noise[j], max(old[2], meas[j]))
        by_tile = sorted(best_t.values())
        for k in ks:
            top = max(meas[j] for j in order[:k]) / best
            top_t = max(g for _, _, g in by_tile[:k]) / best
            hit[k] += (position <= k) / TIE_DRAWS
            reach[k] += top / TIE_DRAWS
            reach_t[k] += top_t / TIE_DRAWS
            within[k] += (top >= WITHIN) / TIE_DRAWS
            within_t[k] += (top_t >= WITHIN) / TIE_DRAWS
    rho = spearman(pred, [1.0 / g for g in meas])
    return dict(candidates=len(pred), distinct_predictions=len(set(pred)),
                position=statistics.median(positions), hit=hit, reach=reach, spearman=rho,
                tiles=len(set(tiles)), reach_by_tile=reach_t, within=within,
                within_by_tile=within_t)  # fmt: skip


def read_tasks(path: Path) -> dict[str, dict[str, dict]]:
    """A tuner log's correct, timed records: task -> geometry key -> record (the last)."""
    tasks: dict[str, dict[str, dict]] = {}
    for line in path.read_text().splitlines():
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if r.get("status") == "ok" and r.get("gflops"):
            tasks.setdefault(r["task"], {})[r["geometry"]] = r
    return tasks


def check_log(path: Path, device: DeviceSpec | None = None, backend: str | None = None,
              ks: tuple[int, ...] = KS) -> dict:  # fmt: skip
    """:func:`rank_task` for every task of one tuner log."""
    backend = backend or next((b for b in BACKENDS if b in path.name), "cupy")
    device = device or (reference_h200() if "h200" in path.name else None)
    if device is None:
        raise ValueError(f"{path}: which device? give --device (a results file of its machine)")
    out = {}
    for task, recs in read_tasks(path).items():
        res = rank_task(list(recs.values()), device, backend, task.split("|")[0], ks)
        if res is not None:
            out[task] = res
    return dict(file=path.name, backend=backend, device=device.name, tasks=out)


def summary(tasks: list[dict]) -> dict:
    """Hit rates, mean reach per k and the median rank correlation over tasks."""
    n = len(tasks)
    if not n:
        return {}
    hit = {k: statistics.fmean(t["hit"][k] for t in tasks) for k in KS}
    reach = {k: math.exp(statistics.fmean(math.log(t["reach"][k]) for t in tasks)) for k in KS}
    rhos = [t["spearman"] for t in tasks if math.isfinite(t["spearman"])]
    reach_t = {k: math.exp(statistics.fmean(math.log(t["reach_by_tile"][k]) for t in tasks))
               for k in KS}  # fmt: skip
    med = statistics.median
    return dict(tasks=n, hit=hit, reach=reach, reach_by_tile=reach_t,
                spearman_median=med(rhos) if rhos else math.nan,
                candidates_median=med(t["candidates"] for t in tasks),
                distinct_median=med(t["distinct_predictions"] for t in tasks))  # fmt: skip


def criterion(tasks: list[dict], k: int) -> dict:
    """Issue 37's criterion over ``tasks`` (:func:`rank_task` results holding ``k``): the share
    of tasks whose model top ``k`` holds a candidate within 5% of the measured best (each task
    counts the share of tie draws where it does), whether that reaches :data:`TARGET`, and the
    same over the tasks with more than ``k`` candidates (where the ranking decides) and by
    tile (each tile's best option)."""
    n = len(tasks)
    ranked = [t for t in tasks if t["candidates"] > k]
    passed = sum(t["within"][k] for t in tasks)
    tile = sum(t["within_by_tile"][k] for t in tasks)
    return dict(k=k, tasks=n, passed=passed, fraction=passed / n if n else math.nan,
                meets=bool(n) and passed / n >= TARGET, ranked=len(ranked),
                ranked_passed=sum(t["within"][k] for t in ranked),
                by_tile=tile / n if n else math.nan)  # fmt: skip


def _print_criterion(label: str, c: dict) -> None:
    if c["tasks"]:
        verdict = "meets" if c["meets"] else "short"
        print(f"  {label:46} {c['tasks']:5d} {c['passed']:7.3g} {c['fraction']:5.0%} {verdict:5} "
              f"{c['ranked']:5d} {c['ranked_passed']:7.3g} {c['by_tile']:7.0%}")  # fmt: skip


def _print(label: str, s: dict) -> None:
    if not s:
        print(f"{label}: no task with {MIN_CANDIDATES}+ correct candidates")
        return
    hit = " ".join(f"{s['hit'][k]:.2f}" for k in KS)
    reach = " ".join(f"{s['reach'][k]:.3f}" for k in KS)
    print(f"{label}: {s['tasks']} tasks, median {s['candidates_median']:g} candidates "
          f"({s['distinct_median']:g} distinct predictions), Spearman median "
          f"{s['spearman_median']:.2f}")  # fmt: skip
    print(f"  best in model's top k (k=1..8): {hit}")
    print(f"  best of top k / measured best: {reach}")
    tile = " ".join(f"{s['reach_by_tile'][k]:.3f}" for k in KS)
    print(f"  the same by block and thread tile (each tile's best option): {tile}")


def default_logs() -> list[Path]:
    return sorted(p for p in LOGS.glob("*tune-coldstart*.jsonl"))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tiledmm.tune.shortlist_check",
                                description=__doc__.splitlines()[0])  # fmt: skip
    p.add_argument("logs", nargs="*", help="tuner JSON-lines logs (default: the committed ones)")
    p.add_argument("--device", help="a results JSON of the CPU logs' machine (machine_info)")
    p.add_argument("--json", help="also write the per-task results here")
    p.add_argument("--k", type=int, help="the criterion's k (default: first use's short list "
                   "size, TILEDMM_FIRST_USE_SHORTLIST or first_use.SHORTLIST)")  # fmt: skip
    args = p.parse_args(argv)
    k = args.k or first_use.settings().shortlist
    logs = [Path(x) for x in args.logs] or default_logs()
    cpu_dev = Path(args.device) if args.device else None
    if cpu_dev is None:
        where = (ROOT / "benches" / "data", ROOT / "benches" / "results")
        found = [d / "xeon-tune-coldstart.json" for d in where]
        cpu_dev = next((f for f in found if f.exists()), None)
    results, every, crit = [], [], []
    devices: dict[str, list[dict]] = {}
    for path in logs:
        backend = next((b for b in BACKENDS if b in path.name), "cupy")
        dev = None if "h200" in path.name else (
            _recorded_device(cpu_dev, backend) if cpu_dev else None)  # fmt: skip
        try:
            res = check_log(path, dev, backend, (k,))
        except ValueError as exc:
            print(f"shortlist_check: {exc}", file=sys.stderr)
            return 2
        results.append(res)
        tasks = list(res["tasks"].values())
        every += tasks
        devices.setdefault(res["device"], []).extend(tasks)
        label = f"{path.name} ({res['backend']} on {res['device']})"
        _print(label, summary(tasks))
        crit.append((path.name, criterion(tasks, k)))
    _print("all logs", summary(every))
    print(f"\nissue 37's criterion: a candidate within 5% of the measured best in the model's "
          f"top {k} (first use's short list) for {TARGET:.0%} of the tasks")  # fmt: skip
    print(f"  {'log':46} {'tasks':>5} {'within':>7} {'share':>5} {'':5} "
          f"{'>k':>5} {'within':>7} {'by tile':>7}")  # fmt: skip
    for label, c in crit:
        _print_criterion(label, c)
    for name, tasks in devices.items():
        _print_criterion(f"all logs on {name[:34]}", criterion(tasks, k))
    _print_criterion("all logs", criterion(every, k))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
