"""The planner one level up: chunks are tiles, workers are compute units, the link is the level.

Pure Python (no dask import). Given a product (batch x M x N x K), a :class:`Cluster` (workers,
memory per worker, link bandwidth, threads, per-task overhead) and the chunk products' predicted
time from tiledmm's own planner on the worker's device, :func:`cluster_plan` searches chunk sizes
(cm, cn, ck) and returns a :class:`ClusterPlan`.

The traffic and time model of one chunking (:class:`Cluster`, :class:`ClusterPlan`,
:func:`~tiledmm.dask.cluster_model.evaluate`, :func:`k_bounds`) is
:mod:`tiledmm.dask.cluster_model`; :mod:`tiledmm.dask.cluster_text` has the plan in words and
the CLI helpers.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from .cluster_model import MIN_CHUNK, MODELLED, Cluster, ClusterPlan, evaluate, local_cluster
from .cluster_text import cli_cluster_fields, cli_plan_fields

__all__ = ["cluster_plan", "plan_from_args"]

_GRID = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)  # chunks along M and N
_GRID_K = (1, 2, 4, 8, 16, 32)


def _sizes(d: int, grid: tuple[int, ...] = _GRID) -> list[int]:
    """Candidate chunk sizes along a dimension of length d (distinct, >= MIN_CHUNK)."""
    if d <= MIN_CHUNK:
        return [max(d, 1)]
    out = {math.ceil(d / g) for g in grid if math.ceil(d / g) >= MIN_CHUNK}
    return sorted(out, reverse=True)


def cluster_plan(
    m: int,
    n: int,
    k: int,
    *,
    dtype: str = "float32",
    batch: int = 1,
    cluster: Cluster | None = None,
    backend: str = "auto",
    kernel: str = "auto",
    chunks: tuple[int, int, int] | None = None,
    placement: str | None = None,
    **cluster_fields: Any,
) -> ClusterPlan:
    """Propose chunks (cm, cn, ck) and a placement for ``C = A @ B`` on a cluster, or evaluate
    given ``chunks`` (in ``placement``, default: the cluster's ``inputs``).

    ``cluster_fields`` (workers=, worker_memory=, link_bandwidth=, host_bandwidth=, inputs=, ...)
    override ``cluster``'s (default: :func:`local_cluster`). With ``inputs="any"`` the planner
    weighs "workers" (chunks over the worker link) against "staged" (each worker streams its
    blocks' panels from a shared-memory file over its host link; 2-D products). The proposal is
    the lowest predicted time among chunkings that fit; within 3% of it, the one with the fewest
    tasks. ``plan.alternatives`` holds others the model ranks (finer, coarser, whole-K row
    panels, and the best of the other placement).
    """
    import numpy as np

    dt = np.dtype(dtype)
    cl = cluster or (Cluster(name="as described") if cluster_fields else local_cluster())
    if cluster_fields:
        cl = replace(cl, **{k_: v for k_, v in cluster_fields.items() if v is not None})
    if backend == "auto" or kernel == "auto":  # resolve once, so every chunk uses one backend
        from ..core.dispatch import plan

        probe = plan(1024, 1024, 1024, dtype=_modelled(dt), backend=backend, kernel=kernel)
        backend = probe.backend if backend == "auto" else backend
    m, n, k, batch = int(m), int(n), int(k), max(1, int(batch))

    def ev(ch, place=None) -> ClusterPlan:
        return evaluate(m, n, k, batch, dt.name, dt.itemsize, ch, cl, backend, kernel, place)

    if chunks is not None:
        return ev(chunks, placement)
    if placement is not None:
        places = (placement,)
    elif cl.inputs == "any":
        places = ("workers", "staged") if batch == 1 else ("workers",)
    else:
        places = (cl.inputs,)
    best_of = {pl: _choose(ev, m, n, k, pl) for pl in places}
    best = min(best_of.values(), key=lambda p: p.predicted_seconds)
    cm, cn, ck = best.chunks
    pl = best.placement
    alts = [
        ("finer (half chunks)", ev((max(1, cm // 2), max(1, cn // 2), ck), pl)),
        ("coarser (double chunks)", ev((2 * cm, 2 * cn, ck), pl)),
        ("row panels (whole K and N)", ev((math.ceil(m / max(1, cl.workers)), n, k), pl)),
    ]
    alts += [(f"best with placement {q}", p) for q, p in best_of.items() if q != pl]
    seen = {(best.chunks, pl)}
    kept = []
    for name, p in alts:
        if (p.chunks, p.placement) not in seen:
            seen.add((p.chunks, p.placement))
            kept.append((name, p))
    return replace(best, alternatives=tuple(kept))


def _choose(ev, m: int, n: int, k: int, place: str) -> ClusterPlan:
    cands = [ev((a, b, c), place) for a in _sizes(m) for b in _sizes(n) for c in _sizes(k, _GRID_K)]
    fitting = [p for p in cands if p.fits] or sorted(cands, key=lambda p: p.working_bytes)[:1]
    fastest = min(p.predicted_seconds for p in fitting)
    return min(
        (p for p in fitting if p.predicted_seconds <= 1.03 * fastest),
        key=lambda p: (p.tasks, p.predicted_seconds),
    )


def _modelled(dt) -> str:
    return dt.name if dt.name in ("float32", "float64") else MODELLED.get(dt.itemsize, "float32")


def plan_from_args(args: Any) -> ClusterPlan:
    """``tiledmm plan M N K --workers W [--worker-memory 80GiB] [--link-bandwidth 25GB/s]``
    (the defaults: :func:`tiledmm.dask.cluster_text.cli_cluster_fields`)."""
    base = local_cluster()
    cl = Cluster(**cli_cluster_fields(args, base.worker_memory, base.name))
    return cluster_plan(args.m, args.n, args.k, cluster=cl, **cli_plan_fields(args))
