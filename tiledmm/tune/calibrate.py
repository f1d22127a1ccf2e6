"""``tiledmm calibrate``: measure a device's ceilings and a backend's per-call host cost, and
cache them for the planner (first-use calibration, ``tiledmm.tune.first_calibration``, runs
the same measurements, bounded).

The host cost is :func:`tiledmm.tune.host_cost.measure_host_cost` of the backend asked for.
Peak FLOP/s per dtype is the best median rate of the vendor GEMM (``vendor_matmul`` of
``backend.vendor_backend()``) over a few sizes large enough to saturate the device; memory
bandwidth is a large device-to-device copy, counted as read + write bytes over the median
time. Both are timed with ``backend.timings`` (device events on GPU backends). The record
goes to :func:`tiledmm.device.calibration.save_calibration` under the device's name, where
``DeviceSpec.with_calibration`` (and so every plan) picks it up.
"""

from __future__ import annotations

import datetime as _dt
import os
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ..core.backend import Backend
from ..device.calibration import calibration_path, save_calibration
from .host_cost import measure_host_cost
from .loop_probe import measure_loop_costs

__all__ = [
    "calibrate",
    "measure",
    "measure_peak",
    "measure_bandwidth",
    "measure_cpu_levels",
    "measure_gpu_levels",
    "measure_fma_accumulators",
    "probe_runs",
    "stream_layout",
    "writable_cache",
]

# Sizes (square N) per device class; the best median over them is the peak.
_SIZES = {
    ("cpu", True): (512, 1024),
    ("cpu", False): (1024, 2048, 3072),
    ("gpu", True): (2048, 4096),
    ("gpu", False): (4096, 8192),
}
# Bytes per buffer for the copy: well beyond the last-level cache (CPU L3, GPU L2).
_COPY_BYTES = {
    ("cpu", True): 64 << 20,
    ("cpu", False): 256 << 20,
    ("gpu", True): 256 << 20,
    ("gpu", False): 1 << 30,
}


def _repeats(quick: bool) -> tuple[int, int]:
    return (3, 1) if quick else (7, 2)


def _late(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() >= deadline


def measure_peak(be: Backend, dtype: str, sizes: tuple[int, ...], quick: bool = False,
                 deadline: float | None = None) -> dict:  # fmt: skip
    """{N: FLOP/s} of the vendor GEMM at each size (median of ``repeat`` timed calls); sizes
    not begun by ``deadline`` (``time.monotonic``) are left out, the first always runs."""
    repeat, warmup = _repeats(quick)
    rng = np.random.default_rng(0)
    rates = {}
    for n in sizes:
        if rates and _late(deadline):
            break
        host = (rng.random((n, n)) * 2 - 1).astype(dtype)
        a, b = be.asarray(host, np.dtype(dtype)), be.asarray(host.T.copy(), np.dtype(dtype))
        times = be.timings(lambda a=a, b=b: be.vendor_matmul(a, b), repeat=repeat, warmup=warmup)
        rates[n] = 2 * n**3 / statistics.median(times)
        del a, b
    return rates


def _copy_fn(src: Any, dst: Any):
    """NumPy copies in place; CuPy-style arrays by a raw device-to-device memcpy (their
    ``copy()`` runs an elementwise kernel that reached only 40% of the H200's copy rate);
    numba-cuda's by ``copy_to_device``; other device arrays by their own ``copy()`` (the
    fastest path measured for PyOpenCL)."""
    if isinstance(src, np.ndarray) and isinstance(dst, np.ndarray):
        return lambda: np.copyto(dst, src)
    if hasattr(getattr(dst, "data", None), "copy_from_device_async"):
        return lambda: dst.data.copy_from_device_async(src.data, src.nbytes)
    if hasattr(dst, "copy_to_device"):  # numba-cuda's DeviceNDArray (it has no copy())
        return lambda: dst.copy_to_device(src)
    return lambda: src.copy()


def measure_bandwidth(be: Backend, nbytes: int, quick: bool = False) -> float:
    """Bytes/s of a device-to-device copy of ``nbytes`` (read + write counted)."""
    repeat, warmup = _repeats(quick)
    n = nbytes // 4
    host = np.arange(n, dtype=np.float32)
    src = be.asarray(host, np.dtype("float32"))
    dst = be.asarray(np.ones(n, np.float32), np.dtype("float32"))
    if dst is src:  # a backend whose asarray does not copy
        dst = be.empty((n,), np.dtype("float32"))
    times = be.timings(_copy_fn(src, dst), repeat=repeat, warmup=warmup)
    return 2 * n * 4 / statistics.median(times)


#: Cache levels private to a core (x86: L1 and L2): a one-thread copy measures one core's
#: share, and the planner's ceilings are whole-device rates.
PRIVATE_LEVELS = ("L1", "L2")


def measure_cpu_levels(
    caches: dict[str, int], quick: bool = False, cores: int = 1, dram: float = 0.0
) -> dict[str, float]:
    """Bytes/s of a NumPy copy (read + write) resident in each cache level: buffers of a
    quarter of L1, L2 and L3 (two buffers fit with room), best of several passes. The copy
    runs on one core: private levels are scaled by ``cores``. A level measured no faster
    than the one behind it (``dram`` for L3) is dropped and the planner keeps its estimate:
    an L1-sized copy measures the ~1 us NumPy call, and an L3 the OS reports larger than
    the socket's (a VM's) measures DRAM."""
    import time

    out = {}
    for name in ("L1", "L2", "L3"):
        size = caches.get(name, 0) // 4
        if size < 4096:
            continue
        n = size // 8  # two float32 buffers of size/2 bytes each
        src, dst = np.ones(n, np.float32), np.empty(n, np.float32)
        reps = max(1, int((2e6 if quick else 2e7) // size))
        best = float("inf")
        for _ in range(3 if quick else 7):
            t0 = time.perf_counter()
            for _ in range(reps):
                np.copyto(dst, src)
            best = min(best, (time.perf_counter() - t0) / reps)
        out[name] = 2 * n * 4 / best * (cores if name in PRIVATE_LEVELS else 1)
    if dram:
        out["DRAM"] = dram
    behind = 0.0  # the nearest kept level behind (farther from the core)
    for name in ("DRAM", "L3", "L2", "L1"):
        if name in out and out[name] <= behind:
            del out[name]  # compared with what was kept: a dropped L2 leaves L1 to the L3
        elif name in out:
            behind = out[name]
    out.pop("DRAM", None)
    return out


#: Work-items per probe group, groups per compute unit (8 x 256: an H200 SM's 2048 threads),
#: and 16-byte loads in flight per item per step (``PROBE_UNROLL`` in probes.cl).
PROBE_THREADS, PROBE_GROUPS_PER_UNIT, PROBE_UNROLL = 256, 8, 4
#: Streaming-probe buffers as multiples of the L2: DRAM far beyond it, L2 well inside the
#: capacity that data read by every SM sees (about half the L2: docs/model.md), far above L1.
STREAM_L2_MULTIPLE = {"DRAM": (4.0, 2.0), "L2": (0.25, 0.25)}  # (full run, --quick)
#: Passes over each buffer (DRAM: each pass from DRAM; L2: enough to run ~0.3 ms on an H200).
STREAM_REPS = {"DRAM": 8, "L2": 256}
SHARED_REPS = FMA_REPS = 4096


def stream_layout(nbytes: int, groups: int, threads: int = PROBE_THREADS,
                  unroll: int = PROBE_UNROLL) -> tuple[int, int]:  # fmt: skip
    """(vectors per chunk, chunks) of a streaming buffer of about ``nbytes``: one chunk per
    group, each a whole number of the unrolled step (threads x unroll 16-byte vectors)."""
    step = threads * unroll
    per = max(1, round(nbytes / 16 / groups / step))
    return per * step, groups


def probe_runs(be: Backend, quick: bool = False) -> Iterator[tuple[str, str, Any, float]]:
    """The level probes on ``be``, compiled by its optional ``compile_probe`` (the built-in
    backends compile ``kernels/probes.cl``), one at a time: ``(table, name, run, amount)`` where
    ``run()`` launches the probe once and ``amount`` is what one launch moves: bytes read for
    ``("levels", "DRAM" | "L2" | "shared memory")``, FLOPs for ``("fma_peaks", dtype)``. DRAM and
    L2: 16-byte streaming reads of a buffer beyond / inside the L2, rotated over the groups so L1
    serves nothing; shared memory: 16-byte conflict-free reads; FMA: 8 chains per item.
    Nothing when the backend has no probe hook. ``benches/probes/ncu_counters.py --probes`` profiles
    the same runs."""
    dev = be.device()
    threads, groups = PROBE_THREADS, max(1, dev.compute_units) * PROBE_GROUPS_PER_UNIT
    f32 = np.dtype("float32")
    defs = {"REAL_BYTES": 4, "THREADS": threads, "PROBE_UNROLL": PROBE_UNROLL}
    stream = be.compile_probe("stream_probe", defs)
    if stream is None:
        return
    sink = be.asarray(np.zeros(groups * threads, np.float32), f32)
    l2 = dev.cache("L2") or 32 << 20
    for level, (full, short) in STREAM_L2_MULTIPLE.items():
        chunk, chunks = stream_layout(int(l2 * (short if quick else full)), groups)
        reps = STREAM_REPS[level] // (4 if quick else 1) or 1
        src = be.asarray(np.ones(chunk * chunks * 4, np.float32), f32)
        args = (np.int32(chunk), np.int32(chunks), np.int32(reps), src, sink)
        yield "levels", level, lambda a=args: stream(groups, a), reps * chunks * chunk * 16
        del src, args
    shared = be.compile_probe("shared_probe", defs)
    items = groups * threads
    yield ("levels", "shared memory", lambda: shared(groups, (np.int32(SHARED_REPS), sink)),
           items * SHARED_REPS * PROBE_UNROLL * 16)  # fmt: skip
    for dtype, rb in (("float32", 4), ("float64", 8)):
        if dtype not in be.dtypes:
            continue
        fma = be.compile_probe("fma_probe", defs | {"REAL_BYTES": rb})
        dt = np.dtype(dtype)
        args = (np.int32(FMA_REPS), dt.type(0.999), be.asarray(np.zeros(items, dt), dt))
        yield "fma_peaks", dtype, lambda f=fma, a=args: f(groups, a), items * FMA_REPS * 16


#: How long the host's BLAS threads are left alone before a one-core probe (OpenBLAS's
#: default THREAD_TIMEOUT: 2^28 cycles of spinning, about 0.1 s, before a worker sleeps)
BLAS_PARK_SECONDS = 0.3
#: Vector FMA chains per item the accumulator probe tries, and the share of the best rate
#: that counts as the pipes filled (a shared machine's rates scatter by 10-40%: the smallest
#: count at 0.9 of the best, not the best itself).
ACC_CHAINS, ACC_FULL = (2, 4, 6, 8, 10, 12, 16), 0.9


def measure_fma_accumulators(
    be: Backend, quick: bool = False, deadline: float | None = None
) -> tuple[int, float] | None:
    """The independent vector FMA chains that keep a CPU core's FMA pipes full (FMA latency x
    pipes, as the backend's compiler schedules them): ``acc_probe`` of ``kernels/probes.cl`` at
    each of :data:`ACC_CHAINS` through ``be.compile_probe``, the smallest count within
    :data:`ACC_FULL` of the best rate, and that best rate (float32 FLOP/s on every core: the
    FMA pipes' peak as this compiler reaches it). The register micro-kernel's model uses both
    (``tiledmm.model.cpu``). None where the backend has no probe hook or no CPU vectors, or
    the deadline came first. On the EPYC through PoCL: 8 chains 0.80-0.87 of the best, 10 at it
    (benches/results/logs/epyc-pocl-fma-accumulators-s23.txt)."""
    dev = be.device()
    lanes = max(1, dev.simd_bytes // 4)
    items = max(1, dev.compute_units) * 16
    reps = (1 << 20) if quick else (1 << 22)
    sink = be.asarray(np.zeros(items * lanes, np.float32), np.dtype("float32"))
    rates: dict[int, float] = {}
    for chains in ACC_CHAINS:
        if _late(deadline):
            return None
        defs = {"REAL_BYTES": 4, "THREADS": 1, "CPU_VEC": lanes, "PROBE_ACC_CHAINS": chains}
        try:
            run = be.compile_probe("acc_probe", defs)
        except Exception:  # noqa: BLE001 - a compiler without vectors: no measurement
            return None
        if run is None:
            return None
        steps = max(1, reps // chains)
        args = (np.int32(steps), np.float32(0.999), sink)
        times = be.timings(lambda f=run, a=args: f(items, a), repeat=5, warmup=1)
        rates[chains] = items * steps * chains * lanes * 2 / min(times)
    best = max(rates.values())
    return min(c for c, r in rates.items() if r >= ACC_FULL * best), best


def measure_gpu_levels(be: Backend, quick: bool = False,
                       deadline: float | None = None) -> dict[str, Any]:  # fmt: skip
    """Per-level ceilings of a GPU: each of :func:`probe_runs` timed (median of device-event
    timings after warm-up), its amount over its time. Returns ``{"levels": {...},
    "fma_peaks": {...}}``, empty when the backend has no probe hook; probes not begun by
    ``deadline`` are left out."""
    repeat, warmup = _repeats(quick)
    out: dict[str, Any] = {}
    for table, name, run, amount in probe_runs(be, quick):
        if _late(deadline):
            break
        t = statistics.median(be.timings(run, repeat=repeat, warmup=warmup))
        out.setdefault(table, {})[name] = amount / t
    if out:
        out.setdefault("fma_peaks", {})
    return out


def writable_cache() -> Path:
    """The calibration file's path, after making sure its folder exists and is writable, so a
    bad ``TILEDMM_CACHE_DIR`` fails before minutes of measuring, not after."""
    path = calibration_path()
    hint = "set TILEDMM_CACHE_DIR to a writable folder"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        why = exc.strerror or str(exc)
        raise OSError(
            f"cannot create the calibration cache folder {path.parent} ({why}); {hint}"
        ) from None
    if path.is_dir() or not os.access(path.parent, os.W_OK):
        what = "is a folder" if path.is_dir() else "is in a folder this user cannot write"
        raise OSError(f"cannot write the calibration cache: {path} {what}; {hint}")
    return path


def calibrate(
    backend: str | Backend = "numpy", quick: bool = False
) -> Iterator[tuple[str, dict, Path]]:
    """Measure and cache the ceilings of ``backend``'s device and ``backend``'s host cost;
    yields (device, record, path). See :func:`measure`."""
    writable_cache()
    if isinstance(backend, str):
        from ..core.registry import get_backend

        backend = get_backend(backend)
    name, record = measure(backend, quick)
    yield name, record, save_calibration(name, record)


def measure(backend: Backend, quick: bool = False, deadline: float | None = None,
            ceilings: bool = True, dtype: str = "float32",
            family: str = "auto") -> tuple[str, dict]:  # fmt: skip
    """(device name, calibration record): ``backend``'s per-call host cost (``host_cost``,
    measured with ``dtype`` on the ``family`` of kernels) and, with ``ceilings``, its device's
    ceilings.

    The ceilings are measured by ``backend.vendor_backend()``, the backend whose vendor GEMM
    the benchmarks compare against: cuBLAS through CuPy for OpenCL on an NVIDIA GPU, the host
    (numpy) for OpenCL on a CPU, whose plans read the host's ceilings; the record is that
    device's. A step not begun by ``deadline`` (``time.monotonic``; first use's budget) is left
    out and ``cut`` names it: without a peak and the copy bandwidth the record holds the host
    cost alone (the ceilings stay estimated).
    """
    asked, backend = backend, backend.vendor_backend()
    dev = backend.device()
    record: dict[str, Any] = {
        "host_cost": {asked.name: measure_host_cost(asked, quick, dtype, deadline, family)},
        "date": _dt.date.today().isoformat(),
        "backend": asked.name,
        "quick": bool(quick),
    }
    if not ceilings:
        return dev.name, record
    cls = (dev.kind if dev.kind in ("cpu", "gpu") else "cpu", bool(quick))
    dtypes = [d for d in ("float32", "float64") if d in backend.dtypes]
    if dev.kind == "gpu" and "float16" in backend.mma_dtypes:
        dtypes.append("float16")  # the tensor cores' 16-bit roof (tensorcore.roof)
    samples, peaks, cut = {}, {}, []
    for dt in dtypes:
        if _late(deadline):
            cut.append(f"the {dt} peak")
            continue
        rates = measure_peak(backend, dt, _SIZES[cls], quick, deadline)
        samples[dt] = {str(n): r for n, r in rates.items()}
        peaks[dt] = max(rates.values())
    nbytes = _COPY_BYTES[cls]
    if not peaks:
        record["cut"] = "the ceilings (first use's budget ran out)"
        return dev.name, record
    bw = measure_bandwidth(backend, nbytes, quick)  # short: a peak without it is no record
    repeat, _ = _repeats(quick)
    sizes = "/".join(str(n) for n in _SIZES[cls])
    extra: dict[str, Any] = {}
    if _late(deadline):
        cut.append("the level ceilings")
    elif dev.kind == "gpu":
        extra = measure_gpu_levels(backend, quick, deadline)  # ceilings at the loaded clock
    else:
        # the one-core probes below ran 1.3-2x slow in some runs: the vendor GEMM's BLAS
        # threads spin on the cores after its last call (OpenBLAS: 2^28 cycles, ~0.1 s) and
        # took the probe's core; they park when left alone that long
        time.sleep(BLAS_PARK_SECONDS)
        levels = measure_cpu_levels(dict(dev.caches), quick, dev.compute_units, bw)
        levels["DRAM"] = bw
        extra = {"levels": levels, "fma_peaks": dict(peaks)}
        # the asked backend's own CPU probe (OpenCL: acc_probe; numba-cpu: register_block;
        # a backend without one answers None at once). The loop probe compiles numba-cpu's
        # register kernel (3-6 s on a fresh machine): `tiledmm calibrate` only, never within
        # first use's budget
        loop = measure_loop_costs(asked, quick) if deadline is None else None
        if loop:
            extra["loop_costs"] = {asked.name: loop}
        acc = measure_fma_accumulators(asked, quick, deadline)
        if acc:
            # the pipes' own rate (float32, every core) raises fma_peaks where the vendor
            # GEMM's is lower (one BLAS thread, a reference BLAS): DeviceSpec.with_calibration
            extra["fma_accumulators"], extra["fma_probe"] = acc
    record.update(extra)
    record.update(
        peak_flops=peaks,
        bandwidth=bw,
        method=(
            f"{backend.name} vendor_matmul, best median of {repeat} at N={sizes}; "
            f"copy of {nbytes >> 20} MiB (read+write)"
        ),
        samples=samples,
    )
    if cut:
        record["cut"] = ", ".join(cut) + " (first use's budget ran out)"
    return dev.name, record
