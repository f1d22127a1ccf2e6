"""The measuring side of ``tiledmm bench --dask`` (``tiledmm.bench.dask_bench``): the cluster, its
two
links and its per-call overhead, timed calls, the staged tasks' phases, device helpers.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import numpy as np

__all__ = [
    "TF32_OFF", "call_overhead", "device_memory", "device_name", "free", "gpu_count",
    "gpu_wanted", "host", "host_bandwidth", "link_bandwidth", "phases", "rel", "sample_rows",
    "start_cluster", "sync", "time_call", "warm_worker", "xp",
]  # fmt: skip

TF32_OFF = {"CUPY_TF32": "0"}


def xp(gpu: bool):
    """The array module of the chunks: CuPy on GPUs, else NumPy."""
    if gpu:
        import cupy

        return cupy
    return np


def sync(gpu: bool) -> None:
    if gpu:
        import cupy

        cupy.cuda.Device().synchronize()


def sync_workers(client, gpu: bool) -> None:
    """Wait for every worker's device to finish: a task returns when its kernels are queued
    (CuPy launches asynchronously), so a timed call ends only when the workers' GPUs are idle."""
    if gpu:
        client.run(_sync_device)


def _sync_device() -> None:
    import cupy

    cupy.cuda.runtime.deviceSynchronize()


def start_cluster(workers: int, gpu: bool):
    """(cluster, label): one worker per GPU, or CPU worker processes (one thread each)."""
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


def time_call(fn, reps: int, gpu: bool, slow: float = 15.0, before=None) -> tuple[list, bool]:
    """One untimed run, then ``reps`` timed ones; ``before()`` runs untimed before each.
    When the warm-up took over ``slow`` seconds its time is the measurement (a case that slow
    is far from the others and would not fit the budget twice): ``(times, True)``."""
    if before:
        before()
    t0 = time.perf_counter()
    fn()  # warm-up: kernel compilation, module loads, memory pools, first touch of the files
    warm = time.perf_counter() - t0
    if warm > slow:
        return [warm], True
    times = []
    for _ in range(reps):
        if before:
            before()
        sync(gpu)
        t0 = time.perf_counter()
        fn()
        sync(gpu)
        times.append(time.perf_counter() - t0)
    return times, False


def host(x: Any) -> np.ndarray:
    return x.get() if hasattr(x, "get") else np.asarray(x)


def rel(c_rows: Any, ref_rows: Any) -> float:
    from ..util.accuracy import rel_error

    return rel_error(host(c_rows), host(ref_rows))


def sample_rows(m: int) -> list[int]:
    """The rows of C checked against a float64 product (the full reference is too slow)."""
    return sorted({0, m // 3, m // 2, m - 1})


def link_bandwidth(client, gpu: bool, nbytes: int = 256 * 2**20) -> float:
    """Bytes/s moving one chunk from one worker to another (the cluster's worker link)."""
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
    return xp(gpu).full(nbytes // 4, salt, dtype=np.float32)


def _nbytes(x) -> int:
    return int(x.nbytes)


def host_bandwidth(client, gpu: bool, nbytes: int = 256 * 2**20) -> float:
    """Bytes/s one worker stages from a shared-memory file (all workers at once; the slowest),
    by the same code the staged chunks use (mapped once, then copied: best of two warm runs)."""
    from ..dask.host import from_host, host_source, release

    src = from_host(np.ones(nbytes // 4, np.float32))
    path = host_source(src).path
    try:
        rates = client.run(_stage_rate, path, gpu)
    finally:
        release(path)
    return min(rates.values())


def _stage_rate(path: str, gpu: bool) -> float:
    from ..dask.host import mapped, stage

    view = mapped(path)
    times = []
    for _ in range(3):
        sync(gpu)
        t0 = time.perf_counter()
        x = stage(view, gpu)
        sync(gpu)
        times.append(time.perf_counter() - t0)
        del x
    return view.nbytes / min(times[1:])


def call_overhead(client, workers: int) -> float:
    """Seconds a ``persist`` + ``wait`` of a graph of one tiny task per worker costs (graph
    submission, the scheduler, the round trip): the fixed part of every cluster call."""
    import dask.array as da
    from distributed import wait

    best = float("inf")
    for i in range(4):
        x = da.ones((workers, 8), chunks=(1, 8)) + i
        t0 = time.perf_counter()
        wait(x.persist())
        best = min(best, time.perf_counter() - t0)
    return best


def warm_worker(gpu: bool) -> None:
    """Imports and first-call set-up on a worker (``client.run``)."""
    import tiledmm

    x = xp(gpu).ones((64, 64), np.float32)
    tiledmm.matmul(x, x)
    sync(gpu)


def phases(client, t_call: float) -> tuple[dict, str]:
    """The staged tasks' records of the last call, per worker (``dask_host.take_trace``):
    tasks, busy span, and seconds loading / waiting for loads / in products / in K sums; the
    call's time beyond the busiest worker is the client's and the scheduler's."""
    from ..dask.host import take_trace

    per: dict = {}
    for i, recs in enumerate(client.run(take_trace).values()):
        if not recs:
            per[f"w{i}"] = {"tasks": 0}
            continue
        t0 = min(r["start"] for r in recs)
        t1 = max(r["start"] + r["seconds"] for r in recs)
        d = {"tasks": len(recs), "busy": t1 - t0, "gbytes": sum(r["bytes"] for r in recs) / 1e9}
        for key in ("load", "wait", "product", "sum"):
            d[key] = sum(r[key] for r in recs)
        per[f"w{i}"] = d
    busy = max((d.get("busy", 0.0) for d in per.values()), default=0.0)
    per["outside_tasks"] = max(0.0, t_call - busy)
    text = "; ".join(
        f"{w}: {d['tasks']} task(s), busy {d['busy']:.3g} s (load {d['load']:.3g} s of "
        f"{d['gbytes']:.3g} GB, waited {d['wait']:.3g}, products {d['product']:.3g}, sums "
        f"{d['sum']:.3g})"
        if d.get("tasks") else f"{w}: idle"
        for w, d in per.items() if w != "outside_tasks"
    )  # fmt: skip
    return per, f"{text}; outside tasks {per['outside_tasks']:.3g} s"


def gpu_wanted(args) -> bool:
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


def gpu_count() -> int:
    import cupy

    return cupy.cuda.runtime.getDeviceCount()


def device_memory(gpu: bool) -> float:
    if gpu:
        import cupy

        return float(cupy.cuda.Device().mem_info[1])
    from ..dask.cluster_model import local_cluster

    return local_cluster().worker_memory / 2


def device_name(gpu: bool) -> str:
    if gpu:
        import cupy

        return cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    from ..device.host import host_cpu

    return host_cpu().name


def free(gpu: bool) -> None:
    if gpu:
        import cupy

        cupy.get_default_memory_pool().free_all_blocks()
