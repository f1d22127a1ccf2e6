"""The per-level traffic model: bytes and time at every memory level for one plan.

Pure Python (no device access). :func:`levels` takes a plan's geometry and a DeviceSpec and
returns one :class:`Level` per level of the hierarchy, nearest the arithmetic units first; the
planner's prediction is the slowest of them (docs/model.md explains every term).

GPU: counts per warp, as the hardware counts them (``tiledmm.warps``: what each family's warp
issues per block). Shared-memory loads become wavefronts by a bank simulation of one warp's
addresses; global loads become L1 wavefronts and 32-byte sectors; L2 and DRAM bytes follow
the block tiles, the block raster order and the L2 size (``tiledmm.dram``); FMAs and the other
instructions go to the FMA pipes and the warp schedulers. SM-side levels
are timed per SM (the SM with the most blocks finishes last: wave quantization), device-side
levels (L2, DRAM) over the whole device. A latency level (Little's law: loads in flight per
warp x resident warps) bounds kernels that cannot keep enough loads in flight. Phases no
level overlaps (a lockstep wave's prologue and epilogue, the split-K reduction pass) add to
every level's time (``Level.serial``). Batched launches, split-K and the gemv path are
counted from their own launch shapes.

CPU: the same levels for a core's caches: SIMD FMA pipes, L1 loads, L2/L3/DRAM lines.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from .device import DeviceSpec
from .dram import L2_SHARED_FRACTION as L2_SHARED_FRACTION  # re-exported: these lived here
from .dram import LOCKSTEP_BLOCKS as LOCKSTEP_BLOCKS
from .dram import dram_key, dram_traffic, dram_traffic_cached, miss_fraction
from .warps import (
    FILL_ACCESSES,
    SECTOR,
    WARP,
    WAVEFRONT,
    c_store_sectors,
    gemv_counts,
    gemv_shape,
    naive_counts,
    shared_wavefronts,
    staged_counts,
)
from .warps import SHARED_REQUEST_THREADS as SHARED_REQUEST_THREADS  # re-exported

__all__ = [
    "Level",
    "gpu_levels",
    "cpu_levels",
    "engine_of",
    "shared_wavefronts",
    "dram_traffic",
    "miss_fraction",
    "SHARED_REQUEST_THREADS",
]

LINE = 64  # CPU cache line
#: Clocks per multiply-add of the NumPy backend's emulated families on one core (measured
#: per-operation costs of the NumPy calls they make; docs/model.md).
NUMPY_CLOCKS = {"naive": 3.2, "tiled": 1.0}
#: Clocks per multiply-add of PoCL's tiled kernel on one core: its barrier regions run as
#: loops over the work-items, and each item's K loop (two local loads, the FMA, addressing
#: and loop: ~4 instructions at 4 per clock) runs unvectorized (docs/model.md).
POCL_ITEM_CLOCKS = 1.0
#: Cache misses one core keeps in flight (L1 fill buffers: 16 on Intel cores since Golden
#: Cove, 22-24 miss buffers on Zen 3; docs/model.md).
CPU_MISSES_IN_FLIGHT = 16
#: Fraction of the FMA peak PoCL's barrier-free register micro-kernel reaches (measured on
#: the EPYC and the Xeon: 0.40-0.64; its generated code is not read off; docs/model.md).
POCL_REGISTER_EFFICIENCY = 0.5
#: Clocks per element Numba's tile packing costs on one core (a guarded scalar copy per
#: element: compare, select, strided load, store; docs/model.md).
NUMBA_PACK_CLOCKS = 4.0


@dataclass(frozen=True)
class Level:
    """One level's traffic: ``amount`` crosses it (bytes; FLOPs for "compute"; instructions
    for "issue"; dependent round trips for "latency") at ``ceiling`` per second."""

    name: str
    amount: float
    ceiling: float
    seconds: float
    note: str = ""
    unit: str = "B"
    parts: tuple[tuple[str, float], ...] = ()  # the amount's parts (DRAM: read, written)
    serial: float = 0.0  # seconds of ``seconds`` spent in phases no level overlaps

    def intensity(self, flops: float) -> float:
        """FLOPs per unit crossing this level (FLOP/B for memory levels)."""
        return flops / self.amount if self.amount else math.inf

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "amount": self.amount,
            "unit": self.unit,
            "ceiling": self.ceiling,
            "seconds": self.seconds,
            "note": self.note,
            **({"parts": dict(self.parts)} if self.parts else {}),
            **({"serial": self.serial} if self.serial else {}),
        }


def engine_of(backend: str, options: dict) -> str:
    """Which kernel source runs a plan: "numba" (numba-cuda's generated kernels), "numba-cpu",
    "numpy" (the reference backend), else "gemm-c" (the shared CUDA/OpenCL C sources)."""
    if "engine" in options:
        return str(options["engine"])
    if backend.startswith("numba"):
        return "numba-cpu" if backend == "numba-cpu" else "numba"
    return {"numpy": "numpy"}.get(backend, "gemm-c")


def gpu_levels(
    kernel: str,
    g: dict,
    s: int,
    dev: DeviceSpec,
    engine: str,
    opts: dict,
    blocks_per_unit: int,
    dtype: str,
) -> list[Level]:
    """The levels of a GPU plan (see the module docstring). ``g["batch"]`` (or
    ``opts["batch"]``) matrices in one launch, ``opts["split_k"]`` K slices plus a reduction
    pass, ``opts["gemv"]`` the naive family's gemv path."""
    batch = max(1, int(g.get("batch", opts.get("batch", 1)) or 1))
    split = max(1, int(opts.get("split_k", 1)))
    if kernel == "naive" and opts.get("gemv"):
        g = gemv_shape(g, opts, s)
        blocks_per_unit = _gemv_resident(g, s, dev)
        counts = gemv_counts(g, s, engine)
    else:
        if split > 1:  # K_SLICE in gemm_common.h: a multiple of BK per slice
            g = dict(g, kp=math.ceil(math.ceil(g["k"] / split) / g["bk"]) * g["bk"])
        counts = (naive_counts(g, s, engine) if kernel == "naive"
                  else staged_counts(g, s, engine, opts, kernel))  # fmt: skip
    blocks, sms = g["gx"] * g["gy"] * batch * split, max(1, dev.compute_units)
    on_sm = math.ceil(blocks / sms) if blocks else 0  # blocks on the busiest SM
    used = min(blocks, sms) or 1
    resident = min(on_sm, blocks_per_unit) or 1
    rounds = math.ceil(on_sm / resident)  # waves on the busiest SM

    def per_sm(name: str, total: float) -> float:  # an SM's share of a device rate, loaded
        return dev.clocked(name, total) / sms

    out = []
    flops = 2 * counts.fma * WARP * blocks
    fma_rate = per_sm("compute", dev.fma_peak(dtype)) / (2 * WARP)  # warp FMAs/s per SM
    t_fma = on_sm * counts.fma / fma_rate if fma_rate else 0.0
    pipe = "FP64" if s == 8 else "FP32"
    fma_peak = dev.clocked("compute", dev.fma_peak(dtype))
    out.append(Level("registers", 3 * s * flops / 2, 1.5 * s * fma_peak, t_fma,
                     "3 operands per FMA, fed at the FMA rate"))  # fmt: skip
    out.append(Level("compute", flops, fma_peak * used / sms, t_fma, f"{pipe} FMA pipes", "FLOP"))
    if dev.issue_rate:
        issue = per_sm("issue", dev.issue_rate)
        per_fma = counts.instr / counts.fma
        out.append(Level("issue", counts.instr * blocks, issue * used,
                         on_sm * counts.instr / issue,
                         f"{per_fma:.2f} warp instructions per FMA", "instr"))  # fmt: skip
    shared_bw = dev.level("shared memory")
    if kernel != "naive" and shared_bw:
        # one data pipe (the SRAM shared memory and L1 share, 128 B per clock) carries the
        # inner loop's shared loads, the staging's shared stores and the staged global loads'
        # lines: written into the SRAM when they return from L2, read out to the registers
        # (docs/model.md: what the shared probe's 32.7 TB/s delivers)
        wf_rate = per_sm("shared memory", shared_bw) / WAVEFRONT
        fills = FILL_ACCESSES * counts.l1_wf if counts.store_wf else 0.0
        pipe_wf = counts.shared_wf + counts.store_wf + fills
        out.append(Level("shared memory", pipe_wf * blocks * WAVEFRONT,
                         dev.clocked("shared memory", shared_bw) * used / sms,
                         on_sm * pipe_wf / wf_rate,
                         f"{pipe_wf / counts.fma:.3g} wavefronts per warp FMA: "
                         f"{counts.shared_wf / counts.fma:.3g} loads, "
                         f"{(counts.store_wf + fills) / counts.fma:.3g} staging",
                         parts=(("loads", counts.shared_wf * blocks * WAVEFRONT),
                                ("stores", counts.store_wf * blocks * WAVEFRONT),
                                ("global fills", fills * blocks * WAVEFRONT))),
                   )  # fmt: skip
    # C stores (each block its tile; split-K: its partial tile): whole 32-byte sectors per
    # store instruction, through L1 to the L2
    c_sectors = c_store_sectors(g, s, engine, opts, kernel)
    c_store = c_sectors * SECTOR * blocks
    l1_bw = dev.level("L1")
    if l1_bw:
        wf_rate = per_sm("L1", l1_bw) / WAVEFRONT
        l1_wf = counts.l1_wf + c_sectors * SECTOR / WAVEFRONT
        out.append(Level("L1", counts.l1_bytes * blocks + c_store,
                         dev.clocked("L1", l1_bw) * used / sms, on_sm * l1_wf / wf_rate,
                         f"{counts.l1_wf / counts.fma:.3g} load wavefronts per warp FMA",
                         parts=(("loads", counts.l1_bytes * blocks), ("C stores", c_store))),
                   )  # fmt: skip
    if kernel == "naive" and "ks" not in g:
        l2 = blocks * g["kp"] * (g["bm"] + g["bn"]) * s  # a sector of A serves 32/s steps
    else:
        l2 = blocks * counts.l1_bytes
    l2_bw = dev.level("L2")
    out.append(Level("L2", l2 + c_store, l2_bw, (l2 + c_store) / l2_bw if l2_bw else 0.0,
                     parts=(("loads", l2), ("C stores", c_store))))  # fmt: skip
    read, written, reduce_bytes = _dram(kernel, g, s, dev, engine, opts, blocks_per_unit,
                                        batch, split)  # fmt: skip
    dram = read + written
    out.append(Level("DRAM", dram, dev.level("DRAM"), dram / dev.level("DRAM"),
                     f"{read / 1e6:.4g} MB read, {written / 1e6:.4g} MB written",
                     parts=(("read", read), ("written", written))))  # fmt: skip
    if dev.latency and counts.trips:
        t = rounds * counts.trips * dev.latency / (dev.sustained or 1.0) / counts.mlp
        warps_res = resident * g["warps"]
        out.append(Level("latency", counts.trips * blocks, 0.0, t,
                         f"{counts.mlp:g} load(s) in flight per warp, {warps_res} warps per SM",
                         "trips"))  # fmt: skip
    serial, why = 0.0, []
    if kernel != "naive" and blocks_per_unit <= LOCKSTEP_BLOCKS and l2_bw:
        # lockstep waves: every block of a wave waits for its first tiles (a round trip,
        # then the wave's first stage through the L2) and stores its C tile in one epilogue;
        # neither overlaps another block's main loop (docs/model.md)
        wave = min(blocks, blocks_per_unit * sms)
        first = wave * (g["bm"] + g["bn"]) * g["bk"] * s
        c_tiles = wave * c_sectors * SECTOR  # the epilogue's store sectors (above)
        phase = dev.latency / (dev.sustained or 1.0) if dev.latency else 0.0
        phase += (first + c_tiles) / l2_bw
        serial += rounds * phase
        why.append(f"{rounds} wave prologue/epilogue(s) {phase * 1e6:.3g} us")
    if reduce_bytes:
        # split-K: the reduction kernel reads the S partial products and writes C, from the
        # L2 when the workspace fits its shared capacity, else from DRAM; a second launch
        ws_fits = reduce_bytes * split / (split + 1) <= dev.cache("L2") * L2_SHARED_FRACTION
        bw = l2_bw if ws_fits and l2_bw else dev.level("DRAM")
        serial += reduce_bytes / bw + dev.launch_overhead
        why.append(f"split-K reduction {reduce_bytes / 1e6:.4g} MB")
    if serial:
        note = "+ " + ", ".join(why) + " (serial)"
        out = [replace(lv, seconds=lv.seconds + serial, serial=serial,
                       note=f"{lv.note}; {note}" if lv.note else note) for lv in out]  # fmt: skip
    return out


def _gemv_resident(g: dict, s: int, dev: DeviceSpec) -> int:
    """Resident gemv groups per SM: threads, block slots and the partial-sum array (local
    memory: BM x BN x KS reals for A @ x, BM x BN x KS x GV for x @ B)."""
    shared = g["bm"] * g["bn"] * g["ks"] * (1 if g.get("t") else g.get("gv", 1)) * s
    limits = (dev.max_threads_per_unit // max(1, g["warps"] * WARP), dev.max_blocks_per_unit,
              dev.shared_per_unit // shared if shared else 1 << 30)  # fmt: skip
    return max(1, min(limits))


def _dram(kernel: str, g: dict, s: int, dev: DeviceSpec, engine: str, opts: dict,
          blocks_per_unit: int, batch: int, split: int) -> tuple[float, float, float]:  # fmt: skip
    """(DRAM read, DRAM written, split-K reduction bytes) for the whole launch."""
    m, n, k = g["m"], g["n"], g["k"]
    if "ks" in g:  # gemv: the long operand streamed once, the short one and C besides
        return float((m * k + k * n) * s * batch), float(m * n * s * batch), 0.0
    group = int(opts.get("group_m", 1)) if kernel == "register" and engine == "gemm-c" else 1
    resident = blocks_per_unit * max(1, dev.compute_units)
    # panels over the whole K (dram_key has no kp): the K slices read disjoint parts of them
    read, written = dram_traffic_cached(dram_key(g), s, dev, resident, group)
    read, written = read * batch, written * batch
    if split == 1:
        return read, written, 0.0
    workspace = split * m * n * s * batch
    if workspace > dev.cache("L2") * L2_SHARED_FRACTION:  # partial products leave the L2
        written, read = written + workspace, read + workspace
    return read, written, workspace + m * n * s * batch


# --------------------------------------------------------------------------- CPU families


def cpu_levels(
    kernel: str, g: dict, s: int, dev: DeviceSpec, engine: str, opts: dict, dtype: str
) -> list[Level]:
    """The levels of a CPU plan: SIMD FMA pipes, L1 loads, L2/L3/DRAM lines."""
    m, n, k = g["m"], g["n"], g["k"]
    flops = 2.0 * g["mp"] * g["np"] * g["kp"]
    lanes = max(1, dev.simd_bytes // s)
    peak = dev.fma_peak(dtype)
    out = []
    if engine == "numpy" and kernel != "register":
        # the interpreted emulation, on one core: naive multiplies a strided (transposed)
        # view by broadcasting, then sums; tiled runs einsum's compiled loop (no BLAS)
        clocks = NUMPY_CLOCKS[kernel]
        clock = dev.issue_rate / 4 / max(1, dev.compute_units)
        t = flops / 2 * clocks / clock if clock else 0.0
        return [
            Level(
                "interpreter",
                flops,
                2 * clock / clocks,
                t,
                f"NumPy, one core, {clocks:g} clocks per multiply-add",
                "FLOP",
            )
        ]
    if kernel == "naive":
        # one output per work-item; B column read with stride N*s: a line per k per
        # output (each item walks its whole column before the next item starts, so the
        # line is fetched again per item: the latency rule's per-element misses at 1024^3,
        # the L2's line rate at 512^3 and 1000x3000x777; docs/model.md), served by the
        # smallest cache that holds the column panel at its aliased capacity, else DRAM at
        # one line per latency per core (a stride of a page or more defeats the prefetcher).
        vecs = m * n * k
        panel = k * LINE  # the B lines one column walk keeps live (a SIMD vector or 1 item)
        stride = n * s
        level = _holding_level(dev, panel, stride)
        cores = max(1, dev.compute_units)
        if level in ("L3", "DRAM") and dev.latency:
            # past the aliased L1 and L2 every B element access misses (a line is evicted
            # before the next column uses it); the core keeps CPU_MISSES_IN_FLIGHT of them
            trips = m * n * k
            t = trips * dev.latency / (cores * CPU_MISSES_IN_FLIGHT)
            out.append(Level("latency", trips, trips / t, t,
                             f"every B element a miss, {CPU_MISSES_IN_FLIGHT} in flight per core",
                             "trips"))  # fmt: skip
        bytes_ = vecs * LINE
        bw = dev.level(level)
        out.append(Level(level, bytes_, bw, bytes_ / bw if bw else 0.0, "B column lines"))
        out.append(
            Level(
                "compute",
                flops,
                peak / lanes,
                flops / (peak / lanes),
                "scalar dependent FMA chain per output",
                "FLOP",
            )
        )
        return out
    # tiled / register: FMAs on SIMD lanes; loads per FMA from L1; panels from L2; A and B
    # re-read from the level that holds a block's panels.
    bm, bn, bk = g["bm"], g["bn"], g["bk"]
    tm, tn = g["tm"], g["tn"]
    cores = max(1, dev.compute_units)
    clock = dev.issue_rate / 4 / cores  # cpu_levels' issue rate: 4 instructions per clock
    if engine == "gemm-c" and kernel == "tiled" and clock:
        t = flops / 2 * POCL_ITEM_CLOCKS / clock / cores
        out.append(Level("issue", flops, flops / t, t,
                         f"work-item loops, {POCL_ITEM_CLOCKS:g} clocks per multiply-add",
                         "FLOP"))  # fmt: skip
    if engine == "gemm-c" and kernel == "register":
        # PoCL's micro-kernel runs at a measured fraction of the FMA peak (docs/model.md)
        t = flops / (peak * POCL_REGISTER_EFFICIENCY)
        out.append(Level("compute", flops, flops / t, t,
                         f"PoCL micro-kernel at {POCL_REGISTER_EFFICIENCY:g} of the FMA peak",
                         "FLOP"))  # fmt: skip
    if engine == "numba-cpu" and kernel == "register" and clock:
        # fastmath off: multiply and add stay two instructions (half the FMA peak); the
        # block packs its A and B tiles (guarded scalar copies) before each K step
        packed = g["gx"] * g["gy"] * math.ceil(g["kp"] / bk) * (bm + bn) * bk
        t = 2 * flops / peak + packed * NUMBA_PACK_CLOCKS / clock / cores
        out.append(Level("compute", flops, flops / t, t,
                         f"unfused mul+add; packing at {NUMBA_PACK_CLOCKS:g} clocks/element",
                         "FLOP"))  # fmt: skip
    if kernel == "register":
        loads_per_fma = (tm + tn / lanes) / (tm * tn / lanes)
        simd = True
    else:
        loads_per_fma = 2.0 / lanes if engine == "gemm-c" else 2.0
        simd = engine == "gemm-c"
    fma_vec = flops / 2 / (lanes if simd else 1)
    t_fma = fma_vec * 2 * lanes / peak if simd else flops / (peak / lanes)
    if not (kernel == "register" and engine in ("numba-cpu", "gemm-c")):  # their own, above
        out.append(
            Level(
                "compute",
                flops,
                peak if simd else peak / lanes,
                t_fma,
                "SIMD FMA pipes" if simd else "scalar FMAs",
                "FLOP",
            )
        )
    l1 = fma_vec * loads_per_fma * (dev.simd_bytes if simd else s)
    out.append(Level("L1", l1, dev.level("L1"), l1 / dev.level("L1") if dev.level("L1") else 0))
    panel_bytes = s * g["kp"] * (bm + bn) * g["mp"] * g["np"] / (bm * bn)
    inner = "L2" if (bm * bk + bk * bn) * s <= dev.cache("L2") else "L3"
    bw = dev.level(inner)
    out.append(Level(inner, panel_bytes, bw, panel_bytes / bw if bw else 0.0, "block panels"))
    dram = (m * k + k * n + m * n) * s
    if (k * n) * s > dev.cache("L3"):
        dram += panel_bytes
    out.append(Level("DRAM", dram, dev.level("DRAM"), dram / dev.level("DRAM")))
    return out


def _holding_level(dev: DeviceSpec, panel: int, stride: int, ways: int = 8) -> str:
    """The smallest cache that holds ``panel`` bytes walked with ``stride``: a stride that is
    a multiple of lines maps onto sets / gcd(stride in lines, sets) sets only."""
    for name in ("L1", "L2", "L3"):
        size = dev.cache(name)
        if not size:
            continue
        sets = max(1, size // (ways * LINE))
        step = stride // LINE if stride % LINE == 0 else 1
        usable = size // math.gcd(step, sets) if step else size
        if panel <= usable:
            return name
    return "DRAM"
