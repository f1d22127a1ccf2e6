"""tiledmm on Dask: a dask array out, whose chunk products run through ``tiledmm.matmul``.

    import dask.array as da, tiledmm.dask
    c = tiledmm.dask.matmul(a, b)          # a, b: dask arrays (NumPy or CuPy chunks), or one of
    c.compute()                            # them a plain array (wrapped with from_array)

Each product of an A chunk and a B chunk is one task calling ``tiledmm.matmul`` on the worker,
so NumPy chunks run on the host backends and CuPy chunks on the CUDA backends (``backend=`` and
``kernel=`` are passed through). The K chunks of one output chunk are summed by a tree
reduction (dask's ``reduction``, ``split_every``), never concatenated, as ``dask.array.matmul``
does. NumPy semantics: 1-D promotion, batch broadcasting, numpy's result dtype (delegated
dtypes too: each chunk product is numpy's, the K sum is in the result dtype), numpy's own error
messages (the call is replayed on data-free stand-ins). The chunking comes from
:mod:`tiledmm.dask.cluster`; rechunking is explicit (``rechunk=``) and reported.

Dask is imported only here, never by ``import tiledmm``; :func:`is_dask_array` does not import
it unless the object's type comes from a ``dask`` module.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import replace
from typing import Any

import numpy as np

from ..core import engine
from ..core.semantics import check_like_numpy
from .cluster import cluster_plan
from .cluster_model import Cluster, ClusterPlan, local_cluster
from .host import RUN_LOCK, host_source, staged_matmul

__all__ = ["is_dask_array", "matmul", "explain", "current_cluster", "RechunkWarning"]

_GAIN = 1.25  # rechunk="auto" rechunks when the plan predicts at least this speed-up


class RechunkWarning(UserWarning):
    """The operands were rechunked (what from, what to, and the predicted gain)."""


def is_dask_array(x: Any) -> bool:
    """True for a ``dask.array.Array``; imports dask only if ``x``'s type comes from dask."""
    if not type(x).__module__.startswith("dask"):
        return False
    import dask.array as da

    return isinstance(x, da.Array)


def _chunk_product(a: Any, b: Any, backend: str, kernel: str) -> Any:
    """On the worker: one (A chunk, B chunk) product through tiledmm's engine (chunks are the
    backends' own arrays: NumPy or CuPy), K axis kept (size 1)."""
    with RUN_LOCK:
        c = engine.matmul(a, b, backend=backend, kernel=kernel)
    return c[..., None, :, :]


def _ksum(x: Any, axis: Any = None, keepdims: bool = False, **_: Any) -> Any:
    """The K reduction in the result dtype (logical or for bool, as matmul's sum is)."""
    if x.dtype == bool:
        return x.any(axis=axis, keepdims=keepdims)
    return x.sum(axis=axis, keepdims=keepdims, dtype=x.dtype)


def _numpy_check(a: Any, b: Any, out: Any = None) -> None:
    """numpy's own error for this call, if it would raise (unknown chunk sizes first)."""
    for x in (a, b):
        if any(isinstance(d, float) and math.isnan(d) for d in x.shape):
            raise ValueError(
                f"matmul: operand shape {x.shape} has unknown (NaN) sizes; call "
                "compute_chunk_sizes() on it first"
            )
    check_like_numpy(a, b, out)


#: Seconds :func:`current_cluster` waits for a worker where the client has none at the moment.
WORKER_WAIT_S = 10.0


def current_cluster(client: Any = None, *, device_memory: float | None = None) -> Cluster:
    """The cluster dask will run on: the active ``distributed`` client's workers, or this
    process's threads (dask's default scheduler). ``device_memory`` replaces each worker's
    memory limit (GPU workers: the device's memory)."""
    if client is None:
        try:
            from distributed import get_client

            client = get_client()
        except (ImportError, ValueError):
            client = None
    if client is None:
        cl = local_cluster()
        return cl if device_memory is None else replace(cl, worker_memory=float(device_memory))
    workers = client.scheduler_info().get("workers", {})
    if not workers:  # starting, or a nanny restarting one: dask itself would wait for one
        try:
            client.wait_for_workers(1, timeout=WORKER_WAIT_S)
        except Exception:  # noqa: BLE001 - distributed's timeout error, or an async client
            pass
        workers = client.scheduler_info().get("workers", {})
    if not workers:
        raise RuntimeError(
            f"the dask client has no workers (waited {WORKER_WAIT_S:g} s): start some, or "
            "pass cluster=tiledmm.dask.Cluster(...) to plan without asking the client"
        )
    mems = [w.get("memory_limit") or 0 for w in workers.values()]
    mem = device_memory or min(mems) or local_cluster().worker_memory
    return Cluster(
        workers=len(workers),
        worker_memory=float(mem),
        link_bandwidth=1e9,  # TCP between processes; pass link_bandwidth= for a measured one
        host_bandwidth=10e9,  # host memory -> a worker (a PCIe-class guess; pass a measured one)
        threads_per_worker=max(1, min(w.get("nthreads", 1) for w in workers.values())),
        task_overhead=1e-3,
        call_overhead=0.01,  # graph submission and the scheduler's round trip, per call
        inputs="workers",
        name=f"distributed, {len(workers)} worker processes",
    )


def _promote(a: Any, b: Any):
    """1-D promotion and batch dims aligned (prepended), as numpy's matmul does."""
    a1, b1 = a.ndim == 1, b.ndim == 1
    if a1:
        a = a[None, :]
    if b1:
        b = b[:, None]
    if a.ndim < b.ndim:
        a = a[(None,) * (b.ndim - a.ndim)]
    elif b.ndim < a.ndim:
        b = b[(None,) * (a.ndim - b.ndim)]
    return a, b, a1, b1


def _as_dask(x: Any, like: Any, axis_k: int) -> Any:
    """Wrap a non-dask operand, chunked to match ``like`` along K (``axis_k`` of ``x``)."""
    import dask.array as da

    if not (hasattr(x, "shape") and hasattr(x, "dtype")):
        x = np.asarray(x)
    if x.ndim == 0 or like.ndim == 0:  # no K to match: numpy's error follows (_numpy_check)
        return da.from_array(x)
    chunks: list[Any] = list(x.shape)
    kax = axis_k % x.ndim
    like_k = like.chunks[-1] if axis_k == -2 else like.chunks[-2 if like.ndim > 1 else -1]
    if x.ndim and sum(like_k) == x.shape[kax]:
        chunks[kax] = like_k
    return da.from_array(x, chunks=tuple(chunks), asarray=False)


def _max(chunks: tuple[int, ...]) -> int:
    return max(chunks) if chunks else 0


def explain(
    a: Any,
    b: Any,
    *,
    rechunk: Any = "auto",
    cluster: Cluster | None = None,
    backend: str = "auto",
    kernel: str = "auto",
) -> ClusterPlan:
    """The plan :func:`matmul` would follow for these operands (``plan.rechunked`` says what it
    rechunks and why; ``None`` when the operands keep their chunks)."""
    staged = _staged_plan(a, b, rechunk, cluster, backend, kernel)
    return staged or _prepare(a, b, rechunk, cluster, backend, kernel)[2]


def _staged_plan(a, b, rechunk, cluster, backend, kernel, out=None) -> ClusterPlan | None:
    """The "staged" plan when both operands come from :func:`from_host` (2-D, one dtype, K > 0)
    and the cluster does not insist on inputs on the workers; else None."""
    sa, sb = host_source(a), host_source(b)
    if not (sa and sb) or len(sa.shape) != 2 or len(sb.shape) != 2 or sa.gpu != sb.gpu:
        return None
    if sa.dtype != sb.dtype or (cluster is not None and cluster.inputs in ("workers", "host")):
        return None
    _numpy_check(a, b, out)
    (m, k), n = sa.shape, sb.shape[1]
    if k == 0 or m == 0 or n == 0:
        return None
    cl = replace(cluster or current_cluster(), inputs="staged")
    kw = dict(dtype=sa.dtype, cluster=cl, backend=backend, kernel=kernel, placement="staged")
    if rechunk in (False, None, "never"):
        return cluster_plan(m, n, k, chunks=(_max(a.chunks[0]), _max(b.chunks[1]),
                                             _max(a.chunks[1])), **kw)  # fmt: skip
    if isinstance(rechunk, tuple | list):
        return cluster_plan(m, n, k, chunks=tuple(int(x) for x in rechunk), **kw)
    if rechunk in ("auto", True, "always"):
        return cluster_plan(m, n, k, **kw)
    raise ValueError(f"rechunk must be 'auto', True, False or (cm, cn, ck), not {rechunk!r}")


def _prepare(a, b, rechunk, cluster, backend, kernel, out=None):
    import dask.array as da

    da_a, da_b = is_dask_array(a), is_dask_array(b)
    if not (da_a or da_b):
        a, b = (
            da.asarray(np.asarray(a) if not hasattr(a, "ndim") else a),
            da.asarray(np.asarray(b) if not hasattr(b, "ndim") else b),
        )
    elif not da_a:
        a = _as_dask(a, b, -1)
    elif not da_b:
        b = _as_dask(b, a, -2 if np.ndim(b) > 1 else -1)
    _numpy_check(a, b, out)
    a, b, a1, b1 = _promote(a, b)
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    batch_shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    batch = int(np.prod(batch_shape)) if batch_shape else 1
    rdt = np.matmul.resolve_dtypes((a.dtype, b.dtype, None))[2]
    cl = cluster or current_cluster()
    plan = cluster_plan(m, n, k, dtype=rdt.name, batch=batch, cluster=cl, backend=backend,
                        kernel=kernel)  # fmt: skip
    now = (_max(a.chunks[-2]), _max(b.chunks[-1]), _max(a.chunks[-1]))
    current = cluster_plan(m, n, k, dtype=rdt.name, batch=batch, cluster=cl, backend=backend,
                           kernel=kernel, chunks=now)  # fmt: skip
    k_match = a.chunks[-1] == b.chunks[-2]
    if rechunk is True or rechunk == "always":
        target, reason = plan.chunks, "rechunk=True"
    elif isinstance(rechunk, tuple | list):
        target, reason = tuple(int(x) for x in rechunk), "rechunk=(cm, cn, ck) given"
        plan = cluster_plan(m, n, k, dtype=rdt.name, batch=batch, cluster=cl, backend=backend,
                            kernel=kernel, chunks=target)  # fmt: skip
    elif rechunk in (False, None, "never"):
        target, reason, plan = None, "", current
    elif rechunk == "auto":
        gain = current.predicted_seconds / plan.predicted_seconds if plan.predicted_seconds else 1
        if not current.fits and plan.fits:
            target, reason = plan.chunks, "the operands' chunks do not fit a worker's memory"
        elif gain >= _GAIN:
            target, reason = plan.chunks, f"the plan predicts {gain:.2f}x faster"
        else:
            target, reason, plan = None, "", current
    else:
        raise ValueError(f"rechunk must be 'auto', True, False or (cm, cn, ck), not {rechunk!r}")
    if target is None and not k_match:  # blockwise needs one K chunking: B follows A
        target, reason = None, "A and B had different K chunks: B follows A's"
        old_b = b.chunks[-2:]
        b = b.rechunk({b.ndim - 2: a.chunks[-1]})
        plan = replace(plan, rechunked={"reason": reason, "b": (old_b, b.chunks[-2:])})
    elif target is not None:
        cm, cn, ck = target
        old = (a.chunks[-2:], b.chunks[-2:])
        a = a.rechunk({a.ndim - 2: cm, a.ndim - 1: ck})
        b = b.rechunk({b.ndim - 2: ck, b.ndim - 1: cn})
        if old != (a.chunks[-2:], b.chunks[-2:]):
            info = {
                "reason": reason,
                "from": now,
                "to": tuple(target),
                "predicted_seconds": (current.predicted_seconds, plan.predicted_seconds),
            }
            plan = replace(plan, rechunked=info)
    return a, b, plan, (a1, b1, rdt)


def matmul(
    a: Any,
    b: Any,
    /,
    *,
    backend: str = "auto",
    kernel: str = "auto",
    out: Any = None,
    rechunk: Any = "auto",
    cluster: Cluster | None = None,
    split_every: int | None = None,
):
    """``numpy.matmul`` on dask arrays, chunk products through ``tiledmm.matmul``.

    Args:
        a, b: dask arrays (NumPy or CuPy chunks); one of them may be any array-like (wrapped
            with ``da.from_array``, chunked like the dask operand along K).
        backend, kernel: passed to ``tiledmm.matmul`` for every chunk product on the worker.
        out: ``None`` (return a lazy dask array) or a writeable NumPy/CuPy array of the result's
            shape: the product is computed now and stored into it, and ``out`` returned, as
            numpy does. A dask array is refused (dask arrays are immutable: use the result).
        rechunk: ``"auto"`` (rechunk to the plan's chunks when they fit and the current ones do
            not, or the model predicts >= 1.25x; a :class:`RechunkWarning` reports it), ``True``
            (always to the plan), ``False`` (keep the chunks; only B's K chunks follow A's when
            they differ), or ``(cm, cn, ck)``.
        cluster: a :class:`Cluster` description (default: :func:`current_cluster`). When both
            operands come from :func:`from_host` the product takes the "staged" placement
            (each worker streams its blocks' panels from shared memory; the chunks are the
            planner's unless ``rechunk`` says otherwise) unless ``cluster.inputs`` is "workers"
            or "host".
        split_every: fan-in of the K-sum tree (dask's default when ``None``).
    """
    import dask.array as da

    if out is not None and is_dask_array(out):
        raise TypeError(
            "matmul: out= cannot be a dask array (dask arrays are immutable); use the returned "
            "array, or pass a NumPy/CuPy array to compute into"
        )
    staged = _staged_plan(a, b, rechunk, cluster, backend, kernel, out)
    if staged is not None:  # both from the host's shared memory: each worker streams its panels
        res = staged_matmul(a, b, staged.chunks, backend, kernel)
        return res if out is None else _store(out, res)
    a, b, plan, (a1, b1, rdt) = _prepare(a, b, rechunk, cluster, backend, kernel, out)
    if plan.rechunked and "from" in plan.rechunked:
        r = plan.rechunked
        warnings.warn(
            f"tiledmm.dask.matmul rechunked the operands from chunks {r['from']} to {r['to']} "
            f"(cm, cn, ck): {r['reason']} (predicted {r['predicted_seconds'][0]:.3g} s -> "
            f"{r['predicted_seconds'][1]:.3g} s); pass rechunk=False to keep them",
            RechunkWarning,
            stacklevel=2,
        )
    nd = a.ndim
    out_ind = tuple(range(nd + 1))  # batch..., K, M, N: K (index nd-1 in A) kept, size 1
    k_ind, m_ind, n_ind = nd - 1, nd - 2, nd
    lhs = tuple(range(nd - 2)) + (m_ind, k_ind)
    rhs = tuple(range(nd - 2)) + (k_ind, n_ind)
    out_ind = tuple(range(nd - 2)) + (k_ind, m_ind, n_ind)
    meta = a._meta if type(a._meta).__module__.startswith("cupy") else b._meta
    prod = da.blockwise(
        _chunk_product, out_ind, a, lhs, b, rhs,
        adjust_chunks={k_ind: 1}, dtype=rdt, concatenate=False,
        meta=meta.astype(rdt).reshape((0,) * (nd + 1)) if hasattr(meta, "astype") else None,
        backend=backend, kernel=kernel,
    )  # fmt: skip
    res = da.reduction(
        prod, _ksum, _ksum, combine=_ksum, axis=nd - 2, dtype=rdt,
        split_every=split_every, concatenate=True, name="tiledmm-ksum",
    )  # fmt: skip
    if a1:
        res = res[..., 0, :]
    if b1:
        res = res[..., 0]
    if out is None:
        return res
    return _store(out, res)


def _store(out: Any, res: Any) -> Any:
    val = res.compute()
    if isinstance(out, np.ndarray):
        np.copyto(out, val.get() if hasattr(val, "get") else val, casting="same_kind")
    else:  # a device array
        out[...] = val
    return out
