"""The CPU half of the traffic model (``tiledmm.model.hierarchy`` is the GPU half):
a core's SIMD FMA pipes, L1 loads, L2/L3/DRAM lines, and the measured per-kernel costs of the
compiled CPU kernels (PoCL, numba-cpu) and the NumPy backend (docs/model.md). Pure Python."""

from __future__ import annotations

import math
from dataclasses import replace

from ..device.spec import DeviceSpec
from .levels import Level

__all__ = ["cpu_levels"]

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
#: x86 FMA latency (clocks) and FMA pipes per core (Haswell to Zen 4: 4-5 clocks, 2 pipes)
FMA_LATENCY, FMA_PIPES = 4, 2
#: Clocks per element Numba's tile packing costs on one core (a guarded scalar copy per
#: element from layout-generic operands: compare, select, strided load, store; docs/model.md).
NUMBA_PACK_CLOCKS = 2.5
#: The vector width LLVM gives Numba's loops on x86: 32-byte (ymm) vectors even where AVX-512
#: exists (the kernels' assembly shows ymm only; docs/model.md).
LLVM_VECTOR_BYTES = 32
#: OpenBLAS's cost per call beyond its large-size rate, as a tile edge: a t x t x t product
#: runs at t / (t + NUMPY_BLAS_EDGE) of the vendor rate (a bm x bn x bk one at
#: 1 / (1 + NUMPY_BLAS_EDGE (1/bm + 1/bn + 1/bk) / 3)): per call it packs both operand tiles,
#: updates C and forks and joins its threads, O(t^2) work beside the t^3 FMAs. Measured with
#: np.matmul on the 2-core Xeon against its 3072^3 rate: 71-117 at t = 256..2048; docs/model.md.
NUMPY_BLAS_EDGE = 100.0


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
    if kernel == "naive" and opts.get("gemv"):
        return _gemv_levels(g, s, dev, dtype, opts)
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
        # PoCL's micro-kernel runs at a measured fraction of the FMA peak (docs/model.md),
        # less where its accumulators cannot cover the FMA pipes' latency or spill
        vec = str(opts.get("cpu_vec", lanes))  # "simd": the device's lanes
        eff, why = _micro_kernel(tm, tn, int(vec) if vec.isdigit() else lanes, dev)
        live, balance = _pocl_live_work(g, cores)
        why += f"; {balance:.2g} of the cores busy" if balance < 1 else ""
        t = live / (peak * POCL_REGISTER_EFFICIENCY * eff * balance)
        out.append(Level("compute", flops, flops / t, t,
                         f"PoCL micro-kernel at {POCL_REGISTER_EFFICIENCY * eff:.2g} of the FMA "
                         f"peak ({why})", "FLOP"))  # fmt: skip
    pack = 0.0
    if engine == "numba-cpu" and kernel in ("tiled", "register") and clock:
        # before each K step the block packs its A and B tiles (guarded scalar copies): a
        # phase the loops do not overlap, added to every level below
        packed = g["gx"] * g["gy"] * math.ceil(g["kp"] / bk) * (bm + bn) * bk
        pack = packed * NUMBA_PACK_CLOCKS / clock / cores
    if engine == "numba-cpu" and kernel == "register":
        loop = dev.loop_cost("numba-cpu")
        if loop:
            out.append(_numba_register_loop(g, loop, cores, flops))
        elif clock:
            # fastmath off: multiply and add stay two instructions (half the FMA peak)
            t = 2 * flops / peak
            out.append(Level("compute", flops, flops / t, t, "unfused mul+add", "FLOP"))
    if engine == "numba-cpu" and kernel == "tiled" and clock:
        out += _numba_rank1(g, s, dev, flops, clock * cores)
    if engine == "numpy" and kernel == "register":
        # the vendor GEMM per tile (its own micro-kernel: no L1 level of ours), then NumPy's
        # passes over the tiles; the panels' L2 and DRAM levels below as for the others
        out.append(_numpy_blas(g, s, dev, dtype))
    if kernel == "register":
        loads_per_fma = (tm + tn / lanes) / (tm * tn / lanes)
        simd = True
    else:
        loads_per_fma = 2.0 / lanes if engine == "gemm-c" else 2.0
        simd = engine == "gemm-c"
    fma_vec = flops / 2 / (lanes if simd else 1)
    t_fma = fma_vec * 2 * lanes / peak if simd else flops / (peak / lanes)
    if not (engine == "numba-cpu" or (kernel == "register" and engine in ("gemm-c", "numpy"))):
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
    if not (kernel == "register" and engine == "numpy") and not (
        kernel == "tiled" and engine == "numba-cpu"
    ):
        l1 = fma_vec * loads_per_fma * (dev.simd_bytes if simd else s)
        l1_bw = dev.level("L1")
        out.append(Level("L1", l1, l1_bw, l1 / l1_bw if l1_bw else 0))
    panel_bytes = s * g["kp"] * (bm + bn) * g["mp"] * g["np"] / (bm * bn)
    inner = "L2" if (bm * bk + bk * bn) * s <= dev.cache("L2") else "L3"
    parts = {inner: [("block panels", panel_bytes)]}
    if engine == "numba-cpu" and kernel == "tiled":
        level, moved = _numba_b_tile(g, s, dev, flops)
        if moved:
            parts.setdefault(level, []).append(("B tile per C row", moved))
    for name, ps in parts.items():
        amount, bw = sum(b for _, b in ps), dev.level(name)
        note, split = " + ".join(p for p, _ in ps), tuple(ps) if len(ps) > 1 else ()
        out.append(Level(name, amount, bw, amount / bw if bw else 0.0, note, parts=split))
    dram = (m * k + k * n + m * n) * s
    if (k * n) * s > dev.cache("L3"):
        dram += panel_bytes
    out.append(Level("DRAM", dram, dev.level("DRAM"), dram / dev.level("DRAM")))
    if pack:
        note = f"+ packing {pack * 1e3:.3g} ms at {NUMBA_PACK_CLOCKS:g} clocks/element (serial)"
        out = [replace(lv, seconds=lv.seconds + pack, serial=pack,
                       note=f"{lv.note}; {note}" if lv.note else note) for lv in out]  # fmt: skip
    return out


def _pocl_live_work(g: dict, cores: int) -> tuple[float, float]:
    """(FLOPs, busy share of the cores) of PoCL's register micro-kernel (``USE_LOCAL`` 0):
    work-items past M or N skip the K loop (``register.cl``), so the block tile's padding
    costs nothing and the micro-tile's does; K is never padded (the K blocks end at K). The
    groups go to the cores in waves; the last wave's idle cores are the busy share's loss."""
    m, n, k, tm, tn = g["m"], g["n"], g["k"], g["tm"], g["tn"]
    live = 2.0 * math.ceil(m / tm) * tm * math.ceil(n / tn) * tn * k
    groups = g["gx"] * g["gy"]
    return live, groups / (_waves(groups, cores) * cores) if groups else 1.0


def _waves(blocks: int, cores: int) -> int:
    """Rounds of one block per core that ``blocks`` blocks take (a CPU grid's blocks go to the
    cores as they free up; the last round may leave cores idle)."""
    return math.ceil(blocks / cores)


def _micro_kernel(tm: int, tn: int, vec: int, dev: DeviceSpec) -> tuple[float, str]:
    """The share of the FMA pipes a tm x tn register micro-tile keeps busy (``vec`` lanes per
    vector along N): its ``tm * tn / vec`` vector accumulators are the independent FMAs in
    flight, ``dev.fma_accumulators`` of them fill the pipes (measured by `tiledmm calibrate`;
    else FMA_LATENCY x FMA_PIPES); past the ISA's vector registers
    (accumulators, the B vectors and one broadcast A) the compiler spills accumulators."""
    acc = max(1, tm * tn // max(1, vec))
    regs = acc + max(1, tn // max(1, vec)) + 1
    vregs = 32 if dev.simd_bytes >= 64 else 16  # AVX-512: 32 zmm; AVX2/SSE: 16
    full = dev.fma_accumulators or FMA_LATENCY * FMA_PIPES  # measured, else the ISA's
    eff = min(1.0, acc / full)
    why = f"{acc} accumulators of {full}"
    if regs > vregs:
        eff *= vregs / regs
        why += f", {regs} of {vregs} vector registers"
    return eff, why


def _numba_register_loop(g: dict, loop: tuple[float, float], cores: int, flops: float) -> Level:
    """Numba's register loop at its measured costs (``dev.loop_costs``, `tiledmm calibrate`'s
    ``register_block`` probe): per K step of a 4 x TN micro-tile a fixed cost and one per
    column, over the padded blocks (the loops run whole tiles) and BK rounded up to 4 steps;
    the blocks go to the cores in waves."""
    step, column = loop
    bm, bn, bk, tn = g["bm"], g["bn"], g["bk"], g["tn"]
    blocks = g["gx"] * g["gy"]
    per_block = (bm // 4) * (bn // tn) * math.ceil(g["k"] / bk) * -(-bk // 4) * (step + tn * column)
    t = _waves(blocks, cores) * per_block
    return Level("compute", flops, flops / t if t else 0.0, t,
                 f"4x{tn} loop: {step * 1e9:.3g} ns per K step + {column * 1e9:.3g} ns per "
                 f"column (measured, one core)", "FLOP")  # fmt: skip


def _numba_rank1(g: dict, s: int, dev: DeviceSpec, flops: float, clocks: float) -> list[Level]:
    """Numba's tiled loop ``c[j] += a * b[j]``: for each row i of the C tile, every row p of
    the B tile updates the C row. Per vector of LLVM's width a multiply and an add (a vector
    per clock), and B and C loaded and C stored through L1 (the C row stays there across p;
    the B tile's own level: :func:`_numba_b_tile`)."""
    vb = min(dev.simd_bytes, LLVM_VECTOR_BYTES)
    vecs = flops / 2 / (vb // s)
    t_fp = vecs / clocks
    l1 = vecs * 3 * vb
    return [Level("compute", flops, flops / t_fp, t_fp,
                  f"{vb}-byte vectors, unfused mul+add: a vector per clock", "FLOP"),
            Level("L1", l1, dev.level("L1"), l1 / dev.level("L1"),
                  "rank-1 updates: B and C loaded, C stored per vector")]  # fmt: skip


def _numba_b_tile(g: dict, s: int, dev: DeviceSpec, flops: float) -> tuple[str, float]:
    """(level, bytes) of Numba's tiled loop reading its B tile again for every C row, when the
    tile does not fit L1: an element of B per multiply-add from the cache holding it."""
    b_tile = g["bk"] * g["bn"] * s
    if b_tile <= dev.cache("L1"):
        return "L1", 0.0
    level = next((x for x in ("L2", "L3") if b_tile <= dev.cache(x)), "DRAM")
    return level, flops / 2 * s


def _numpy_blas(g: dict, s: int, dev: DeviceSpec, dtype: str) -> Level:
    """The NumPy backend's register family: one vendor GEMM call per block and K step on
    full-size tiles (edge tiles zero-padded), at the measured vendor rate (``dev.peak``) less
    its per-call cost (:data:`NUMPY_BLAS_EDGE`); then, on one core at one core's L2 rate,
    the backend's own passes: ``acc += prod`` after the first K step (3 tile passes), the
    copy of each C tile out, and the copy-and-zero-fill of each edge operand tile."""
    bm, bn, bk, gx, gy = g["bm"], g["bn"], g["bk"], g["gx"], g["gy"]
    steps = max(1, math.ceil(g["k"] / bk))
    calls = gx * gy * steps
    per_call = 1 + NUMPY_BLAS_EDGE * (1 / bm + 1 / bn + 1 / bk) / 3
    flops = 2.0 * calls * bm * bn * bk
    t_gemm = flops / dev.peak(dtype) * per_call
    e_m, e_n, e_k = (int(g[d] % b != 0) for d, b in (("m", bm), ("n", bn), ("k", bk)))
    a_packs = gx * (gy * steps - (gy - e_m) * (steps - e_k))
    b_packs = gy * (gx * steps - (gx - e_n) * (steps - e_k))
    passes = (gx * gy * (3 * (steps - 1) + 2) * bm * bn
              + 2 * (a_packs * bm * bk + b_packs * bk * bn)) * s  # fmt: skip
    core_l2 = dev.level("L2") / max(1, dev.compute_units)
    t = t_gemm + (passes / core_l2 if core_l2 else 0.0)
    return Level("compute", flops, flops / t, t,
                 f"vendor GEMM per {bm}x{bn}x{bk} tile at {1 / per_call:.2f} of its rate; "
                 f"NumPy passes {passes / 1e6:.4g} MB on one core", "FLOP")  # fmt: skip


def _gemv_levels(g: dict, s: int, dev: DeviceSpec, dtype: str, opts: dict) -> list[Level]:
    """The gemv path on a CPU (``gemv_cpu.cl``): the operands read once, from the cores' L2s
    where they all fit (a repeated call finds them there), else from DRAM (not L3: a VM may
    report the host's), by as many cores as there are items (a row of A each for A @ x; NV
    native vectors of B's columns for x @ B), and the FMAs on SIMD lanes."""
    m, n, k = g["m"], g["n"], g["k"]
    cores = max(1, dev.compute_units)
    if n < m:
        items = m * -(-n // g["bm"])
    else:
        items = -(-n // (int(opts.get("nv", 8)) * int(opts.get("cpu_vec", 8)))) * m
    busy = min(cores, items) / cores
    bytes_ = float((m * k + k * n + m * n) * s)
    name = "DRAM"
    if bytes_ <= dev.cache("L2") * cores and dev.level("L2"):
        name = "L2"
    bw = dev.level(name) * busy
    flops = 2.0 * m * n * k
    peak = dev.fma_peak(dtype) * busy
    return [
        Level(name, bytes_, bw, bytes_ / bw if bw else 0.0, "the operands once"),
        Level("compute", flops, peak, flops / peak if peak else 0.0, "SIMD FMA lanes", "FLOP"),
    ]


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
