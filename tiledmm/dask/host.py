"""Inputs that start on the host: dask arrays whose chunks the workers load from shared memory.

    a = tiledmm.dask.from_host(a_numpy, chunks=(8192, 8192), gpu=True)   # or a .npy path
    c = tiledmm.dask.matmul(a, tiledmm.dask.from_host(b_numpy, gpu=True))

:func:`from_host` saves the operand once as a ``.npy`` file in shared memory (``/dev/shm``, or
``$TILEDMM_SHM_DIR``, or the temp directory when /dev/shm is too small) and returns a dask array
whose every chunk is a task that maps the file (``np.load(mmap_mode="r")``, once per worker
process) and copies its block out (to the worker's GPU with ``gpu=True``, through a pinned
buffer filled by a few threads and a non-blocking stream). No data is pickled into the graph
and nothing goes through dask's comms: every worker reads the host's memory itself. The host must
be the workers' host (a local cluster); the file stays until :func:`release` or the end of the
process that wrote it.

When both operands of ``tiledmm.dask.matmul`` come from :func:`from_host` (2-D, one dtype) the
product is the "staged" placement of :mod:`tiledmm.dask.cluster`: one task per output block streams
its A row panel and B column panel from the files, K chunk by K chunk, loading chunk k+1 while
chunk k multiplies, and sums on the device; the chunking is the planner's (the files can be read
in any blocks, so choosing it costs nothing).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
import time
import uuid
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from ..core import engine
from .cluster_model import k_bounds

__all__ = [
    "RUN_LOCK", "HostSource", "from_host", "host_source", "mapped", "release", "shared_dir",
    "stage", "staged_matmul", "take_trace",
]  # fmt: skip

_WRITTEN: set[str] = set()
_LOCAL = threading.local()
# One chunk product at a time per worker process: each backend already fills its device, and
# backends keep per-process scratch buffers that threads must not share.
RUN_LOCK = threading.Lock()


@dataclass(frozen=True)
class HostSource:
    """A 2-D operand in a host file every worker can map."""

    path: str
    shape: tuple[int, ...]
    dtype: str
    gpu: bool


def shared_dir(nbytes: int = 0) -> Path:
    """Where operands go: $TILEDMM_SHM_DIR, else /dev/shm if it has room, else the temp dir."""
    env = os.environ.get("TILEDMM_SHM_DIR")
    if env:
        return Path(env)
    shm = Path("/dev/shm")
    try:
        if shm.is_dir() and shutil.disk_usage(shm).free > 1.2 * nbytes + 2**26:
            return shm
    except OSError:
        pass
    return Path(tempfile.gettempdir())


def _cleanup() -> None:
    for p in list(_WRITTEN):
        Path(p).unlink(missing_ok=True)


atexit.register(_cleanup)


def _host_array(x: Any) -> np.ndarray:
    if hasattr(x, "get") and type(x).__module__.startswith("cupy"):
        return x.get()
    return np.asarray(x)


def from_host(
    x: Any, chunks: Any = "auto", *, gpu: bool = False, directory: str | os.PathLike | None = None
):
    """A dask array over ``x`` (an array, saved once to shared memory, or a ``.npy`` path) whose
    chunks the workers load themselves (to their GPU with ``gpu=True``: CuPy chunks)."""
    import dask.array as da

    if isinstance(x, str | os.PathLike):
        path = str(x)
    else:
        arr = _host_array(x)
        d = Path(directory) if directory else shared_dir(arr.nbytes)
        path = str(d / f"tiledmm-{uuid.uuid4().hex}.npy")
        np.save(path, np.ascontiguousarray(arr))
        _WRITTEN.add(path)
    mapped = np.load(path, mmap_mode="r")
    shape, dtype = tuple(mapped.shape), mapped.dtype
    del mapped
    if gpu:
        import cupy

        meta = cupy.empty((0,) * len(shape), dtype)
    else:
        meta = np.empty((0,) * len(shape), dtype)
    res = da.map_blocks(
        _load_block, chunks=da.core.normalize_chunks(chunks, shape, dtype=dtype), dtype=dtype,
        meta=meta, path=path, gpu=bool(gpu), name=f"tiledmm-from-host-{uuid.uuid4().hex[:12]}",
    )  # fmt: skip
    res._tiledmm_host = HostSource(path, shape, dtype.name, bool(gpu))
    return res


def host_source(x: Any) -> HostSource | None:
    """The :class:`HostSource` of an array made by :func:`from_host` (None for any other)."""
    return getattr(x, "_tiledmm_host", None)


def release(x: Any) -> None:
    """Delete the shared-memory file behind a :func:`from_host` array (or a path)."""
    src = host_source(x)
    path = src.path if src else str(x)
    _WRITTEN.discard(path)
    Path(path).unlink(missing_ok=True)


@lru_cache(maxsize=64)
def mapped(path: str) -> np.ndarray:
    """The file mapped once per process (its page tables stay warm between tasks)."""
    return np.load(path, mmap_mode="r")


def _threads() -> int:
    env = os.environ.get("TILEDMM_STAGE_THREADS")
    return max(1, int(env) if env else min(8, (os.cpu_count() or 2) // 2))


@lru_cache(maxsize=1)
def _pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(_threads(), thread_name_prefix="tiledmm-stage")


def _copy(dst: np.ndarray, src: np.ndarray) -> None:
    """dst[...] = src in row bands over a few threads (numpy releases the GIL)."""
    t = _threads()
    if t == 1 or dst.ndim == 0 or dst.shape[0] < 2 * t or dst.nbytes < 2**24:
        np.copyto(dst, src)
        return
    edges = np.linspace(0, dst.shape[0], t + 1).astype(int)
    jobs = [
        _pool().submit(np.copyto, dst[lo:hi], src[lo:hi])
        for lo, hi in zip(edges[:-1], edges[1:], strict=True)
    ]
    for j in jobs:
        j.result()


def stage(view: np.ndarray, gpu: bool, own_stream: bool = True) -> Any:
    """Copy a (mapped) host block out: a NumPy array, or a CuPy array on this worker's GPU.

    GPU: filled into a pinned buffer by a few threads, then copied on this thread's own
    non-blocking stream (so it overlaps kernels on other streams) and synchronized; the device
    block is allocated on that stream's pool arena. Only for blocks whose consumers finish
    with them before they are freed (the staged tasks here): CuPy's pool hands a freed block
    back to the stream it was allocated on, which does not wait for kernels queued on other
    streams. Blocks handed to dask (``own_stream=False``) are allocated and copied on the
    current stream, as the consumers' own arrays are."""
    if not gpu:
        out = np.empty(view.shape, view.dtype)
        _copy(out, view)
        return out
    import cupy
    import cupyx

    host = cupyx.empty_pinned(view.shape, view.dtype)
    _copy(host, view)
    if not own_stream:
        out = cupy.empty(view.shape, view.dtype)
        out.set(host)
        cupy.cuda.get_current_stream().synchronize()  # the pinned buffer is freed on return
        return out
    stream = getattr(_LOCAL, "stream", None)
    if stream is None:
        stream = _LOCAL.stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        out = cupy.empty(view.shape, view.dtype)
        out.set(host, stream=stream)
    stream.synchronize()
    return out


def _load_block(block_info=None, path: str = "", gpu: bool = False):
    """One chunk of a :func:`from_host` array, on the worker."""
    loc = block_info[None]["array-location"]
    return stage(mapped(path)[tuple(slice(lo, hi) for lo, hi in loc)], gpu, own_stream=False)


def _sync(gpu: bool) -> None:
    if gpu:
        import cupy

        cupy.cuda.get_current_stream().synchronize()


@lru_cache(maxsize=1)
def _loader() -> ThreadPoolExecutor:
    """One loader thread per process: its CuPy stream (and that stream's memory-pool arena,
    where the staged blocks live) persists between tasks instead of one per task."""
    return ThreadPoolExecutor(1, thread_name_prefix="tiledmm-load")


_TRACE: deque = deque(maxlen=4096)


def take_trace() -> list[dict]:
    """This process's staged-task records since the last call (``client.run(take_trace)``):
    per output block its start (epoch s), seconds, and the seconds spent loading (loader
    thread), waiting for a load (compute thread), in chunk products and in K sums."""
    out = list(_TRACE)
    _TRACE.clear()
    return out


def _staged_block(
    block_info=None, a: HostSource = None, b: HostSource = None, ck: int = 1,
    backend: str = "auto", kernel: str = "auto",
):  # fmt: skip
    """One output block on the worker: stream its A row panel and B column panel from the files
    K chunk by K chunk (loading k+1 while k multiplies) and sum the products on the device."""
    start, t_start = time.time(), time.perf_counter()
    (r0, r1), (c0, c1) = block_info[None]["array-location"]
    fa, fb, gpu = mapped(a.path), mapped(b.path), a.gpu
    bounds = k_bounds(fa.shape[1], ck)  # led by smaller chunks: a short pipeline fill
    rec = dict(pid=os.getpid(), block=(r0, c0), start=start, chunks=len(bounds), load=0.0,
               wait=0.0, product=0.0, sum=0.0, bytes=0)  # fmt: skip

    def load(kb):
        t0 = time.perf_counter()
        pair = stage(fa[r0:r1, kb[0] : kb[1]], gpu), stage(fb[kb[0] : kb[1], c0:c1], gpu)
        rec["load"] += time.perf_counter() - t0
        rec["bytes"] += pair[0].nbytes + pair[1].nbytes
        return pair

    acc = None
    nxt = _loader().submit(load, bounds[0])
    for i in range(len(bounds)):
        t0 = time.perf_counter()
        x, y = nxt.result()
        t1 = time.perf_counter()
        if i + 1 < len(bounds):
            nxt = _loader().submit(load, bounds[i + 1])
        with RUN_LOCK:
            t2 = time.perf_counter()
            p = engine.matmul(x, y, backend=backend, kernel=kernel)
            _sync(gpu)
            t3 = time.perf_counter()
            if acc is None:
                acc = p
            else:
                acc += p
                _sync(gpu)  # blocks freed below are idle: safe for the loader's stream
            t4 = time.perf_counter()
        rec["wait"] += t1 - t0
        rec["product"] += t3 - t2
        rec["sum"] += t4 - t3
        del x, y, p
    rec["seconds"] = time.perf_counter() - t_start
    _TRACE.append(rec)
    return acc


def staged_matmul(a, b, chunks: tuple[int, int, int], backend: str, kernel: str):
    """The staged product of two :func:`from_host` arrays as a dask array (chunks cm x cn)."""
    import dask.array as da

    sa, sb = host_source(a), host_source(b)
    cm, cn, ck = (max(1, int(c)) for c in chunks)
    m, n = sa.shape[0], sb.shape[1]
    out_chunks = da.core.normalize_chunks((cm, cn), (m, n))
    meta = a._meta.reshape((0, 0)) if hasattr(a._meta, "reshape") else None
    return da.map_blocks(
        _staged_block, chunks=out_chunks, dtype=np.dtype(sa.dtype), meta=meta, a=sa, b=sb,
        ck=ck, backend=backend, kernel=kernel,
        name=f"tiledmm-staged-{uuid.uuid4().hex[:12]}",
    )  # fmt: skip
