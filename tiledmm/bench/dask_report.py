"""The writing side of ``tiledmm bench --dask`` (``tiledmm.bench.dask_bench``): a measured case as a
pytest-benchmark-style row, the JSON rewritten after every row, the progress lines and the
closing table.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

__all__ = ["Rows", "bench_row", "write_json", "print_table"]


def bench_row(info: dict, times: list[float]) -> dict:
    from .results import stats_dict

    name = (
        f"test_dask_matmul[{info['engine']}-{info['backend']}-w{info['workers']}-"
        f"{info['chunking']}-{info['dtype']}-{info['m']}x{info['n']}x{info['k']}]"
    )
    return {
        "group": f"dask {info['dtype']} {info['m']}x{info['n']}x{info['k']}",
        "name": name,
        "fullname": f"tiledmm/bench/dask_bench.py::{name}",
        "params": {k: info[k] for k in ("engine", "backend", "workers", "chunking", "dtype")},
        "param": name[name.index("[") + 1 : -1],
        "extra_info": info,
        "options": {"timer": "perf_counter + device sync", "min_rounds": len(times)},
        "stats": stats_dict(times),
    }


class Rows:
    """Rows collected so far, the JSON rewritten after every row, a progress line per row."""

    def __init__(self, args, gpu: bool) -> None:
        self.args, self.gpu, self.rows, self.table = args, gpu, [], []
        self.t0 = time.perf_counter()
        self.path: Path | None = None

    def log(self, text: str) -> None:
        print(f"[{time.perf_counter() - self.t0:6.1f} s] {text}", flush=True)

    def add(self, info: dict, times: list[float], pred: tuple | None) -> None:
        self.rows.append(bench_row(info, times))
        self.table.append((info["engine"], info["workers"], info["chunking"], info["m"],
                           info["n"], info["k"], info["seconds"], info["gflops"], pred,
                           info["rel_error"], info["inputs"]))  # fmt: skip
        self.path = write_json(self.rows, self.args, self.gpu, quiet=True)
        p = f", predicted {info['predicted_seconds']:.3g} s" if pred else ""
        self.log(
            f"{info['engine']} w{info['workers']} {info['chunking']} "
            f"{info['m']}x{info['n']}x{info['k']} inputs={info['inputs']}: "
            f"{info['seconds']:.3g} s ({info['gflops']:.1f} GFLOP/s{p}), rel_error "
            f"{info['rel_error']:.2e} -> {self.path}"
        )


def write_json(rows: list[dict], args, gpu: bool, quiet: bool = False) -> Path:
    import datetime as _dt

    from .machine import commit_info, machine_info

    outdir = Path(getattr(args, "output", None) or "tiledmm-results")
    outdir.mkdir(parents=True, exist_ok=True)
    name = getattr(args, "name", None) or ("gpu-dask" if gpu else "cpu-dask")
    doc = {
        "machine_info": machine_info(),
        "commit_info": commit_info(),
        "benchmarks": rows,
        "datetime": _dt.datetime.now(_dt.UTC).isoformat(),
        "version": "5.0.0",
        "tiledmm": {
            "command": "tiledmm bench --dask",
            "inputs": "per row: extra_info.inputs (device | workers | host)",
        },
    }
    path = outdir / f"{name}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    tmp.replace(path)  # a reader never sees half a file
    if not quiet:
        print(f"wrote {path}")
    return path


def print_table(table: list[tuple], singles: dict) -> None:
    print(f"\n{'engine':11} {'workers':>7} {'chunking':30} {'inputs':>7} {'shape':>18} "
          f"{'seconds':>9} {'GFLOP/s':>10} {'vs 1 dev':>8} {'predicted':>9} {'pred(spec)':>10} "
          f"{'rel_err':>9}")  # fmt: skip
    for eng, w, cname, m, n, k, sec, gf, pred, rel, inputs in table:
        p1, p2 = (f"{pred[0]:.3g}", f"{pred[1]:.3g}") if pred else ("-", "-")
        print(f"{eng:11} {w:>7} {cname:30} {inputs:>7} {f'{m}x{n}x{k}':>18} {sec:>9.4g} "
              f"{gf:>10.1f} {singles[(m, n, k)] / sec:>8.2f} {p1:>9} {p2:>10} "
              f"{rel:>9.2e}")  # fmt: skip
