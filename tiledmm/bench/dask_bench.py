"""``tiledmm bench --dask``: tiledmm on a Dask cluster vs one device vs dask.array.matmul.

GPU mode (CuPy present): one worker per GPU (``dask_cuda.LocalCUDACluster``; without dask-cuda,
a ``distributed`` cluster whose worker processes each see one GPU through CUDA_VISIBLE_DEVICES).
CPU mode: ``distributed.LocalCluster`` with worker processes and NumPy chunks.

1. One device, in this process, device-resident inputs (the baseline; its rate is the measured
   one-device rate the cluster planner is given, on CPUs shared among the worker processes).
   Inputs: float32 straight from a seeded generator on the device (no float64 detour), copied
   once to the host.
2. The cluster, measured: the worker link (one 256 MiB chunk through dask's comms), the host
   link (every worker staging a 256 MiB shared-memory file with the staged path's own code)
   and the call overhead (``persist`` + ``wait`` of one tiny task per worker).
3. The planner chooses chunks and placement (``inputs="any"``); its choice and the best
   ``--alternatives`` others it ranks run through ``tiledmm.dask.matmul``; then
   ``dask.array.matmul`` (cuBLAS/OpenBLAS per chunk) on the ``--vendor`` chunkings ("rows":
   whole-K row panels, dask's best layout, no partial sums; "plan": the planner's chunks).
   Placement "staged": inputs start on the host (``from_host`` files in /dev/shm) and the timed
   call includes the staging (``extra_info.inputs = "host"``); placement "workers": chunks are
   loaded onto the workers and persisted before the clock (``inputs = "workers"``). Every
   cluster row's ``phases`` has the graph's construction time; staged tiledmm rows add, per
   worker, its tasks, busy time, load / wait / product / K-sum seconds, and the call's time
   outside the tasks.

The timed call is the whole product (graph built, ``persist`` + ``wait``); the result stays on
the workers, as the baseline's stays on its device. rel_error is sampled (four rows of C against
a float64 product of the same rows). One untimed run, then ``--reps`` timed (median); a case
whose warm-up took over ``--slow`` seconds is timed by its warm-up (``timed_warmup``). Every row
is written to the JSON as soon as it is measured; no new case starts after ``--budget`` s.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import time

import numpy as np

from ..util import exits
from . import dask_measure as dm
from .dask_report import Rows, print_table

__all__ = ["bench_dask", "main", "build_parser"]

_Rows = Rows  # the name tests/test_dask.py patches


def _operands(m: int, n: int, k: int, dtype: str, gpu: bool, seed: int):
    """Seeded float32 operands in [-1, 1), made on the device (CuPy's generator on GPUs)."""
    rng = dm.xp(gpu).random.default_rng(seed)
    a = rng.random((m, k), dtype=np.float32)
    b = rng.random((k, n), dtype=np.float32)
    a, b = a * 2 - 1, b * 2 - 1
    return (a, b) if dtype == "float32" else (a.astype(dtype), b.astype(dtype))


def _one_device(out: Rows, sizes, base: dict, gpu: bool, reps: int, seed: int):
    """The baseline rows; returns ({size: seconds}, {size: (A host, B host, rows, reference)})."""
    import tiledmm

    singles, hosts = {}, {}
    backend, kernel, dtype = base["backend"], base["kernel"], base["dtype"]
    for m, n, k in sizes:
        a, b = _operands(m, n, k, dtype, gpu, seed)
        holder: dict = {}

        def one(a=a, b=b, holder=holder):
            holder["c"] = tiledmm.matmul(a, b, backend=backend, kernel=kernel)

        times, warm_only = dm.time_call(one, reps, gpu)
        r = dm.sample_rows(m)
        ref = dm.host(a[r].astype(np.float64) @ b.astype(np.float64))
        med = statistics.median(times)
        singles[(m, n, k)] = med
        hosts[(m, n, k)] = (dm.host(a), dm.host(b), r, ref)
        info = dict(
            base, engine="tiledmm", workers=1, m=m, n=n, k=k, chunking="whole",
            cluster="none (one device, in process)", seconds=med, inputs="device",
            gflops=2 * m * n * k / med / 1e9, rel_error=dm.rel(holder["c"][r], ref),
            device=dm.device_name(gpu), timed_warmup=warm_only,
        )  # fmt: skip
        out.add(info, times, None)
        del a, b, holder, one  # one's defaults hold the operands
        dm.free(gpu)
    return singles, hosts


def _cases(plan, n_alt: int, vendor: list[str], gpu: bool, workers: int):
    """(name, plan, engine) in run order: the plan, its best alternatives, the vendor's."""
    from ..dask.cluster import cluster_plan

    alts = sorted(plan.alternatives, key=lambda x: x[1].predicted_seconds)[:n_alt]
    cases = [("plan", plan, "tiledmm")] + [(nm, p, "tiledmm") for nm, p in alts]
    engine = "dask-cupy" if gpu else "dask-numpy"
    for v in vendor:
        if v == "plan":
            cases.append(("plan", plan, engine))
        elif v == "rows":  # whole-K row panels, B whole: no partial sums for dask to move
            chunks = (-(-plan.m // workers), plan.n, plan.k)
            p = cluster_plan(plan.m, plan.n, plan.k, dtype=plan.dtype, cluster=plan.cluster,
                             chunks=chunks, placement=plan.placement)  # fmt: skip
            cases.append(("row panels (whole K and N)", p, engine))
        else:
            raise ValueError(f"--vendor takes 'plan' and 'rows', not {v!r}")
    return cases


def _run_case(client, out: Rows, case, ctx: dict) -> None:
    """Time one chunking through tiledmm (or dask.array.matmul) and write its row."""
    import dask.array as da
    from distributed import wait

    from ..dask.cluster import cluster_plan
    from ..dask.host import from_host, take_trace
    from ..dask.product import matmul as dmatmul

    cname, p, engine = case
    gpu, backend, kernel = ctx["gpu"], ctx["backend"], ctx["kernel"]
    m, n, k = p.m, p.n, p.k
    cm, cn, ck = p.chunks
    pa, pb = ctx["paths"]
    staged = p.placement == "staged"
    pcl = dataclasses.replace(ctx["cluster"], inputs=p.placement)
    if staged:  # inputs start on the host; staging is inside the timed call

        def operands():
            return from_host(pa, (cm, ck), gpu=gpu), from_host(pb, (ck, cn), gpu=gpu)
    else:  # inputs start on the workers: loaded and persisted before the clock
        A = from_host(pa, (cm, ck), gpu=gpu).persist()
        B = from_host(pb, (ck, cn), gpu=gpu).persist()
        wait([A, B])
        dm.sync_workers(client, gpu)

        def operands():
            return A, B

    def make():
        x, y = operands()
        if engine != "tiledmm":
            return da.matmul(x, y)
        return dmatmul(x, y, backend=backend, kernel=kernel, cluster=pcl, rechunk=tuple(p.chunks))

    holder: dict = {}

    def call():
        holder["c"] = None
        t0 = time.perf_counter()
        c = make()  # the graph (and the plan), on the client
        holder["graph"] = time.perf_counter() - t0
        holder["c"] = c.persist()
        wait(holder["c"])
        dm.sync_workers(client, gpu)  # tasks return with their kernels queued

    times, warm_only = dm.time_call(call, ctx["reps"], False, ctx["slow"],
                                    before=lambda: client.run(take_trace))  # fmt: skip
    med = statistics.median(times)
    phases, text = dm.phases(client, times[-1]) if staged and engine == "tiledmm" else ({}, "")
    phases["graph"] = holder["graph"]  # of the last call; part of outside_tasks when staged
    r, ref = ctx["check"]
    rel = dm.rel(holder["c"][r].compute(), ref)
    ours = engine == "tiledmm"
    pmod = cluster_plan(m, n, k, dtype=p.dtype, cluster=pcl, chunks=p.chunks,
                        placement=p.placement, backend=ctx["plan_backend"], kernel=kernel,
                        flops_per_worker=None)  # fmt: skip
    single = ctx["single"]
    info = dict(
        ctx["base"], engine=engine, workers=pcl.workers, m=m, n=n, k=k, chunking=cname,
        chunks=list(p.chunks), cluster=ctx["label"], seconds=med, timed_warmup=warm_only,
        gflops=2 * m * n * k / med / 1e9, rel_error=rel, device=dm.device_name(gpu),
        inputs="host" if staged else "workers", placement=p.placement,
        placement_text=p.placement_text, link_bandwidth=pcl.link_bandwidth,
        host_bandwidth=pcl.host_bandwidth, call_overhead=pcl.call_overhead,
        one_device_rate=2 * m * n * k / single,
        predicted_seconds=p.predicted_seconds if ours else None,
        predicted_seconds_model_rate=pmod.predicted_seconds if ours else None,
        predicted_terms={"compute": p.compute_seconds, "host_or_link": p.link_seconds,
                         "overhead": p.overhead_seconds, "result_to_host": p.result_seconds},
        predicted_bound=p.bound, intensity=p.intensity, bytes_moved=p.bytes_moved,
        speedup_vs_one_device=single / med, shm_dir=ctx["shm"], phases=phases,
        backend=backend if ours else "vendor",
    )  # fmt: skip
    out.add(info, times, (p.predicted_seconds, pmod.predicted_seconds) if ours else None)
    if text:
        out.log(f"  phases: {text} (graph {holder['graph'] * 1e3:.3g} ms)")
    holder.clear()


def bench_dask(args: argparse.Namespace) -> int:
    """Run the sweep described in the module docstring; the JSON is rewritten after every row."""
    from distributed import Client

    from ..dask.cluster import cluster_plan
    from ..dask.cluster_model import Cluster
    from ..dask.host import from_host, host_source, release, shared_dir

    gpu = dm.gpu_wanted(args)
    dtype = getattr(args, "dtype", "float32") or "float32"
    backend = (getattr(args, "backend", None) or ["auto"])[0]
    kernel = (getattr(args, "kernel", None) or ["auto"])[0]
    reps = int(getattr(args, "reps", 2) or 2)
    workers = int(getattr(args, "workers", None) or (dm.gpu_count() if gpu else 2))
    n_alt = int(getattr(args, "alternatives", None) or 3)
    budget = float(getattr(args, "budget", None) or 200.0)
    vendor = [v for v in (getattr(args, "vendor", None) or "rows,plan").split(",") if v]
    sizes = _sizes(args, gpu)
    out = Rows(args, gpu)
    base = {"backend": backend, "kernel": kernel, "dtype": dtype}
    seed = int(getattr(args, "seed", 0) or 0)
    singles, hosts = _one_device(out, sizes, base, gpu, reps, seed)
    failed = 0

    out.log(f"starting {workers} workers")
    cluster, label = dm.start_cluster(workers, gpu)
    with cluster, Client(cluster) as client:
        client.wait_for_workers(workers, timeout=120)
        link = float(getattr(args, "link_bandwidth", None) or dm.link_bandwidth(client, gpu))
        host_bw = float(getattr(args, "host_bandwidth", None) or dm.host_bandwidth(client, gpu))
        client.run(dm.warm_worker, gpu)  # imports and first-call set-up, on every worker
        call = dm.call_overhead(client, workers)
        out.log(f"{label}: worker link {link / 1e9:.3g} GB/s, host->worker {host_bw / 1e9:.3g} "
                f"GB/s, call overhead {call * 1e3:.3g} ms (measured)")  # fmt: skip
        mem = float(getattr(args, "worker_memory", None) or dm.device_memory(gpu))
        cl = Cluster(workers=workers, worker_memory=mem, link_bandwidth=link,
                     host_bandwidth=host_bw, task_overhead=1e-3, call_overhead=call,
                     inputs="any", name=label)  # fmt: skip
        for m, n, k in sizes:
            a_h, b_h, r, ref = hosts.pop((m, n, k))
            single = singles[(m, n, k)]
            pb_ = _plan_backend(gpu, backend)
            rate = 2 * m * n * k / single  # one GPU per worker; CPU workers share the cores
            rate = rate if gpu else rate * min(1.0, workers / (os.cpu_count() or 1)) / workers
            plan = cluster_plan(m, n, k, dtype=dtype, cluster=cl, backend=pb_, kernel=kernel,
                                flops_per_worker=rate)  # fmt: skip
            print(plan, flush=True)
            d = shared_dir(a_h.nbytes + b_h.nbytes)
            t0 = time.perf_counter()
            paths = [host_source(from_host(x, directory=d)).path for x in (a_h, b_h)]
            out.log(f"operands saved to {d} in {time.perf_counter() - t0:.3g} s")
            del a_h, b_h
            ctx = dict(gpu=gpu, backend=backend, kernel=kernel, reps=reps, base=base,
                       slow=float(getattr(args, "slow", None) or 15.0), paths=paths,
                       cluster=cl, label=label, check=(r, ref), plan_backend=pb_,
                       single=single, shm=str(d))  # fmt: skip
            for case in _cases(plan, n_alt, vendor, gpu, workers):
                if time.perf_counter() - out.t0 > budget:
                    out.log(f"budget {budget:.0f} s spent: skipping {case[2]} {case[0]}")
                    continue
                try:
                    _run_case(client, out, case, ctx)
                except Exception as exc:  # noqa: BLE001 - one failed case keeps the others
                    out.log(f"{case[2]} {case[0]} failed: {type(exc).__name__}: {exc}")
                    failed += 1
            for path in paths:
                release(path)

    print_table(out.table, singles)
    return exits.WRONG_RESULT if failed else exits.OK  # a failed case, as `tiledmm bench`


def _plan_backend(gpu: bool, backend: str) -> str:
    return ("cuda" if gpu else "auto") if backend == "auto" else backend


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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", help="comma list of N (cube) or MxNxK; default 32768 on GPUs")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--backend", action="append", help="tiledmm backend on the workers")
    p.add_argument("--kernel", action="append", help="kernel family on the workers")
    p.add_argument("--workers", type=int, help="default: one per GPU (2 on CPU)")
    p.add_argument("--reps", type=int, default=2, help="timed runs after one warm-up")
    p.add_argument("--device", choices=["auto", "gpu", "cpu"], default="auto")
    p.add_argument("--link-bandwidth", type=float, help="worker<->worker B/s (default: measured)")
    p.add_argument("--host-bandwidth", type=float, help="host->worker B/s (default: measured)")
    p.add_argument("--alternatives", type=int, default=3, help="best N alternatives to measure")
    p.add_argument("--vendor", default="rows,plan",
                   help="dask.array.matmul chunkings: rows (whole-K row panels), plan")  # fmt: skip
    p.add_argument("--slow", type=float, default=15.0,
                   help="a case whose warm-up takes longer is timed by its warm-up")  # fmt: skip
    p.add_argument("--budget", type=float, default=200.0,
                   help="no new case starts after this many seconds")  # fmt: skip
    p.add_argument("--worker-memory", type=float, help="bytes per worker (default: device)")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("-o", "--output", default="tiledmm-results")
    p.add_argument("--name", help="results file NAME.json")
    return p


def main(argv: list[str] | None = None) -> int:
    return bench_dask(build_parser().parse_args(argv))
