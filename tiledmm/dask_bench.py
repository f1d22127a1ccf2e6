"""``tiledmm bench --dask``: tiledmm on a Dask cluster vs one device vs dask.array.matmul.

GPU mode (CuPy present): one worker per GPU (``dask_cuda.LocalCUDACluster``; without dask-cuda,
a ``distributed`` cluster whose worker processes each see one GPU through CUDA_VISIBLE_DEVICES).
CPU mode: ``distributed.LocalCluster`` with worker processes and NumPy chunks.

1. One device, in this process, device-resident inputs (the baseline; its rate is the measured
   one-device rate the cluster planner is given).
2. The cluster; both links measured: worker<->worker (one 256 MiB chunk through dask's comms)
   and host->worker (each worker stages a 256 MiB shared-memory file, as staged chunks are).
3. The planner chooses chunks and placement (``inputs="any"``: "workers" or "staged"); its
   choice and the best ``--alternatives`` others it ranks run through ``tiledmm.dask.matmul``,
   and ``dask.array.matmul`` (cuBLAS/OpenBLAS per chunk) runs once on the planner's choice.
   Placement "staged": inputs start on the host (``from_host`` files); the timed call includes
   the staging (``extra_info.inputs = "host"``). Placement "workers": the chunks are loaded onto
   the workers and persisted before the clock (``inputs = "workers"``).

The timed call is the whole product (``persist`` + ``wait``); the result stays on the workers, as
the baseline's stays on its device. rel_error is sampled (four rows of C against a float64
product of the same rows). One untimed run, then ``--reps`` timed (median). Every row is written
to the JSON as soon as it is measured; no new case starts after ``--budget`` seconds.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import time
from typing import Any

import numpy as np

from .dask_report import Rows, print_table

__all__ = ["bench_dask", "main", "build_parser"]

_Rows = Rows  # the name tests/test_dask.py patches

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


def _time_call(fn, reps: int, gpu: bool, slow: float = 15.0) -> list[float]:
    """One untimed run, then ``reps`` timed ones (one only when the warm-up took over ``slow``
    seconds: a run that slow would not fit the bench's budget twice)."""
    t0 = time.perf_counter()
    fn()  # warm-up: kernel compilation, module loads, memory pools
    if time.perf_counter() - t0 > slow:
        reps = 1
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


def bench_dask(args: argparse.Namespace) -> int:
    """Run the sweep described in the module docstring; the JSON is rewritten after every row."""
    import dataclasses

    import dask.array as da
    from distributed import Client, wait

    import tiledmm

    from .cluster import Cluster, cluster_plan
    from .dask import matmul as dmatmul
    from .dask_host import from_host, release, shared_dir

    gpu = _gpu_wanted(args)
    dtype = getattr(args, "dtype", "float32") or "float32"
    backend = (getattr(args, "backend", None) or ["auto"])[0]
    kernel = (getattr(args, "kernel", None) or ["auto"])[0]
    reps = int(getattr(args, "reps", 2) or 2)
    seed = int(getattr(args, "seed", 0) or 0)
    workers = int(getattr(args, "workers", None) or (_gpu_count() if gpu else 2))
    n_alt = int(getattr(args, "alternatives", None) or 2)
    budget = float(getattr(args, "budget", None) or 200.0)
    sizes = _sizes(args, gpu)
    out = Rows(args, gpu)
    xp = _xp(gpu)
    base = {"backend": backend, "kernel": kernel, "dtype": dtype}
    dev_mem = _device_memory(gpu)

    singles, hosts = {}, {}
    for m, n, k in sizes:  # one device, in this process, device-resident inputs
        rng = xp.random.default_rng(seed)
        a = (rng.random((m, k), dtype=np.float32) * 2 - 1).astype(dtype)
        b = (rng.random((k, n), dtype=np.float32) * 2 - 1).astype(dtype)
        holder: dict = {}

        def one(a=a, b=b, holder=holder):
            holder["c"] = tiledmm.matmul(a, b, backend=backend, kernel=kernel)

        times = _time_call(one, reps, gpu)
        r = _sample_rows(m)
        ref = _host(a[r].astype(np.float64) @ b.astype(np.float64))
        rel = _rel(holder["c"][r], ref)
        med = statistics.median(times)
        singles[(m, n, k)] = med
        hosts[(m, n, k)] = (_host(a), _host(b), r, ref)
        info = dict(
            base, engine="tiledmm", workers=1, m=m, n=n, k=k, chunking="whole",
            cluster="none (one device, in process)", seconds=med, inputs="device",
            gflops=2 * m * n * k / med / 1e9, rel_error=rel, device=_device_name(gpu),
        )  # fmt: skip
        out.add(info, times, None)
        del a, b, holder, one  # one's defaults hold the operands
        _free(gpu)

    out.log(f"starting {workers} workers")
    cluster, label = _cluster(workers, gpu)
    with cluster, Client(cluster) as client:
        client.wait_for_workers(workers, timeout=120)
        link = float(getattr(args, "link_bandwidth", None) or _link_bandwidth(client, gpu))
        host_bw = float(getattr(args, "host_bandwidth", None) or _host_bandwidth(client, gpu))
        out.log(f"{label}: worker link {link / 1e9:.3g} GB/s, host->worker {host_bw / 1e9:.3g} "
                "GB/s (measured)")  # fmt: skip
        client.run(_warm_worker, gpu)  # imports and first-call set-up, on every worker
        mem = float(getattr(args, "worker_memory", None) or dev_mem)
        cl = Cluster(workers=workers, worker_memory=mem, link_bandwidth=link,
                     host_bandwidth=host_bw, task_overhead=1e-3, inputs="any",
                     name=label)  # fmt: skip
        for m, n, k in sizes:
            a_h, b_h, r, ref = hosts.pop((m, n, k))
            one_rate = 2 * m * n * k / singles[(m, n, k)]  # the measured one-device rate
            plan = cluster_plan(m, n, k, dtype=dtype, cluster=cl, flops_per_worker=one_rate,
                                backend=_plan_backend(gpu, backend), kernel=kernel)  # fmt: skip
            print(plan, flush=True)
            alts = sorted(plan.alternatives, key=lambda x: x[1].predicted_seconds)[:n_alt]
            d = shared_dir(a_h.nbytes + b_h.nbytes)
            pa, pb = (host_source_path(from_host(x, directory=d)) for x in (a_h, b_h))
            del a_h, b_h
            vendor = "dask-cupy" if gpu else "dask-numpy"
            cases = [("plan", plan, "tiledmm")] + [(nm, p, "tiledmm") for nm, p in alts]
            cases.append(("plan", plan, vendor))  # dask.array.matmul once, on the plan's chunks
            for cname, p, engine in cases:
                if time.perf_counter() - out.t0 > budget:
                    out.log(f"budget {budget:.0f} s spent: skipping {engine} {cname}")
                    continue
                cm, cn, ck = p.chunks
                staged = p.placement == "staged"
                pcl = dataclasses.replace(cl, inputs=p.placement)
                if staged:  # inputs start on the host; staging is inside the timed call

                    def operands(pa=pa, pb=pb, cm=cm, cn=cn, ck=ck):
                        x = from_host(pa, (cm, ck), gpu=gpu)
                        return x, from_host(pb, (ck, cn), gpu=gpu)
                else:  # inputs start on the workers: loaded and persisted before the clock
                    A = from_host(pa, (cm, ck), gpu=gpu).persist()
                    B = from_host(pb, (ck, cn), gpu=gpu).persist()
                    wait([A, B])

                    def operands(A=A, B=B):
                        return A, B

                if engine == "tiledmm":

                    def make(operands=operands, p=p, pcl=pcl):
                        x, y = operands()
                        return dmatmul(x, y, backend=backend, kernel=kernel, cluster=pcl,
                                       rechunk=tuple(p.chunks))  # fmt: skip
                else:

                    def make(operands=operands):
                        return da.matmul(*operands())

                holder: dict = {}

                def call(make=make, holder=holder):
                    holder["c"] = None
                    holder["c"] = make().persist()
                    wait(holder["c"])

                times = _time_call(call, reps, False)
                rel = _rel(holder["c"][r].compute(), ref)
                med = statistics.median(times)
                pmod = cluster_plan(m, n, k, dtype=dtype, cluster=pcl, chunks=p.chunks,
                                    placement=p.placement, backend=_plan_backend(gpu, backend),
                                    kernel=kernel, flops_per_worker=None)  # fmt: skip
                info = dict(
                    base, engine=engine, workers=workers, m=m, n=n, k=k, chunking=cname,
                    chunks=list(p.chunks), cluster=label, seconds=med,
                    gflops=2 * m * n * k / med / 1e9, rel_error=rel, device=_device_name(gpu),
                    inputs="host" if staged else "workers", placement=p.placement,
                    placement_text=p.placement_text, link_bandwidth=link,
                    host_bandwidth=host_bw, one_device_rate=one_rate,
                    predicted_seconds=p.predicted_seconds,
                    predicted_seconds_model_rate=pmod.predicted_seconds,
                    predicted_bound=p.bound, intensity=p.intensity, bytes_moved=p.bytes_moved,
                    speedup_vs_one_device=singles[(m, n, k)] / med, shm_dir=str(d),
                    backend=backend if engine == "tiledmm" else "vendor",
                )  # fmt: skip
                out.add(info, times, (p.predicted_seconds, pmod.predicted_seconds))
                holder.clear()
                if not staged:
                    del A, B
            release(pa)
            release(pb)

    print_table(out.table, singles)
    return 0


def host_source_path(x) -> str:
    from .dask_host import host_source

    return host_source(x).path


def _host_bandwidth(client, gpu: bool, nbytes: int = 256 * 2**20) -> float:
    """Bytes/s one worker stages from a shared-memory file (all workers at once; the slowest),
    by the same code the staged chunks use (mapped once, then copied: best of two warm runs)."""
    from .dask_host import from_host, host_source, release

    src = from_host(np.ones(nbytes // 4, np.float32))
    path = host_source(src).path
    try:
        rates = client.run(_stage_rate, path, gpu)
    finally:
        release(path)
    return min(rates.values())


def _warm_worker(gpu: bool) -> None:
    import tiledmm

    x = _xp(gpu).ones((64, 64), np.float32)
    tiledmm.matmul(x, x)
    _sync(gpu)


def _stage_rate(path: str, gpu: bool) -> float:
    from .dask_host import mapped, stage

    view = mapped(path)
    times = []
    for _ in range(3):
        _sync(gpu)
        t0 = time.perf_counter()
        x = stage(view, gpu)
        _sync(gpu)
        times.append(time.perf_counter() - t0)
        del x
    return view.nbytes / min(times[1:])


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
            "32768,16384" if gpu else "1536")  # fmt: skip
    out = []
    for item in text.split(","):
        parts = [int(x) for x in item.lower().split("x")]
        out.append(tuple(parts * 3 if len(parts) == 1 else parts))
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", help="comma list of N (cube) or MxNxK; default 32768,16384 on GPUs")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--backend", action="append", help="tiledmm backend on the workers")
    p.add_argument("--kernel", action="append", help="kernel family on the workers")
    p.add_argument("--workers", type=int, help="default: one per GPU (2 on CPU)")
    p.add_argument("--reps", type=int, default=2, help="timed runs after one warm-up")
    p.add_argument("--device", choices=["auto", "gpu", "cpu"], default="auto")
    p.add_argument(
        "--link-bandwidth", type=float, help="worker<->worker bytes/s (default: measured)"
    )
    p.add_argument("--host-bandwidth", type=float, help="host->worker bytes/s (default: measured)")
    p.add_argument("--alternatives", type=int, default=2, help="best N alternatives to measure")
    p.add_argument(
        "--budget",
        type=float,
        default=200.0,
        help="seconds after which no new case starts (rows so far are written)",
    )
    p.add_argument("--worker-memory", type=float, help="bytes per worker (default: device)")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("-o", "--output", default="tiledmm-results")
    p.add_argument("--name", help="results file NAME.json")
    return p


def main(argv: list[str] | None = None) -> int:
    return bench_dask(build_parser().parse_args(argv))
