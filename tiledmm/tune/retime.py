"""Re-time a tuner log's candidates, so that the model's ranking is checked against steady
measurements rather than one noisy pass (a shared CPU VM moves one candidate by 0.67-1.13x
between two passes).

    python -m tiledmm.tune.retime LOG --backend opencl --passes 2 --out RETIMED.jsonl

Per task, every correct candidate of ``LOG`` is compiled again and timed as the tuner's
confirmation times its finalists (:meth:`~tiledmm.tune.search.Tuner.rounds`: interleaved
rounds, each a median of three calls after a warm-up, on fresh operands); ``--passes`` such
passes run one after another. Each output record is the log's record with ``gflops`` and
``seconds`` the median of the log's measurement and the passes' (``gflops_samples`` lists
them), so ``python -m tiledmm.tune.shortlist_check RETIMED.jsonl`` reads it as a tuner log.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from ..core.registry import get_backend
from ..planner.geometry import Geometry
from .search import Tuner
from .shortlist_check import read_tasks
from .task import Task

__all__ = ["retime", "main"]


def retime(log: Path, backend: str, passes: int = 2, rounds: int = 5) -> list[dict]:
    """The records of ``log`` with each candidate's rate the median of its logged one and
    ``passes`` new measurements of ``rounds`` interleaved rounds."""
    be = get_backend(backend)
    out = []
    for key, recs in read_tasks(log).items():
        first = next(iter(recs.values()))
        dtype = key.split("|")[0]
        tuner = Tuner(be, dtype, budget=1e9, log=Path("/dev/null"), resume=False)
        shape = tuple(first["shape"])
        task = Task(tuner, first["family"], first["cls"], shape)
        host = tuner.operands(shape)
        data = (*host, tuner.output(host[3], *shape[1:3]))
        geos = [Geometry.from_key(g) for g in recs]
        samples = {g: [r["gflops"]] for g, r in recs.items()}
        for _ in range(passes):
            for g, s in zip(recs, tuner.rounds(task, geos, data, n=rounds), strict=True):
                samples[g].append(task.flops / s / 1e9)
        for g, r in recs.items():
            rate = statistics.median(samples[g])
            out.append(dict(r, gflops=rate, seconds=task.flops / rate / 1e9,
                            gflops_samples=[round(x, 2) for x in samples[g]]))  # fmt: skip
        print(f"{key}: {len(geos)} candidates re-timed", file=sys.stderr, flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m tiledmm.tune.retime",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("log", type=Path, help="a tuner log (JSON lines)")
    ap.add_argument("--backend", required=True, help="the backend the log was measured with")
    ap.add_argument("--passes", type=int, default=2, help="new measurements per candidate")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds per pass")
    ap.add_argument("--out", type=Path, required=True, help="where the re-timed log goes")
    args = ap.parse_args(argv)
    recs = retime(args.log, args.backend, args.passes, args.rounds)
    args.out.write_text("".join(json.dumps(r) + "\n" for r in recs))
    print(f"{len(recs)} records -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
