"""The per-level traffic model: bytes and time at every memory level for one plan.

Pure Python (no device access). :func:`levels` takes a plan's geometry and a DeviceSpec and
returns one :class:`Level` per level of the hierarchy, nearest the arithmetic units first; the
planner's prediction is the slowest of them (docs/model.md explains every term).

GPU: counts per warp, as the hardware counts them. Shared-memory loads become wavefronts by a
bank simulation of one warp's addresses; global loads become L1 wavefronts and 32-byte
sectors; L2 and DRAM bytes follow the block tiles, the block raster order and the L2 size;
FMAs and the other instructions go to the FMA pipes and the warp schedulers. SM-side levels
are timed per SM (the SM with the most blocks finishes last: wave quantization), device-side
levels (L2, DRAM) over the whole device. A latency level (Little's law: loads in flight per
warp x resident warps) bounds kernels that cannot keep enough loads in flight.

CPU: the same levels for a core's caches: SIMD FMA pipes, L1 loads, L2/L3/DRAM lines.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .device import DeviceSpec
from .dram import L2_SHARED_FRACTION as L2_SHARED_FRACTION  # re-exported: these lived here
from .dram import LOCKSTEP_BLOCKS as LOCKSTEP_BLOCKS
from .dram import dram_key, dram_traffic, dram_traffic_cached, miss_fraction

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

WARP = 32
SECTOR = 32  # bytes per L1/L2 sector
WAVEFRONT = 128  # bytes one shared-memory / L1 wavefront delivers (32 banks x 4 B)
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
        }


def engine_of(backend: str, options: dict) -> str:
    """Which kernel source runs a plan: "numba" (numba-cuda's generated kernels), "numba-cpu",
    "numpy" (the reference backend), else "gemm-c" (the shared CUDA/OpenCL C sources)."""
    if "engine" in options:
        return str(options["engine"])
    if backend.startswith("numba"):
        return "numba-cpu" if backend == "numba-cpu" else "numba"
    return {"numpy": "numpy"}.get(backend, "gemm-c")


# --------------------------------------------------------------------------- shared memory

#: Threads whose addresses one shared-memory request serves, by access width in bytes.
#: 4-byte loads: the whole warp; 8- and 16-byte loads: each half-warp separately. Fits the
#: Nsight counts of GPU.md (tiled 16x16: 1.5 wavefronts per FMA; register 128x128: 12 per
#: k step) and the float64 kernels' rates (docs/model.md).
SHARED_REQUEST_THREADS = {4: 32, 8: 16, 16: 16}


def shared_wavefronts(addresses: list[int], width: int) -> int:
    """Wavefronts for one warp-wide shared load: ``addresses`` (bytes, one per thread) of
    ``width`` bytes each. Per request, the bank (4-byte word mod 32) holding the most distinct
    words decides; broadcasts (same word) are free."""
    group = SHARED_REQUEST_THREADS.get(width, 16)
    total = 0
    for g in range(0, len(addresses), group):
        banks: dict[int, set[int]] = {}
        for a in addresses[g : g + group]:
            for w in range(a // 4, (a + width + 3) // 4):
                banks.setdefault(w % 32, set()).add(w)
        total += max((len(v) for v in banks.values()), default=1)
    return total


def _warp_loads(loads: list[tuple[list[int], int]]) -> tuple[int, int]:
    """(instructions, wavefronts) for a list of (addresses, width) loads of one warp."""
    return len(loads), sum(shared_wavefronts(a, w) for a, w in loads)


# --------------------------------------------------------------------------- GPU families


@dataclass
class _Counts:
    """Per-block counts (warp instructions, wavefronts, bytes) and per-block loop structure."""

    fma: float = 0.0  # warp FMA instructions
    instr: float = 0.0  # all warp instructions
    shared_wf: float = 0.0
    l1_wf: float = 0.0
    l1_bytes: float = 0.0
    trips: float = 0.0  # dependent global round trips per warp (latency level)
    mlp: float = 1.0  # independent loads in flight per warp per trip


def _naive(g: dict, s: int, engine: str) -> _Counts:
    bn, k, warps = g["bn"], g["kp"], g["warps"]
    cols = min(bn, WARP)
    rows = max(1, WARP // bn)
    # A: one address per row of the warp (broadcast); B: the warp's columns, coalesced.
    a_wf, b_wf = rows, max(1, math.ceil(cols * s / WAVEFRONT))
    a_bytes, b_bytes = rows * SECTOR, math.ceil(cols * s / SECTOR) * SECTOR
    # nvcc unrolls the K loop 4x (loads of 4 steps in flight, 3 address/loop instructions
    # per 4 FMAs); Numba's u32 loop with wrap-around stays rolled (6 per FMA, 1 in flight).
    overhead, mlp = (0.75, 4.0) if engine == "gemm-c" else (6.0, 1.0)
    per = warps * k
    return _Counts(
        fma=per,
        instr=per * (3 + overhead),
        l1_wf=per * (a_wf + b_wf),
        l1_bytes=per * (a_bytes + b_bytes),
        trips=k,
        mlp=mlp,
    )


def _tiled_loads(g: dict, s: int, engine: str, opts: dict) -> tuple[int, int, int]:
    """(FMAs per k group, LDS instructions, wavefronts) for one warp of the tiled family."""
    bn, bk = g["bn"], g["bk"]
    vec = 16 // s if (opts.get("vec_smem") or engine == "numba") and bk % (16 // s) == 0 else 1
    a_ld = bk if vec > 1 else bk + 1  # gemm-c pads scalar A rows by one word
    tid = range(WARP)
    a = [((t // bn) * a_ld) * s for t in tid]
    b = [(t % bn) * s for t in tid]
    loads = [(a, vec * s)] + [([x + kk * bn * s for x in b], s) for kk in range(vec)]
    n, wf = _warp_loads(loads)
    return vec, n, wf


def _register_loads(g: dict, s: int, engine: str, opts: dict) -> tuple[int, int, int]:
    """(FMAs per k step, LDS instructions, wavefronts) for one warp of the register family."""
    tm, tn, bm, bn = g["tm"], g["tn"], g["bm"], g["bn"]
    wm, wn = bm // tm, bn // tn  # threads along M and N
    tid = range(WARP)
    loads = []
    if engine == "numba":  # strided micro-tile: scalar loads at ty + i*wm and tx + j*wn
        loads += [([((t // wn) + i * wm) * s for t in tid], s) for i in range(tm)]
        loads += [([((t % wn) + j * wn) * s for t in tid], s) for j in range(tn)]
    else:  # gemm-c: VM x VN sub-blocks, 16-byte loads when VM (VN) x s is 16 bytes
        vm, vn = int(opts.get("vm", 1)), int(opts.get("vn", 1))
        for v, count, lanes, pick in (
            (vm, tm // vm, wm, lambda t: t // wn),
            (vn, tn // vn, wn, lambda t: t % wn),
        ):
            for gi in range(count):
                base = [(gi * lanes * v + pick(t) * v) * s for t in tid]
                if v * s == 16:
                    loads.append((base, 16))
                else:
                    loads += [([x + q * s for x in base], s) for q in range(v)]
    n, wf = _warp_loads(loads)
    return tm * tn, n, wf


def _staged(g: dict, s: int, engine: str, opts: dict, kernel: str) -> _Counts:
    bm, bn, bk, kp, warps, threads = g["bm"], g["bn"], g["bk"], g["kp"], g["warps"], g["threads"]
    if kernel == "tiled":  # per group of `vec` k values: one A load, `vec` B loads
        per_group, lds, wf = _tiled_loads(g, s, engine, opts)
        groups = bk // per_group
    else:  # per k: the micro-tile's loads, TM x TN FMAs
        per_group, lds, wf = _register_loads(g, s, engine, opts)
        groups = bk
    steps = kp // bk
    fma = warps * steps * groups * per_group
    # per K step per thread: each staged element costs a global load, a shared store and
    # about two index/guard instructions (vector loads count once); plus two barriers and
    # the loop (8 instructions).
    vw = 16 // s if kernel == "register" and engine == "gemm-c" else 1
    elems = (bm * bk + bk * bn) / threads
    step_instr = elems / vw * 4 + 8
    instr = warps * steps * (groups * (per_group + lds) + step_instr)
    loads_bytes = (bm * bk + bk * bn) * s
    return _Counts(
        fma=fma,
        instr=instr,
        shared_wf=warps * steps * groups * wf,
        l1_wf=steps * loads_bytes / WAVEFRONT,
        l1_bytes=steps * loads_bytes,
        trips=steps if int(opts.get("stages", 1)) < 2 else 1,
        mlp=1.0,
    )


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
    """The levels of a GPU plan (see the module docstring)."""
    counts = _naive(g, s, engine) if kernel == "naive" else _staged(g, s, engine, opts, kernel)
    blocks, sms = g["gx"] * g["gy"], max(1, dev.compute_units)
    on_sm = math.ceil(blocks / sms) if blocks else 0  # blocks on the busiest SM
    used = min(blocks, sms) or 1
    sus = dev.sustained or 1.0

    def per_sm(total: float) -> float:  # an SM's share of a device rate
        return total * sus / sms

    out = []
    flops = 2 * counts.fma * WARP * blocks
    fma_rate = per_sm(dev.fma_peak(dtype)) / (2 * WARP)  # warp FMAs per second per SM
    t_fma = on_sm * counts.fma / fma_rate if fma_rate else 0.0
    pipe = "FP64" if s == 8 else "FP32"
    out.append(
        Level(
            "registers",
            3 * s * flops / 2,
            1.5 * s * dev.fma_peak(dtype) * sus,
            t_fma,
            "3 operands per FMA, fed at the FMA rate",
        )
    )
    out.append(
        Level(
            "compute",
            flops,
            dev.fma_peak(dtype) * sus * used / sms,
            t_fma,
            f"{pipe} FMA pipes",
            "FLOP",
        )
    )
    if dev.issue_rate:
        issue = per_sm(dev.issue_rate)
        out.append(
            Level(
                "issue",
                counts.instr * blocks,
                issue * used,
                on_sm * counts.instr / issue,
                f"{counts.instr / counts.fma:.2f} warp instructions per FMA",
                "instr",
            )
        )
    shared_bw = dev.level("shared memory")
    if kernel != "naive" and shared_bw:
        wf_rate = per_sm(shared_bw) / WAVEFRONT
        out.append(
            Level(
                "shared memory",
                counts.shared_wf * blocks * WAVEFRONT,
                shared_bw * sus * used / sms,
                on_sm * counts.shared_wf / wf_rate,
                f"{counts.shared_wf / counts.fma:.3g} wavefronts per warp FMA",
            )
        )
    l1_bw = dev.level("L1")
    if l1_bw:
        wf_rate = per_sm(l1_bw) / WAVEFRONT
        out.append(
            Level(
                "L1",
                counts.l1_bytes * blocks,
                l1_bw * sus * used / sms,
                on_sm * counts.l1_wf / wf_rate,
                f"{counts.l1_wf / counts.fma:.3g} wavefronts per warp FMA",
            )
        )
    if kernel == "naive":
        l2 = blocks * g["kp"] * (g["bm"] + g["bn"]) * s  # a sector of A serves 32/s steps
    else:
        l2 = blocks * counts.l1_bytes
    out.append(Level("L2", l2, dev.level("L2"), l2 / dev.level("L2") if dev.level("L2") else 0))
    group = int(opts.get("group_m", 1)) if kernel == "register" and engine == "gemm-c" else 1
    read, written = dram_traffic_cached(dram_key(g), s, dev, blocks_per_unit * sms, group)
    dram = read + written
    out.append(
        Level(
            "DRAM",
            dram,
            dev.level("DRAM"),
            dram / dev.level("DRAM"),
            f"{read / 1e6:.4g} MB read, {written / 1e6:.4g} MB written",
            parts=(("read", read), ("written", written)),
        )
    )
    if dev.latency and counts.trips:
        resident = min(on_sm, blocks_per_unit) or 1
        lat = dev.latency / sus
        t = math.ceil(on_sm / resident) * counts.trips * lat / counts.mlp
        warps_res = resident * g["warps"]
        out.append(
            Level(
                "latency",
                counts.trips * blocks,
                0.0,
                t,
                f"{counts.mlp:g} load(s) in flight per warp, {warps_res} warps per SM",
                "trips",
            )
        )
    return out


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
        # SIMD vector of outputs, served by the smallest cache that holds the column panel
        # at its aliased capacity, else DRAM at one line per latency per core (a stride of
        # a page or more defeats the prefetcher).
        vecs = m * math.ceil(n / lanes) * k
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
