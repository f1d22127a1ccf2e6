"""The per-level traffic model: bytes and time at every memory level for one plan.

Pure Python (no device access). :func:`levels` takes a plan's geometry and a DeviceSpec and
returns one :class:`Level` per level of the hierarchy, nearest the arithmetic units first; the
planner's prediction is the slowest of them (docs/model.md explains every term).

GPU: counts per warp, as the hardware counts them (``tiledmm.model.warps``: what each family's warp
issues per block). Shared-memory loads become wavefronts by a bank simulation of one warp's
addresses; global loads become L1 wavefronts and 32-byte sectors; L2 and DRAM bytes follow
the block tiles, the block raster order and the L2 size (``tiledmm.model.dram``); FMAs and the other
instructions go to the FMA pipes and the warp schedulers. SM-side levels
are timed per SM (the SM with the most blocks finishes last: wave quantization), device-side
levels (L2, DRAM) over the whole device. A latency level (Little's law: loads in flight per
warp x resident warps) bounds kernels that cannot keep enough loads in flight. Phases no
level overlaps (a lockstep wave's prologue and epilogue, the split-K reduction pass, the
copies of odd leading dimensions into aligned rows) add to every level's time
(``Level.serial``). Batched launches, split-K and the gemv path are counted from their own
launch shapes.

CPU: the same levels for a core's caches (SIMD FMA pipes, L1 loads, L2/L3/DRAM lines) in
``tiledmm.model.cpu`` (:func:`~tiledmm.model.cpu.cpu_levels`); :class:`~tiledmm.model.levels.Level`
is the one level's record.
"""

from __future__ import annotations

import math
from dataclasses import replace

from ..device.nvidia import SCHEDULERS_PER_SM
from ..device.spec import DeviceSpec
from .dram import (
    L2_SHARED_FRACTION,
    LOCKSTEP_BLOCKS,
    dram_key,
    dram_traffic_cached,
)
from .levels import Level
from .warps import (
    FILL_ACCESSES,
    SECTOR,
    WARP,
    WAVEFRONT,
    c_l2_sectors,
    c_store_sectors,
    gemv_counts,
    gemv_shape,
    naive_counts,
    staged_counts,
)

__all__ = ["gpu_levels", "engine_of"]


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
    copies: tuple[float, int] = (0.0, 0)
    if kernel == "naive" and opts.get("gemv"):
        g = gemv_shape(g, opts, s)
        blocks_per_unit = _gemv_resident(g, s, dev)
        counts = gemv_counts(g, s, engine)
    else:
        if split > 1:  # K_SLICE in gemm_common.h: a multiple of BK per slice
            g = dict(g, kp=math.ceil(math.ceil(g["k"] / split) / g["bk"]) * g["bk"])
        copies, opts = _alignment(kernel, g, s, dev, engine, opts, dtype)
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
    # a warp issues on one of the SM's schedulers (SCHEDULERS_PER_SM, one instruction per clock
    # each, with its share of the FMA lanes): the scheduler holding the most warps finishes
    # last, so an SM of fewer warps than schedulers runs at that fraction of its rates
    sched_warps = _scheduler_warps(on_sm, resident, g["warps"])
    share = sched_warps / max(1, g["warps"])  # blocks' worth of work on the busiest scheduler
    flops = 2 * counts.fma * WARP * blocks
    fma_rate = per_sm("compute", dev.fma_peak(dtype)) / (2 * WARP)  # warp FMAs/s per SM
    t_fma = share * SCHEDULERS_PER_SM * counts.fma / fma_rate if fma_rate else 0.0
    pipe = "FP64" if s == 8 else "FP32"
    fma_peak = dev.clocked("compute", dev.fma_peak(dtype))
    out.append(Level("registers", 3 * s * flops / 2, 1.5 * s * fma_peak, t_fma,
                     "3 operands per FMA, fed at the FMA rate"))  # fmt: skip
    out.append(Level("compute", flops, fma_peak * used / sms, t_fma, f"{pipe} FMA pipes", "FLOP"))
    if dev.issue_rate:
        issue = per_sm("issue", dev.issue_rate)
        per_fma = counts.instr / counts.fma
        out.append(Level("issue", counts.instr * blocks, issue * used,
                         share * SCHEDULERS_PER_SM * counts.instr / issue,
                         f"{per_fma:.2f} warp instructions per FMA", "instr"))  # fmt: skip
    shared_bw = dev.level("shared memory")
    if kernel != "naive" and shared_bw:
        # one data pipe (the SRAM shared memory and L1 share, 128 B per clock) carries the
        # inner loop's shared loads, the staging's shared stores and the staged global loads'
        # lines: written into the SRAM when they return from L2, read out to the registers
        # (docs/model.md: what the shared probe's 32.7 TB/s delivers)
        wf_rate = per_sm("shared memory", shared_bw) / WAVEFRONT
        fills = 0.0
        if counts.store_wf:
            fills = FILL_ACCESSES * counts.l1_wf if counts.fill_wf is None else counts.fill_wf
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
    c_l2 = c_l2_sectors(g, s, c_sectors) * SECTOR  # what reaches the L2 of one block's stores
    if kernel == "naive" and "ks" not in g:  # a sector of A serves 32/s steps
        l2_block = g["kp"] * (g["bm"] + g["bn"]) * s
    else:
        l2_block = counts.l1_bytes
    l2 = blocks * l2_block
    read, written, reduce_bytes = _dram(kernel, g, s, dev, engine, opts, blocks_per_unit,
                                        batch, split)  # fmt: skip
    l1_bw = dev.level("L1")
    if l1_bw:
        # the data pipe of the SRAM that L1 and shared memory share (one 128 B wavefront per
        # clock: the shared probe's rate where measured). The naive family's loads go through
        # it alone: its load wavefronts, and the lines they miss written into the SRAM as they
        # return (Nsight on the H200: 13-16 bank writes of 4 B per warp per K step, the
        # model's 65-68 B of L2 reads): a wavefront per line the L2 holds, whose sectors come
        # back together, and one per 32-byte sector of a line from DRAM, whose sectors come
        # back one by one (docs/model.md: ten 4x64 launches with B of 64-256 MB at 1.05-1.09
        # of it with the counters' DRAM bytes)
        pipe, pipe_bw = ("shared memory", shared_bw) if shared_bw else ("L1", l1_bw)
        wf_rate = per_sm(pipe, pipe_bw) / WAVEFRONT
        fills, from_dram = 0.0, 0.0
        if kernel == "naive":  # lines from the L2 fill whole; lines from DRAM a sector each
            from_dram = min(l2_block, read / blocks) if blocks else 0.0
            fills = (l2_block - from_dram) / WAVEFRONT + from_dram / SECTOR
        l1_wf = counts.l1_wf + fills + c_sectors * SECTOR / WAVEFRONT
        out.append(Level("L1", counts.l1_bytes * blocks + c_store,
                         dev.clocked(pipe, pipe_bw) * used / sms, on_sm * l1_wf / wf_rate,
                         f"{counts.l1_wf / counts.fma:.3g} load wavefronts per warp FMA"
                         + (f", {fills / counts.fma:.3g} fills" if fills else "")
                         + (f" ({from_dram / l2_block:.0%} of lines from DRAM, a wavefront"
                            " per sector)" if from_dram > 0.005 * l2_block else ""),
                         parts=(("loads", counts.l1_bytes * blocks), ("C stores", c_store))),
                   )  # fmt: skip
    l2_bw = dev.level("L2")
    c_l2_store = c_l2 * blocks
    out.append(Level("L2", l2 + c_l2_store, l2_bw, (l2 + c_l2_store) / l2_bw if l2_bw else 0.0,
                     parts=(("loads", l2), ("C stores", c_l2_store))))  # fmt: skip
    dram = read + written
    out.append(Level("DRAM", dram, dev.level("DRAM"), dram / dev.level("DRAM"),
                     f"{read / 1e6:.4g} MB read, {written / 1e6:.4g} MB written",
                     parts=(("read", read), ("written", written))))  # fmt: skip
    if dev.latency and counts.trips:
        lat = dev.latency / (dev.sustained or 1.0)
        t = rounds * counts.trips * lat / counts.mlp
        note = f"{counts.mlp:g} load(s) in flight per warp, {resident * g['warps']} warps per SM"
        if kernel != "naive" and dev.issue_rate:
            # a block's own timeline (its warps wait for each other at the barriers): per K
            # step its warps on one scheduler issue their instructions, and with one stage
            # wait for the next tiles' round trip after the barrier; with two stages that
            # trip overlaps the step's work. Other blocks' warps fill the waits (the issue
            # level) where the SM holds enough of them.
            steps = g["kp"] // g["bk"]
            own = (counts.instr / g["warps"] * math.ceil(g["warps"] / SCHEDULERS_PER_SM)
                   / steps / (per_sm("issue", dev.issue_rate) / SCHEDULERS_PER_SM))  # fmt: skip
            two = int(opts.get("stages", 1)) >= 2
            block = steps * (max(own, lat) if two else own + lat) + (lat if two else 0.0)
            if rounds * block > t:
                t = rounds * block
                note = (f"a block's own timeline: {own * 1e9:.3g} ns of its warps' issue per K "
                        f"step {'beside' if two else 'after'} a {lat * 1e9:.3g} ns tile round "
                        f"trip; {resident * g['warps']} warps per SM")  # fmt: skip
        out.append(Level("latency", counts.trips * blocks, 0.0, t, note, "trips"))
    serial, why = 0.0, []
    if kernel != "naive" and blocks_per_unit <= LOCKSTEP_BLOCKS and l2_bw:
        # lockstep waves: every block of a wave waits for its first tiles (a round trip,
        # then the wave's first stage through the L2) and stores its C tile in one epilogue;
        # neither overlaps another block's main loop (docs/model.md)
        wave = min(blocks, blocks_per_unit * sms)
        first = wave * (g["bm"] + g["bn"]) * g["bk"] * s
        c_tiles = wave * c_l2  # the epilogue's store sectors into the L2 (above)
        phase = dev.latency / (dev.sustained or 1.0) if dev.latency else 0.0
        phase += (first + c_tiles) / l2_bw
        serial += rounds * phase
        why.append(f"{rounds} wave prologue/epilogue(s) {phase * 1e6:.3g} us")
    if copies[1]:
        # odd leading dimensions copied into 16-byte-aligned rows before the launch (read and
        # written once each through DRAM, one copy kernel per operand)
        serial += copies[0] * batch / dev.level("DRAM") + copies[1] * dev.launch_overhead
        why.append(f"aligned copies {copies[0] * batch / 1e6:.4g} MB")
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


#: Copying an operand into 16-byte-aligned rows, as measured on the H200 (CuPy's strided copy,
#: benches/results/logs/h200-pad-probe-s13.txt): ~3 us a launch plus its read and write at
#: 0.4 of the copy bandwidth; the aligned register kernel saved 14-16% of the unaligned one's
#: time on every odd shape there. The copies pay when they cost under ``PAD_GAIN`` of the
#: product's time at the compute peak.
PAD_COPY_LAUNCH, PAD_COPY_EFFICIENCY, PAD_GAIN = 3e-6, 0.4, 0.15


def _scheduler_warps(on_sm: int, resident: int, warps: int) -> int:
    """Warps the busiest scheduler of the busiest SM runs over the launch: ``on_sm`` blocks of
    ``warps`` warps, ``resident`` at a time, their warps spread over the SM's
    ``SCHEDULERS_PER_SM`` schedulers (the last round holds the rest)."""
    if not on_sm:
        return 0
    full, last = divmod(on_sm, resident)
    per = math.ceil(resident * warps / SCHEDULERS_PER_SM)
    return full * per + (math.ceil(last * warps / SCHEDULERS_PER_SM) if last else 0)


def pad_pays(m: int, n: int, k: int, dtype: str, s: int, dev: DeviceSpec, odd_a: bool,
             odd_b: bool) -> bool:  # fmt: skip
    """Whether copying the odd operands (``odd_a``: A's rows, ``odd_b``: B's, not 16-byte
    aligned; ``s`` bytes per element) into aligned rows pays for the local-memory register
    kernel's 16-byte loads: one rule for ``kernels.pad_pays`` (the launch) and
    :func:`_alignment` (the model)."""
    if not (odd_a or odd_b) or dev.bandwidth <= 0:
        return False
    rate = PAD_COPY_EFFICIENCY * dev.bandwidth
    cost = sum(PAD_COPY_LAUNCH + 2 * e * s / rate for e, odd in ((m * k, odd_a), (k * n, odd_b))
               if odd)  # fmt: skip
    return cost < PAD_GAIN * 2 * m * n * k / dev.peak(dtype)


def _alignment(kernel: str, g: dict, s: int, dev: DeviceSpec, engine: str, opts: dict,
               dtype: str) -> tuple[tuple[float, int], dict]:  # fmt: skip
    """What the launch does with leading dimensions that are no multiple of 16 bytes (row-major
    operands: lda = K, ldb = N; ``launch.py``): the local-memory register kernel copies them
    into aligned rows where :func:`pad_pays` (returns the bytes copied and the copy launches),
    else it runs its unaligned variant (scalar guarded loads: ``opts["aligned"]`` = 0)."""
    vw = 16 // s
    odd_a, odd_b = g["k"] % vw != 0, g["n"] % vw != 0
    if (kernel != "register" or engine != "gemm-c" or not int(opts.get("use_local", 1))
            or "aligned" in opts or not (odd_a or odd_b)):  # fmt: skip
        return (0.0, 0), opts
    m, n, k = g["m"], g["n"], g["k"]
    if pad_pays(m, n, k, dtype, s, dev, odd_a, odd_b):
        copied = 2 * (m * k * odd_a + k * n * odd_b) * s
        return (float(copied), int(odd_a) + int(odd_b)), opts
    return (0.0, 0), dict(opts, aligned=0)


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
        # (K slices: S partial sums per output, in the L2; a reduction pass unless onepass)
        slices = split * m * n * s * batch if split > 1 and not opts.get("onepass") else 0
        return float((m * k + k * n) * s * batch), float(m * n * s * batch), float(slices)
    group = int(opts.get("group_m", 1)) if kernel == "register" and engine == "gemm-c" else 1
    resident = blocks_per_unit * max(1, dev.compute_units)
    # panels over the whole K (dram_key has no kp): the K slices read disjoint parts of them
    read, written = dram_traffic_cached(dram_key(g), s, dev, resident, group, kernel == "naive")
    read, written = read * batch, written * batch
    if split == 1:
        return read, written, 0.0
    workspace = split * m * n * s * batch
    if workspace > dev.cache("L2") * L2_SHARED_FRACTION:  # partial products leave the L2
        written, read = written + workspace, read + workspace
    return read, written, workspace + m * n * s * batch
