"""``tiledmm bench --dask``: tiledmm on a Dask cluster vs one device vs dask.array.matmul.

GPU mode (CuPy present): one worker per GPU (``dask_cuda.LocalCUDACluster``; without dask-cuda,
a ``distributed`` cluster whose worker processes each see one GPU through CUDA_VISIBLE_DEVICES).
CPU mode: ``distributed.LocalCluster`` with worker processes and NumPy chunks.

Inputs start ON THE WORKERS: each chunk is generated where it lives (random in [-1, 1), seeded
per chunk) and persisted before the clock starts; the timed call is the whole product
(``persist`` + ``wait``), inter-worker transfers included; the result stays on the workers, as
the one-device baseline's stays on its device. The one-device baseline is ``tiledmm.matmul`` on
device arrays in this process. rel_error is sampled: a few rows of C against a float64 product
of the same rows. Each chunking (the planner's and three alternatives) runs through tiledmm and
through ``dask.array.matmul`` (cuBLAS/OpenBLAS per chunk), beside the cluster planner's
prediction (from the planner's DeviceSpec rate, and from the measured one-device rate).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["bench_dask", "main", "build_parser"]

TF32_OFF = {"CUPY_TF32": "0"}


def _xp(gpu: bool):
    if gpu:
        import cupy

        return cupy
    return np


def _sync(gpu: bool) -> None:
    if gpu:
        import cupy

        cupy.cuda.Device().synchronize()


def _block(block_info=None, seed: int = 0, dtype_name: str = "float32", gpu: bool = False):
    """One chunk of a random operand, generated on the worker that holds it."""
    info = block_info[None]
    xp = _xp(gpu)
    loc = info["chunk-location"]
    rng = xp.random.default_rng(int(seed) * 1_000_003 + 7919 * loc[0] + loc[1])
    wide = np.float64 if dtype_name == "float64" else np.float32
    return (rng.random(info["chunk-shape"], dtype=wide) * 2 - 1).astype(dtype_name)


def _operand(shape, chunks, dtype: str, seed: int, gpu: bool):
    """A random dask array whose chunks are generated on the workers that hold them."""
    import dask.array as da

    return da.map_blocks(
        _block, chunks=da.core.normalize_chunks(chunks, shape), dtype=np.dtype(dtype),
        meta=_xp(gpu).empty((0, 0), dtype=dtype), seed=seed, dtype_name=dtype, gpu=gpu,
    )  # fmt: skip


def _cluster(workers: int, gpu: bool):
    """(cluster, label): one worker per GPU, or CPU worker processes."""
    import distributed

    os.environ.update(TF32_OFF)
    if not gpu:
        return distributed.LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
            silence_logs=logging.CRITICAL,
        ), "distributed.LocalCluster (processes)"  # fmt: skip
    try:
        from dask_cuda import LocalCUDACluster

        return LocalCUDACluster(
            n_workers=workers, threads_per_worker=1, dashboard_address=None
        ), "dask_cuda.LocalCUDACluster"
    except ImportError as exc:
        from distributed import Nanny, Scheduler, SpecCluster

        spec = {
            f"gpu{i}": {
                "cls": Nanny,
                "options": {"nthreads": 1, "env": {"CUDA_VISIBLE_DEVICES": str(i), **TF32_OFF}},
            }
            for i in range(workers)
        }
        sched = {"cls": Scheduler, "options": {"dashboard_address": None}}
        label = f"distributed.SpecCluster, one GPU per worker (no dask_cuda: {exc})"
        return SpecCluster(workers=spec, scheduler=sched), label


def _time_call(fn, reps: int, gpu: bool) -> list[float]:
    fn()  # warm-up: kernel compilation, module loads, memory pools
    times = []
    for _ in range(reps):
        _sync(gpu)
        t0 = time.perf_counter()
        fn()
        _sync(gpu)
        times.append(time.perf_counter() - t0)
    return times


def _host(x: Any) -> np.ndarray:
    return x.get() if hasattr(x, "get") else np.asarray(x)


def _rel(c_rows: Any, ref_rows: Any) -> float:
    from .accuracy import rel_error

    return rel_error(_host(c_rows), _host(ref_rows))


def _link_bandwidth(client, gpu: bool, nbytes: int = 256 * 2**20) -> float:
    """Bytes/s moving one chunk from one worker to another (the cluster's link level)."""
    ws = list(client.scheduler_info()["workers"])
    if len(ws) < 2:
        return float("inf")
    best = float("inf")
    for i in range(2):
        x = client.submit(_make_chunk, nbytes, gpu, i, workers=[ws[0]], pure=False)
        client.gather(client.submit(_nbytes, x, workers=[ws[0]]))  # made, on worker 0
        t0 = time.perf_counter()
        client.gather(client.submit(_nbytes, x, workers=[ws[1]], pure=False))
        best = min(best, time.perf_counter() - t0)
    return nbytes / best


def _make_chunk(nbytes: int, gpu: bool, salt: int):
    return _xp(gpu).full(nbytes // 4, salt, dtype=np.float32)


def _nbytes(x) -> int:
    return int(x.nbytes)


def _row(info: dict, times: list[float]) -> dict:
    from .results import stats_dict

    name = (
        f"test_dask_matmul[{info['engine']}-{info['backend']}-w{info['workers']}-"
        f"{info['chunking']}-{info['dtype']}-{info['m']}x{info['n']}x{info['k']}]"
    )
    return {
        "group": f"dask {info['dtype']} {info['m']}x{info['n']}x{info['k']}",
        "name": name,
        "fullname": f"tiledmm/dask_bench.py::{name}",
        "params": {k: info[k] for k in ("engine", "backend", "workers", "chunking", "dtype")},
        "param": name[name.index("[") + 1 : -1],
        "extra_info": info,
        "options": {"timer": "perf_counter + device sync", "min_rounds": len(times)},
        "stats": stats_dict(times),
    }


def bench_dask(args: argparse.Namespace) -> int:
    """Run the sweep described in the module docstring; write JSON; print the table last."""
    import dask.array as da
    from distributed import Client, wait

    import tiledmm

    from .cluster import Cluster, cluster_plan
    from .dask import matmul as dmatmul

    gpu = _gpu_wanted(args)
    dtype = getattr(args, "dtype", "float32") or "float32"
    backend = (getattr(args, "backend", None) or ["auto"])[0]
    kernel = (getattr(args, "kernel", None) or ["auto"])[0]
    reps = int(getattr(args, "reps", 2) or 2)
    seed = int(getattr(args, "seed", 0) or 0)
    workers = int(getattr(args, "workers", None) or (_gpu_count() if gpu else 2))
    sizes = _sizes(args, gpu)
    rows: list[dict] = []
    table: list[tuple] = []
    xp = _xp(gpu)
    base = {"backend": backend, "kernel": kernel, "dtype": dtype, "inputs": "workers"}
    dev_mem = _device_memory(gpu)

    singles = {}
    for m, n, k in sizes:  # one device, in this process
        rng = xp.random.default_rng(seed)
        a = (rng.random((m, k), dtype=np.float32) * 2 - 1).astype(dtype)
        b = (rng.random((k, n), dtype=np.float32) * 2 - 1).astype(dtype)
        holder: dict = {}

        def one(a=a, b=b, holder=holder):
            holder["c"] = tiledmm.matmul(a, b, backend=backend, kernel=kernel)

        times = _time_call(one, reps, gpu)
        r = _sample_rows(m)
        rel = _rel(holder["c"][r], a[r].astype(np.float64) @ b.astype(np.float64))
        med = statistics.median(times)
        singles[(m, n, k)] = med
        info = dict(
            base, engine="tiledmm", workers=1, m=m, n=n, k=k, chunking="whole",
            cluster="none (one device, in process)", seconds=med,
            gflops=2 * m * n * k / med / 1e9, rel_error=rel, device=_device_name(gpu),
        )  # fmt: skip
        rows.append(_row(info, times))
        table.append(("tiledmm", 1, "whole", m, n, k, med, info["gflops"], None, rel))
        del a, b, holder, one  # one's defaults hold the operands
        _free(gpu)

    cluster, label = _cluster(workers, gpu)
    with cluster, Client(cluster) as client:
        client.wait_for_workers(workers, timeout=120)
        link = float(getattr(args, "link_bandwidth", None) or _link_bandwidth(client, gpu))
        mem = float(getattr(args, "worker_memory", None) or dev_mem)
        cl = Cluster(workers=workers, worker_memory=mem, link_bandwidth=link,
                     task_overhead=1e-3, inputs="workers", name=label)  # fmt: skip
        for m, n, k in sizes:
            pb = _plan_backend(gpu, backend)
            plan = cluster_plan(m, n, k, dtype=dtype, cluster=cl, backend=pb, kernel=kernel)
            one_rate = 2 * m * n * k / singles[(m, n, k)]  # the measured one-device rate
            print(plan, flush=True)
            chunkings = [("plan", plan)] + list(plan.alternatives)
            A = _operand((m, k), (plan.chunks[0], plan.chunks[2]), dtype, seed, gpu).persist()
            B = _operand((k, n), (plan.chunks[2], plan.chunks[1]), dtype, seed + 1, gpu).persist()
            wait([A, B])
            r = _sample_rows(m)
            ref = da.matmul(A[r].astype(np.float64), B.astype(np.float64)).compute()
            for cname, p in chunkings:
                cm, cn, ck = p.chunks
                a2 = A.rechunk((cm, ck)).persist() if p is not plan else A
                b2 = B.rechunk((ck, cn)).persist() if p is not plan else B
                wait([a2, b2])
                pm = cluster_plan(m, n, k, dtype=dtype, cluster=cl, chunks=p.chunks,
                                  flops_per_worker=one_rate)  # fmt: skip
                engines = (
                    ("tiledmm", lambda a2=a2, b2=b2: dmatmul(
                        a2, b2, backend=backend, kernel=kernel, rechunk=False, cluster=cl)),
                    ("dask-cupy" if gpu else "dask-numpy", lambda a2=a2, b2=b2: da.matmul(a2, b2)),
                )  # fmt: skip
                for engine, make in engines:
                    holder = {}

                    def call(make=make, holder=holder):
                        holder["c"] = make().persist()
                        wait(holder["c"])

                    times = _time_call(call, reps, False)
                    rel = _rel(holder["c"][r].compute(), ref)
                    med = statistics.median(times)
                    info = dict(
                        base, engine=engine, workers=workers, m=m, n=n, k=k, chunking=cname,
                        chunks=list(p.chunks), cluster=label, seconds=med,
                        gflops=2 * m * n * k / med / 1e9, rel_error=rel,
                        device=_device_name(gpu), link_bandwidth=link,
                        predicted_seconds=p.predicted_seconds,
                        predicted_seconds_measured_rate=pm.predicted_seconds,
                        intensity=p.intensity, bytes_moved=p.bytes_moved,
                        speedup_vs_one_device=singles[(m, n, k)] / med,
                        backend=backend if engine == "tiledmm" else "vendor",
                    )  # fmt: skip
                    rows.append(_row(info, times))
                    table.append((engine, workers, cname, m, n, k, med, info["gflops"],
                                  (p.predicted_seconds, pm.predicted_seconds), rel))  # fmt: skip
                    del holder
                if p is not plan:
                    del a2, b2
            del A, B

    _write(rows, args, gpu)
    _print_table(table, singles)
    return 0


def _sample_rows(m: int) -> list[int]:
    return sorted({0, m // 3, m // 2, m - 1})


def _plan_backend(gpu: bool, backend: str) -> str:
    return ("cuda" if gpu else "auto") if backend == "auto" else backend


def _gpu_wanted(args) -> bool:
    mode = getattr(args, "device", "auto") or "auto"
    if mode == "cpu":
        return False
    try:
        import cupy

        ok = cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # noqa: BLE001 - no CUDA here
        ok = False
    if mode == "gpu" and not ok:
        raise RuntimeError("--device gpu: CuPy with a CUDA device is needed")
    return ok


def _gpu_count() -> int:
    import cupy

    return cupy.cuda.runtime.getDeviceCount()


def _device_memory(gpu: bool) -> float:
    if gpu:
        import cupy

        return float(cupy.cuda.Device().mem_info[1])
    from .cluster import local_cluster

    return local_cluster().worker_memory / 2


def _device_name(gpu: bool) -> str:
    if gpu:
        import cupy

        return cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    from .device import host_cpu

    return host_cpu().name


def _free(gpu: bool) -> None:
    if gpu:
        import cupy

        cupy.get_default_memory_pool().free_all_blocks()


def _sizes(args, gpu: bool) -> list[tuple[int, int, int]]:
    text = getattr(args, "sizes", None)
    if not text:
        text = ("8192" if gpu else "512") if getattr(args, "quick", False) else (
            "32768" if gpu else "1536")  # fmt: skip
    out = []
    for item in text.split(","):
        parts = [int(x) for x in item.lower().split("x")]
        out.append(tuple(parts * 3 if len(parts) == 1 else parts))
    return out


def _write(rows: list[dict], args, gpu: bool) -> Path:
    import datetime as _dt

    from .results import commit_info, machine_info

    outdir = Path(getattr(args, "output", None) or "tiledmm-results")
    outdir.mkdir(parents=True, exist_ok=True)
    name = getattr(args, "name", None) or ("gpu-dask" if gpu else "cpu-dask")
    doc = {
        "machine_info": machine_info(),
        "commit_info": commit_info(),
        "benchmarks": rows,
        "datetime": _dt.datetime.now(_dt.UTC).isoformat(),
        "version": "5.0.0",
        "tiledmm": {"command": "tiledmm bench --dask", "inputs": "generated on the workers"},
    }
    path = outdir / f"{name}.json"
    path.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    print(f"wrote {path}")
    return path


def _print_table(table: list[tuple], singles: dict) -> None:
    print(f"\n{'engine':11} {'workers':>7} {'chunking':28} {'shape':>20} {'seconds':>9} "
          f"{'GFLOP/s':>10} {'vs 1 dev':>8} {'pred(model)':>11} {'pred(meas)':>10} "
          f"{'rel_err':>9}")  # fmt: skip
    for eng, w, cname, m, n, k, sec, gf, pred, rel in table:
        p1, p2 = (f"{pred[0]:.3g}", f"{pred[1]:.3g}") if pred else ("-", "-")
        print(f"{eng:11} {w:>7} {cname:28} {f'{m}x{n}x{k}':>20} {sec:>9.4g} {gf:>10.1f} "
              f"{singles[(m, n, k)] / sec:>8.2f} {p1:>11} {p2:>10} {rel:>9.2e}")  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", help="comma list of N (cube) or MxNxK; default 32768 on GPUs")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--backend", action="append", help="tiledmm backend on the workers")
    p.add_argument("--kernel", action="append", help="kernel family on the workers")
    p.add_argument("--workers", type=int, help="default: one per GPU (2 on CPU)")
    p.add_argument("--reps", type=int, default=2, help="timed runs after one warm-up")
    p.add_argument("--device", choices=["auto", "gpu", "cpu"], default="auto")
    p.add_argument("--link-bandwidth", type=float, help="bytes/s (default: measured)")
    p.add_argument("--worker-memory", type=float, help="bytes per worker (default: device)")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("-o", "--output", default="tiledmm-results")
    p.add_argument("--name", help="results file NAME.json")
    return p


def main(argv: list[str] | None = None) -> int:
    return bench_dask(build_parser().parse_args(argv))
