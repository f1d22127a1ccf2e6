"""The cluster plan in words (``str(ClusterPlan)``, ``to_dict()``) and from the command line
(``tiledmm plan M N K --workers W ...``): the text side of :mod:`tiledmm.dask.cluster`.

A leaf: imports nothing of tiledmm (:mod:`tiledmm.dask.cluster` imports it).
"""

from __future__ import annotations

import math
from typing import Any

from ..util.args import parse_size

__all__ = ["as_dict", "cli_cluster_fields", "cli_plan_fields", "describe"]


def _bytes(x: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if x >= size:
            return f"{x / size:.3g} {unit}"
    return f"{x:.0f} B"


def _rate(x: float, what: str) -> str:
    for unit, size in (("T", 1e12), ("G", 1e9), ("M", 1e6)):
        if x >= size:
            return f"{x / size:.4g} {unit}{what}/s"
    return f"{x:.4g} {what}/s"


def _time(t: float) -> str:
    return f"{t:.3g} s" if t >= 1 else f"{t * 1e3:.3g} ms"


def as_dict(plan: Any) -> dict:
    """``ClusterPlan.to_dict()``: every field, the cluster and the alternatives as plain data."""
    d = {k: getattr(plan, k) for k in plan.__dataclass_fields__}
    d["cluster"] = dict(plan.cluster.__dict__)
    d["alternatives"] = [
        {"name": name, "chunks": p.chunks, "placement": p.placement,
         "predicted_seconds": p.predicted_seconds}
        for name, p in plan.alternatives
    ]  # fmt: skip
    d["placement_text"] = plan.placement_text
    d["predicted_gflops"] = plan.predicted_gflops
    return d


def describe(plan: Any) -> str:
    """A :class:`~tiledmm.dask.cluster_model.ClusterPlan` explained: placement, chunks,
    intensity, the time terms per worker, memory, the prediction and the ranked alternatives."""
    p, c = plan, plan.cluster
    cm, cn, ck = p.chunks
    gm, gn, gk = p.grid
    b = f"{p.batch} x " if p.batch > 1 else ""
    link = "shared memory" if math.isinf(c.link_bandwidth) else _rate(c.link_bandwidth, "B")
    if not math.isinf(c.host_bandwidth):
        link += f", host->worker {_rate(c.host_bandwidth, 'B')}"
    ai = "inf (nothing moves)" if math.isinf(p.intensity) else f"{p.intensity:.3g}"
    staged = p.placement == "staged"
    spread = (
        "one task per output block, spread over the workers by dask"
        if staged
        else f"output blocks split {p.worker_grid[0]} x {p.worker_grid[1]} over the workers"
    )
    lines = [
        f"cluster plan, {p.dtype}: C[{b}{p.m}x{p.n}] = A[{p.m}x{p.k}] @ B[{p.k}x{p.n}] on "
        f"{c.workers} worker(s) ({c.name}; {_bytes(c.worker_memory)} each, link {link})",
        f"  placement: {p.placement_text}",
        f"  chunks {cm}x{cn}x{ck} (A {cm}x{ck}, B {ck}x{cn}): grid {gm} x {gn} x {gk}, "
        f"{p.tasks} tasks; {spread}",
        f"  cluster intensity {ai} FLOP/B ({p.flops / 1e9:.4g} GFLOP over "
        f"{_bytes(p.bytes_moved)} moved "
        + ("host->workers)" if staged else "between workers/host)"),
        f"  per worker: compute {_time(p.compute_seconds)} at {_rate(p.chunk_rate, 'FLOP')} per "
        f"chunk product ({p.chunk_source}), "
        + ("host->device " if staged else "link ")
        + f"{_time(p.link_seconds)} (overlapped); scheduler and call {_time(p.overhead_seconds)}",
        f"  memory per worker: {_bytes(p.working_bytes)} working set, "
        f"{_bytes(p.resident_bytes)} resident"
        + (" (panels beyond memory spill)" if p.resident_bytes > c.worker_memory else "")
        + ("" if p.fits else " -- does NOT fit"),
        f"  predicted {_time(p.predicted_seconds)} ({p.predicted_gflops:.4g} GFLOP/s), "
        f"{p.bound}-bound; C stays on the workers (to the host: +{_time(p.result_seconds)})",
    ]
    for name, q in p.alternatives:
        lines.append(
            f"    vs {name}: chunks {q.chunks[0]}x{q.chunks[1]}x{q.chunks[2]} ({q.placement}) "
            f"-> {_time(q.predicted_seconds)}" + ("" if q.fits else " (does not fit)")
        )
    if p.rechunked:
        lines.append(f"  rechunked: {p.rechunked}")
    return "\n".join(lines)


def cli_cluster_fields(args: Any, host_memory: float, host_name: str) -> dict:
    """The :class:`~tiledmm.dask.cluster_model.Cluster` fields of ``tiledmm plan M N K --workers W
    [--worker-memory 80GiB] [--link-bandwidth 25GB/s]``. Without --link-bandwidth a multi-worker
    cluster gets 10 GB/s (a PCIe-class link), which ``str(plan)`` shows; without
    --worker-memory, this host's memory (16 GiB for GPU workers is a safer guess: pass it)."""
    workers = int(getattr(args, "workers", None) or 1)
    link = parse_size(getattr(args, "link_bandwidth", None))
    mem = parse_size(getattr(args, "worker_memory", None))
    return dict(
        workers=workers,
        worker_memory=mem or host_memory,
        link_bandwidth=link or (math.inf if workers == 1 else 10e9),
        task_overhead=1e-4 if workers == 1 else 1e-3,
        call_overhead=0.0 if workers == 1 else 0.01,
        name="as described" if workers > 1 else host_name,
    )


def cli_plan_fields(args: Any) -> dict:
    """The keyword arguments of ``cluster_plan`` from ``tiledmm plan``'s arguments."""
    return dict(
        dtype=getattr(args, "dtype", "float32") or "float32",
        batch=getattr(args, "batch", 1) or 1,
        backend=getattr(args, "backend", "auto") or "auto",
        kernel=getattr(args, "kernel", "auto") or "auto",
    )
