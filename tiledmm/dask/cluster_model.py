"""The cluster planner's model of one chunking: :class:`Cluster` (what the planner knows of the
cluster), :class:`ClusterPlan` (one chunking and its prediction) and :func:`evaluate`, which
predicts one chunking's time and traffic. Pure Python (no dask import); :mod:`tiledmm.dask.cluster`
searches the chunkings with it.

Traffic model (DESIGN.md's block-tile formula, one level up). Output chunks are spread over the
W workers as a pm x pn grid of rectangles (pm * pn = W, the split that moves least); a worker
fetches each A row-panel (cm x K) and B column-panel (K x cn) its rectangle needs once and keeps
it, so the bytes moved over the links are s * K * (M * pn + N * pm) (less the share already on a
worker when the inputs start spread over the workers). Time per worker: its chunk products at the
planner's predicted time (or a measured rate scaled to the chunk's shape), the K partial sums at
device bandwidth, and its link traffic at link bandwidth, overlapped except for the first chunk's
fetch; plus the scheduler's per-task overhead and the call's fixed overhead. The "staged"
placement (inputs in a host shared-memory file) loads each block's panels over the worker's own
host link instead. The result stays on the workers (dask ``persist``): ``result_seconds`` is what
bringing it to the host would add, not part of the prediction.
:mod:`tiledmm.dask.cluster_text` has the plan in words and the CLI helpers.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

__all__ = ["Cluster", "ClusterPlan", "PLACEMENTS", "MODELLED", "MIN_CHUNK", "evaluate",
           "k_bounds", "local_cluster"]  # fmt: skip

MIN_CHUNK = 128  # smaller chunks are all scheduler overhead; never proposed (unless dim < it)
_WORK_FRACTION = 0.5  # a worker's working set (operands + product + partial sum per thread)
_CALL = 3e-4  # seconds a chunk product costs beyond its kernels (the call, a sync)
_RESIDENT_FRACTION = 0.9  # working set + the worker's share of C (fetched panels may spill)


@dataclass(frozen=True)
class Cluster:
    """What the cluster planner needs to know. Sizes in bytes, rates per second."""

    workers: int = 1
    worker_memory: float = 16 * 2**30  # device memory on GPU workers, RAM on CPU workers
    link_bandwidth: float = math.inf  # worker<->worker (dask comms), bytes/s into one worker
    host_bandwidth: float = math.inf  # host memory -> one worker's device (PCIe/NVLink)
    threads_per_worker: int = 1  # chunk products held in memory at once per worker
    task_overhead: float = 1e-4  # scheduler seconds per task (~1 ms on distributed)
    call_overhead: float = 0.0  # seconds per call: graph submission, scheduler round trip
    inputs: str = "host"  # "host" (shipped), "workers" (spread), "staged" (shm file), "any"
    flops_per_worker: float | None = None  # a measured rate overriding the planner's
    name: str = "local threads"

    def __post_init__(self) -> None:
        if int(self.workers) < 1:
            raise ValueError(f"workers must be a positive integer, got {self.workers!r}")
        if not self.worker_memory > 0 or not self.link_bandwidth > 0:
            raise ValueError("worker_memory and link_bandwidth must be positive")
        if not self.host_bandwidth > 0:
            raise ValueError("host_bandwidth must be positive")
        if self.task_overhead < 0 or self.call_overhead < 0:
            raise ValueError("task_overhead and call_overhead must be >= 0")
        if self.inputs not in PLACEMENTS + ("any",):
            raise ValueError(f"inputs must be one of {PLACEMENTS + ('any',)}, not {self.inputs!r}")


PLACEMENTS = ("host", "workers", "staged")
_PLACEMENT_TEXT = {
    "host": "inputs start on the host (client), shipped to the workers over dask's comms",
    "workers": "inputs start on the workers; chunks move between workers over dask's comms",
    "staged": "inputs start on the host, staged by each worker from shared memory over its "
    "host link",
}


def local_cluster() -> Cluster:
    """Dask's default scheduler: threads of this process share memory, so nothing moves."""
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        mem = 16 * 2**30
    return Cluster(workers=1, worker_memory=float(mem), name="local threads (one process)")


@dataclass(frozen=True)
class ClusterPlan:
    """One chunking of one product on one cluster, and what the model predicts for it."""

    m: int
    n: int
    k: int
    batch: int
    dtype: str
    chunks: tuple[int, int, int]  # (cm, cn, ck): A is cm x ck chunks, B ck x cn, C cm x cn
    grid: tuple[int, int, int]  # chunks along M, N, K
    worker_grid: tuple[int, int]  # (pm, pn): how the output blocks split over workers
    tasks: int
    flops: int
    bytes_moved: float  # over the links, all workers together
    intensity: float  # FLOPs per byte moved between workers/host (inf: nothing moves)
    compute_seconds: float  # per worker (the busiest)
    link_seconds: float  # per worker (the busiest)
    overhead_seconds: float
    predicted_seconds: float
    bound: str  # "compute" | "link" | "scheduler"
    working_bytes: int  # per worker, at once
    resident_bytes: int  # per worker, fetched panels + its share of C + working set
    fits: bool
    chunk_rate: float  # FLOP/s of one chunk product on one worker (planner or measured)
    chunk_source: str  # where chunk_rate comes from
    cluster: Cluster
    placement: str = "host"  # where the inputs start and how they reach the workers
    result_seconds: float = 0.0  # C to the host (not in predicted_seconds: C stays, persisted)
    replication: str = ""  # which operand every worker loads whole (if any)
    alternatives: tuple[tuple[str, ClusterPlan], ...] = field(default=(), compare=False)
    rechunked: dict[str, Any] | None = field(default=None, compare=False)

    @property
    def placement_text(self) -> str:
        """The placement in words (where the inputs start, which link carries them)."""
        text = _PLACEMENT_TEXT[self.placement]
        return text + (f"; {self.replication}" if self.replication else "")

    @property
    def predicted_gflops(self) -> float:
        return self.flops / self.predicted_seconds / 1e9 if self.predicted_seconds else 0.0

    def to_dict(self) -> dict:
        """Every field, the cluster and the alternatives as plain data (for JSON)."""
        from .cluster_text import as_dict

        return as_dict(self)

    def __str__(self) -> str:
        from .cluster_text import describe

        return describe(self)


MODELLED = {1: "float16", 2: "float16", 4: "float32", 8: "float64", 16: "float64"}


@lru_cache(maxsize=8192)
def _chunk_seconds(m: int, n: int, k: int, dtype: str, backend: str, kernel: str) -> float:
    """The planner's predicted time for one chunk product on one worker's device."""
    from ..core.dispatch import plan

    return plan(m, n, k, dtype=dtype, backend=backend, kernel=kernel).predicted_seconds


def _device_bandwidth(dtype: str, backend: str, kernel: str) -> float:
    from ..core.dispatch import plan

    return plan(256, 256, 256, dtype=dtype, backend=backend, kernel=kernel).device.bandwidth


def _worker_grid(workers: int, gm: int, gn: int, m: int, n: int) -> tuple[int, int]:
    """The pm x pn split of the output blocks over workers that moves the fewest bytes: pm
    divides the worker count, and neither side has more parts than blocks (an empty side
    counts as one block). Only divisors up to the larger side of the block grid are visited
    (and at most the square root of the worker count): a split with more parts than blocks
    on both sides is the whole grid, one block per worker, which a cluster of at least
    gm x gn workers always has. The search is bounded by the grid, never by the cluster."""
    gm, gn = max(1, gm), max(1, gn)
    workers = max(1, workers)
    pairs = {(gm, gn)} if workers >= gm * gn else set()
    d = 1
    while d <= max(gm, gn) and d * d <= workers:
        if workers % d == 0:
            pairs.update(((d, workers // d), (workers // d, d)))
        d += 1
    options = []
    for pm, pn in pairs:
        pm_, pn_ = min(pm, gm), min(pn, gn)  # no more parts than blocks on a side
        per_worker = math.ceil(gm / pm_) * m / gm + math.ceil(gn / pn_) * n / gn
        options.append((per_worker, -(pm_ * pn_), (pm_, pn_)))  # fewest bytes, most busy
    return min(options)[2]


def evaluate(
    m: int, n: int, k: int, batch: int, dtype: str, itemsize: int, chunks, cluster: Cluster,
    backend: str, kernel: str, placement: str | None = None,
) -> ClusterPlan:  # fmt: skip
    place = placement or ("workers" if cluster.inputs == "any" else cluster.inputs)
    cm, cn, ck = (max(1, int(x)) for x in chunks)
    cm, cn, ck = min(cm, max(m, 1)), min(cn, max(n, 1)), min(ck, max(k, 1))
    gm, gn, gk = math.ceil(m / cm), math.ceil(n / cn), math.ceil(k / ck)
    w, s = cluster.workers, itemsize
    flops = 2 * batch * m * n * k
    # batch entries first go whole to workers; the rest of the workers split each matrix
    per_batch_workers = max(1, w // batch)
    batches_per_worker = math.ceil(batch / w)
    if place == "staged":  # one task per output block; dask spreads the blocks over workers
        busy = max(1, min(w, batch * gm * gn))  # an empty product: one idle task
        pm, pn = (busy, 1) if gn == 1 else (1, busy) if gm == 1 else (0, 0)
        blocks_per_worker = math.ceil(batch * gm * gn / busy)
    else:
        pm, pn = _worker_grid(per_batch_workers, gm, gn, m, n)
        blocks_per_worker = math.ceil(gm / pm) * math.ceil(gn / pn) * batches_per_worker
        busy = min(w, batch * pm * pn)
    modelled = MODELLED.get(s, "float32") if dtype not in ("float32", "float64") else dtype
    chunk_flops = 2 * cm * cn * ck
    if cluster.flops_per_worker:  # measured on the whole product; the planner scales it to
        rate, source = cluster.flops_per_worker, "measured rate"  # the chunk's shape
        try:
            whole = _chunk_seconds(m, n, k, modelled, backend, kernel)
            part = _chunk_seconds(cm, cn, ck, modelled, backend, kernel)
            if whole > 0 and part > 0:
                rate *= min(1.0, (chunk_flops / part) / (2 * m * n * k / whole))
                source = "measured rate, scaled to the chunk's shape by the planner"
        except Exception:  # noqa: BLE001 - no model for this backend here: the rate as measured
            pass
        t_chunk = chunk_flops / rate
    else:
        t_chunk = _chunk_seconds(cm, cn, ck, modelled, backend, kernel)
        rate = chunk_flops / t_chunk if t_chunk else math.inf
        source = f"tiledmm planner, {backend}/{kernel}" + (
            "" if modelled == dtype else f", modelled as {modelled}"
        )
    bounds = k_bounds(k, ck) if place == "staged" else [(0, ck)] * gk  # products per block
    t_sum = 0.0
    if len(bounds) > 1:  # each partial product is read and added once more at device bandwidth
        bw = _device_bandwidth(modelled, backend, kernel)
        t_sum = blocks_per_worker * (len(bounds) - 1) * 3 * cm * cn * s / bw if bw else 0.0
    per_block = (k / ck if place == "staged" else gk) * t_chunk + len(bounds) * _CALL
    t_compute = blocks_per_worker * per_block + t_sum
    threads = max(1, cluster.threads_per_worker)
    if place == "staged":
        # each block streams its A row panel and B column panel over the worker's host link,
        # loading K chunk i+1 while chunk i multiplies (a two-stage pipeline); no reuse between
        # blocks (a panel is loaded by every block using it)
        per_worker_in = blocks_per_worker * s * k * (cm + cn)
        t_link = per_worker_in / cluster.host_bandwidth
        n_tasks = batch * gm * gn
        t_over = n_tasks * cluster.task_overhead + cluster.call_overhead
        pipe = _pipeline(bounds, s * (cm + cn) / cluster.host_bandwidth,
                         (t_compute / blocks_per_worker - len(bounds) * _CALL) / k)  # fmt: skip
        predicted = blocks_per_worker * pipe + t_over
        working = threads * s * (2 * (cm * ck + ck * cn) + 2 * cm * cn)
        replication = (
            "B replicated: every worker loads all of B" if gn == 1 and gm > 1 and w > 1
            else "A replicated: every worker loads all of A" if gm == 1 and gn > 1 and w > 1
            else f"each A row panel is loaded by the {gn} blocks of its row, each B column "
            f"panel by the {gm} of its column" if gm > 1 and gn > 1 else ""
        )  # fmt: skip
    else:
        per_worker_in = s * k * (math.ceil(gm / pm) * cm + math.ceil(gn / pn) * cn)
        per_worker_in *= batches_per_worker
        if place == "workers":
            per_worker_in *= 1 - 1 / w
        if math.isinf(cluster.link_bandwidth):  # threads of one process: nothing moves
            per_worker_in = 0
        t_link = per_worker_in / cluster.link_bandwidth
        n_tasks = batch * (gm * gn * gk + gm * gn * max(0, gk - 1) + gk * (gm + gn))
        t_over = n_tasks * cluster.task_overhead + cluster.call_overhead
        chunk_tasks = max(1, blocks_per_worker * gk)
        t_fill = min(t_compute, t_link) / chunk_tasks
        predicted = max(t_compute, t_link) + t_fill + t_over
        working = threads * s * (cm * ck + ck * cn + 2 * cm * cn)
        replication = (
            "B replicated on every worker (over the worker link)" if pm == w > 1 and gn == 1
            else "A replicated on every worker (over the worker link)" if pn == w > 1 and gm == 1
            else ""
        )  # fmt: skip
    moved = per_worker_in * busy
    bound = max(
        (("compute", t_compute), ("link", t_link), ("scheduler", t_over)), key=lambda x: x[1]
    )[0]
    results = s * blocks_per_worker * cm * cn  # the worker's share of C stays on it
    # to the host: staged, each worker over its own host link; else through dask's comms
    to_host = results / cluster.host_bandwidth if place == "staged" else (
        0.0 if math.isinf(cluster.link_bandwidth) else s * batch * m * n / cluster.link_bandwidth
    )  # fmt: skip
    resident = (0 if place == "staged" else per_worker_in) + results + working
    fits = (
        working <= _WORK_FRACTION * cluster.worker_memory
        and results + working <= _RESIDENT_FRACTION * cluster.worker_memory
    )
    return ClusterPlan(
        m=m, n=n, k=k, batch=batch, dtype=dtype, chunks=(cm, cn, ck), grid=(gm, gn, gk),
        worker_grid=(pm, pn), tasks=n_tasks, flops=flops, bytes_moved=moved,
        intensity=flops / moved if moved else math.inf, compute_seconds=t_compute,
        link_seconds=t_link, overhead_seconds=t_over, predicted_seconds=predicted, bound=bound,
        working_bytes=int(working), resident_bytes=int(resident), fits=fits, chunk_rate=rate,
        chunk_source=source, cluster=cluster, placement=place, replication=replication,
        result_seconds=to_host,
    )  # fmt: skip


def _pipeline(bounds: list[tuple[int, int]], load_per_k: float, compute_per_k: float) -> float:
    """Seconds of a load-ahead pipeline over K chunks: the first load, then per chunk the
    longer of its product (and sum) and the next chunk's load, then the last product."""
    loads = [load_per_k * (b - a) for a, b in bounds]
    work = [compute_per_k * (b - a) + _CALL for a, b in bounds]
    return loads[0] + sum(max(c, nxt) for c, nxt in zip(work, loads[1:] + [0.0], strict=True))


def k_bounds(k: int, ck: int) -> list[tuple[int, int]]:
    """The K chunks a staged block streams: ``ck`` each, led by ck/8, ck/4 and ck/2 when there
    are two full chunks or more and ck/8 >= 128. Each load is then hidden behind the previous
    product (when a product takes at least twice its load), so the pipeline's fill -- the one
    load nothing hides -- is an eighth of a chunk's."""
    ck = max(1, int(ck))
    lead = [ck // d for d in (8, 4, 2)] if ck // 8 >= MIN_CHUNK and k >= 2 * ck else []
    out, k0 = [], 0
    for size in lead:
        out.append((k0, k0 + size))
        k0 += size
    while k0 < k:
        out.append((k0, min(k, k0 + ck)))
        k0 += ck
    return out
