"""What one warp of each GPU kernel family issues per block (part of the traffic model,
``tiledmm.model.hierarchy``): warp FMA and other instructions, shared-memory wavefronts from a bank
simulation of the warp's actual addresses, L1 wavefronts and bytes of its global loads, and
its dependent global round trips. Pure Python; imports nothing from tiledmm. The hierarchy
times these counts at each level's ceiling (docs/model.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache, wraps

__all__ = [
    "Counts",
    "naive_counts",
    "staged_counts",
    "gemv_counts",
    "shared_wavefronts",
    "SHARED_REQUEST_THREADS",
    "WARP",
    "SECTOR",
    "WAVEFRONT",
    "FILL_ACCESSES",
    "c_store_sectors",
    "c_l2_sectors",
    "L2_STORE_REPEATS",
]

WARP = 32
SECTOR = 32  # bytes per L1/L2 sector
WAVEFRONT = 128  # bytes one shared-memory / L1 wavefront delivers (32 banks x 4 B)
#: Data-pipe wavefronts per 128 B of a global load that misses L1 (the staged tiles): the
#: returning line is written into the shared/L1 SRAM (the fill), then read out to the
#: registers. Not yet held against a counter (docs/model.md: l1tex__data_bank_writes/reads).
FILL_ACCESSES = 2
#: The tiled family's staging cost in warp instructions (nvcc 13.0, sm_90 SASS of tiled.cl,
#: 16x16x64 float32 with vec_smem: 351 instructions per warp per K step, of which 148 are the
#: main loop's 64 FFMA, 80 LDS and 4 loop/barrier instructions; docs/model.md).
TILED_STAGE_INSTR = 21  # per staged element per thread
TILED_STEP_INSTR = 37  # per K step per warp
#: The register family's extra staging instructions, read off nvcc 13.0's sm_90 SASS of
#: register.cl as CuPy builds it (interior blocks; docs/model.md): double buffering
#: (STAGES 2: the buffer index, both buffers' addresses, the guarded fetch and stash) adds per
#: warp per K step 36-39 in float32 (128x128x16, 128x64x16, 64x32x16), 23 in float64
#: (64x64x8); the unaligned variant (ALIGNED 0) adds per staged 16-byte vector per thread
#: 14-18 (VW guarded scalar loads: the bound compares, addresses, moves; 10-18 over 7 tiles).
REGISTER_STAGES2_INSTR = {4: 37, 8: 23}
REGISTER_SCALAR_INSTR = 16
#: K steps whose loads a gemm-c naive warp keeps in flight, by element size (nvcc 13.0 sm_90
#: SASS of naive.cl at 32 registers; docs/model.md "Where the model is still wrong").
NAIVE_IN_FLIGHT = {4: 5.0, 8: 2.0}


#: the plan fields a block's warp simulations read (never the product's M, N, K)
TILE_FIELDS = ("bm", "bn", "bk", "tm", "tn", "threads", "warps")


def per_tile(fn):
    """Memoize a simulation of one block's warps on the tile alone: a tuner ranks a few
    thousand candidates on each of its shapes (6-12 ms a plan at 128x128/8x8 without it, most
    of it these bank and sector walks; an H100 `tiledmm tune --budget 80s` spent its budget
    ranking), and every shape repeats the same tiles."""
    cached = lru_cache(maxsize=8192)(
        lambda tile, s, engine, opts, *rest: fn(dict(tile), s, engine, dict(opts), *rest)
    )

    @wraps(fn)
    def wrapper(g: dict, s: int, engine: str, opts: dict, *rest):
        key = (tuple((f, g[f]) for f in TILE_FIELDS if f in g), s, engine,
               tuple(sorted(opts.items())), *rest)  # fmt: skip
        try:
            hash(key)
        except TypeError:  # an unhashable option value: simulate without the cache
            return fn(g, s, engine, opts, *rest)
        return cached(*key)

    return wrapper


# --------------------------------------------------------------------------- shared memory

#: Threads whose addresses one shared-memory (or L1) request serves, by access width in bytes.
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
class Counts:
    """Per-block counts (warp instructions, wavefronts, bytes) and per-block loop structure."""

    fma: float = 0.0  # warp FMA instructions
    instr: float = 0.0  # all warp instructions
    shared_wf: float = 0.0  # shared-load wavefronts
    store_wf: float = 0.0  # shared-store wavefronts (the staging)
    l1_wf: float = 0.0
    l1_bytes: float = 0.0
    trips: float = 0.0  # dependent global round trips per warp (latency level)
    mlp: float = 1.0  # independent loads in flight per warp per trip
    fill_wf: float | None = None  # data-pipe wavefronts of the staged global loads (None:
    # FILL_ACCESSES per 128 B: each line written into the SRAM once and read out once)


def naive_counts(g: dict, s: int, engine: str) -> Counts:
    bn, k, warps = g["bn"], g["kp"], g["warps"]
    cols = min(bn, WARP)
    rows = max(1, WARP // bn)
    # A: one address per row of the warp (broadcast); B: the warp's columns, coalesced. Loads
    # of 8 bytes and more are served per half-warp (SHARED_REQUEST_THREADS), a wavefront each
    # at least: Nsight on the H200 counts 4.0 load wavefronts per warp per K step in float64
    # (A's broadcast 2, B's 256 bytes 2), 2.0 in float32.
    requests = WARP // SHARED_REQUEST_THREADS.get(s, 16)
    a_wf = max(rows, requests)
    b_wf = max(requests, math.ceil(cols * s / WAVEFRONT))
    a_bytes, b_bytes = rows * SECTOR, math.ceil(cols * s / SECTOR) * SECTOR
    # nvcc (13.0, sm_90 SASS of naive.cl) unrolls the K loop 16x at 32 registers and issues
    # each step's loads ahead of the FMA that waits on them: 5 steps in flight in float32
    # (11 loads before the first FFMA), 2 in float64 (each DFMA's pair loaded one step
    # ahead); ~0.75 address/loop instructions per FMA. Numba's u32 loop with wrap-around
    # stays rolled (6 per FMA, 1 in flight).
    overhead, mlp = (0.75, NAIVE_IN_FLIGHT.get(s, 2.0)) if engine == "gemm-c" else (6.0, 1.0)
    per = warps * k
    return Counts(
        fma=per,
        instr=per * (3 + overhead),
        l1_wf=per * (a_wf + b_wf),
        l1_bytes=per * (a_bytes + b_bytes),
        trips=k,
        mlp=mlp,
    )


@per_tile
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


@per_tile
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


def staged_counts(g: dict, s: int, engine: str, opts: dict, kernel: str) -> Counts:
    bm, bn, bk, kp, warps, threads = g["bm"], g["bn"], g["bk"], g["kp"], g["warps"], g["threads"]
    if kernel == "tiled":  # per group of `vec` k values: one A load, `vec` B loads
        per_group, lds, wf = _tiled_loads(g, s, engine, opts)
        groups = bk // per_group
    else:  # per k: the micro-tile's loads, TM x TN FMAs
        per_group, lds, wf = _register_loads(g, s, engine, opts)
        groups = bk
    steps = kp // bk
    fma = warps * steps * groups * per_group
    elems = (bm * bk + bk * bn) / threads
    if kernel == "tiled" and engine == "gemm-c":
        # nvcc's staging loops (tiled.cl, sm_90 SASS): per staged element ~21 instructions
        # (row/column by shifts, two bound compares, lda from the constant bank, the address,
        # LDG, STS, the loop), per K step ~37 (the loops' set-up and exits, 2 barriers, the
        # K loop); the main loop is the FMAs and LDS alone (docs/model.md)
        step_instr = elems * TILED_STAGE_INSTR + TILED_STEP_INSTR
    else:
        # per K step per thread: each staged vector costs a global load, a shared store and
        # about two index/guard instructions; plus two barriers and the loop (8 instructions).
        vw = 16 // s if engine == "gemm-c" else 1
        step_instr = elems / vw * 4 + 8
        if kernel == "register" and engine == "gemm-c":
            if int(opts.get("stages", 1)) >= 2:
                step_instr += REGISTER_STAGES2_INSTR.get(s, REGISTER_STAGES2_INSTR[4])
            if not int(opts.get("aligned", 1)):
                step_instr += elems / vw * REGISTER_SCALAR_INSTR
    instr = warps * steps * (groups * (per_group + lds) + step_instr)
    loads_bytes = (bm * bk + bk * bn) * s
    fill_wf = None
    if kernel == "register" and engine == "gemm-c" and not int(opts.get("aligned", 1)):
        fill_wf = steps * _scalar_fetch_wavefronts(g, s)
    return Counts(
        fma=fma,
        instr=instr,
        shared_wf=warps * steps * groups * wf,
        store_wf=steps * _store_wavefronts(g, s, engine, opts, kernel),
        l1_wf=steps * loads_bytes / WAVEFRONT,
        l1_bytes=steps * loads_bytes,
        trips=steps if int(opts.get("stages", 1)) < 2 else 1,
        mlp=1.0,
        fill_wf=fill_wf,
    )


def _scalar_fetch_wavefronts(g: dict, s: int) -> float:
    """Data-pipe wavefronts of register.cl's unaligned fetch (ALIGNED = 0: a leading dimension
    no multiple of 16 bytes) per block per K step. Each 16-byte vector of the tiles becomes VW
    guarded scalar loads, so a warp's load instruction has its 32 lanes 16 bytes apart (A:
    rows of BK elements, a warp over 32 / (BK / VW) rows; B: a warp along one row), rows at
    random offsets in their lines. L1TEX resolves 4 lines x 4 sectors per wavefront (its tag
    stage) and reads 128 bytes per wavefront: an instruction costs the larger of lines / 4 and
    sectors / 4, and the VW instructions of a vector each pay it. Each returning line is then
    written into the SRAM once (its sectors / 4). Aligned (one 16-byte load per vector), the
    staged lines cost bytes / 128 twice instead (``FILL_ACCESSES``)."""
    bm, bn, bk = g["bm"], g["bn"], g["bk"]
    vw = 16 // s
    reads = writes = 0.0
    for rows, cols in ((bm, bk), (bk, bn)):  # A (BM x BK), B (BK x BN), row-major tiles
        per_row = cols // vw  # vectors along a row
        lanes = min(per_row, WARP)  # lanes of one instruction on one row, 16 bytes apart
        warp_rows = max(1, WARP // per_row)
        sectors = warp_rows * (1 + (lanes - 1) * 16 / SECTOR)  # expected, random offset
        lines = warp_rows * (1 + ((lanes - 1) * 16) / WAVEFRONT)
        per_instr = max(math.ceil(lines / 4), math.ceil(sectors / 4))
        reads += math.ceil(rows * per_row / WARP) * vw * per_instr
        writes += rows * (1 + (cols * s - s) / SECTOR) / 4  # sectors of each row, per 4
    return reads + writes


@per_tile
def _store_wavefronts(g: dict, s: int, engine: str, opts: dict, kernel: str) -> int:
    """Shared-store wavefronts of one block's staging per K step, from a bank simulation of
    every warp's store addresses (tiled.cl: A rows padded by a word when read as scalars, B
    as is; register.cl: A transposed, As[k][m], by scalar stores, B rows by VW-wide stores)."""
    bm, bn, bk, threads = g["bm"], g["bn"], g["bk"], g["threads"]
    stores: list[tuple[dict[int, int], int]] = []  # per store: {thread: address}, width
    if kernel == "tiled":
        vec = 16 // s if (opts.get("vec_smem") or engine == "numba") and bk % (16 // s) == 0 else 1
        a_ld = bk if vec > 1 or engine == "numba" else bk + 1
        for e0 in range(0, bm * bk, threads):
            stores.append(({t: ((e // bk) * a_ld + e % bk) * s for t in range(threads)
                            if (e := e0 + t) < bm * bk}, s))  # fmt: skip
        for e0 in range(0, bk * bn, threads):
            stores.append(({t: (e0 + t) * s for t in range(threads) if e0 + t < bk * bn}, s))
    else:
        vw = 16 // s if engine == "gemm-c" else 1
        a_ld, b_ld = bm + int(opts.get("pad", 0)), bn + int(opts.get("pad", 0))
        for e0 in range(0, bm * bk // vw, threads):
            idx = [t for t in range(threads) if e0 + t < bm * bk // vw]
            for q in range(vw):  # scalar stores along M, one per element of the vector
                stores.append(({t: (((e0 + t) % (bk // vw) * vw + q) * a_ld
                                    + (e0 + t) // (bk // vw)) * s for t in idx}, s))  # fmt: skip
        for e0 in range(0, bk * bn // vw, threads):
            idx = [t for t in range(threads) if e0 + t < bk * bn // vw]
            stores.append(({t: ((e0 + t) // (bn // vw) * b_ld + (e0 + t) % (bn // vw) * vw) * s
                             for t in idx}, vw * s))  # fmt: skip
    total = 0
    for addr, width in stores:
        for w0 in range(0, threads, WARP):
            lanes = [addr[t] for t in range(w0, w0 + WARP) if t in addr]
            total += shared_wavefronts(lanes, width) if lanes else 0
    return total


@per_tile
def c_store_sectors(g: dict, s: int, engine: str, opts: dict, kernel: str) -> int:
    """32-byte sectors one block's C stores move through L1 to the L2, from the warps' store
    addresses: a store instruction moves every sector its warp touches, whole, however few of
    its bytes it writes. register.cl's epilogue (gemm-c) stores scalars (SASS: 64 ``STG.E``
    per thread of 128x128/8x8) at a stride of VN elements along the warp's 16 columns: a
    32-byte sector gets 32 / (VN s) of its bytes per instruction, and the next VN - 1
    instructions write the same sectors again (float32 VN 4: 4x the C bytes; float64 VN 2:
    2x; Nsight's ``l1tex__t_bytes.sum`` is the tile loads plus exactly that, docs/model.md).
    Every other kernel's warp stores consecutive elements: its C bytes in sectors."""
    bm, bn = g["bm"], g["bn"]
    if kernel != "register" or engine != "gemm-c" or not int(opts.get("use_local", 1)):
        return math.ceil(bm * bn * s / SECTOR)
    tm, tn = g.get("tm", 1), g.get("tn", 1)
    vw = 16 // s
    vm, vn = int(opts.get("vm", min(vw, tm))), int(opts.get("vn", min(vw, tn)))
    t_n, t_m = bn // tn, bm // tm
    total = 0
    for w0 in range(0, t_n * t_m, WARP):  # register.cl: row and column of (i, g, q) per thread
        lanes = [(t % t_n, t // t_n) for t in range(w0, min(w0 + WARP, t_n * t_m))]
        for i in range(tm):
            for gg in range(tn // vn):
                for q in range(vn):
                    total += len({((i // vm) * t_m * vm + ty * vm + i % vm,
                                   (gg * t_n * vn + tx * vn + q) * s // SECTOR)
                                  for tx, ty in lanes})  # fmt: skip
    return total


#: Of the sectors a warp's store instructions write again (register.cl's scalar epilogue: VN
#: instructions in a row write each sector in part), the fraction that still reaches the L2 as
#: sectors of their own: L1 merges the rest into the line's earlier requests. Nsight Compute
#: on the H200 (session 14, CuPy, 128x128/8x8 float32, VN 4: the SM issues 4x C's sectors):
#: L2 write sectors 1.42x C's at 8192x8192x64 and 1.67x at 4096^3, 0.14 and 0.22 of the
#: repeats (benches/results/logs/h200-store-counters-s14.json).
L2_STORE_REPEATS = 0.18


def c_l2_sectors(g: dict, s: int, c_sectors: int) -> float:
    """32-byte sectors one block's C stores write into the L2: the tile's own sectors once, and
    :data:`L2_STORE_REPEATS` of the repeats beyond them that ``c_sectors`` (the SM's count,
    :func:`c_store_sectors`) holds."""
    whole = math.ceil(g["bm"] * g["bn"] * s / SECTOR)
    return whole + L2_STORE_REPEATS * max(0, c_sectors - whole)


def gemv_shape(g: dict, opts: dict, s: int = 4) -> dict:
    """The gemv path's launch (``gemv.cl``, ``kernels.launch_shape``): KS items per output
    split K. N < M (A @ x): groups of BN rows x BM columns, items (KS, BN); else groups of BM
    rows x BN columns, items (BN, KS). Returns ``g`` with gx, gy, threads, warps of it, ``t``
    (1: N short) and ``gv``: the elements one 16-byte load carries along the long operand
    (x @ B: GV columns of a B row where BN allows; A @ x: VW elements of an A row along K),
    and ``kp``: the K of one group (of one K slice with ``split_k``)."""
    ks, bm, bn, m, n = int(opts.get("ks", 8)), g["bm"], g["bn"], g["m"], g["n"]
    split = max(1, int(opts.get("split_k", 1)))
    t = int(n < m)
    gx, gy = (math.ceil(n / bm), math.ceil(m / bn)) if t else (math.ceil(n / bn), math.ceil(m / bm))
    threads = bn * ks
    vw = max(1, 16 // s)
    gv = vw if t or bn % vw == 0 else 1
    return dict(g, gx=gx, gy=gy, threads=threads, warps=math.ceil(threads / WARP), ks=ks, t=t,
                gv=gv, gu=int(opts.get("gu", 4)), kp=math.ceil(g["k"] / split))  # fmt: skip


def gemv_counts(g: dict, s: int, engine: str) -> Counts:
    """Per block of the gemv path (``g`` from :func:`gemv_shape`): each item walks
    K / (KS GV) steps; a step loads one 16-byte vector (GV elements) of the long operand
    (coalesced along the warp) and the short operand's elements for it (x @ B: BM scalars of
    A, a few distinct per warp; A @ x with N = 1: one 16-byte vector of x; else GV x BM
    scalars), and makes BM x GV FMAs. GEMV_U vector loads are issued before their FMAs
    (gemm-c: the ``gu`` option, default 4; numba-cuda's gemv: 8)."""
    bm, ks, warps, k, gv = g["bm"], g["ks"], g["warps"], g.get("kp", g["k"]), g.get("gv", 1)
    steps = math.ceil(k / (ks * gv))
    long_bytes = WARP * gv * s
    long_wf, long_b = math.ceil(long_bytes / WAVEFRONT), math.ceil(long_bytes / SECTOR) * SECTOR
    if g.get("t") and g["n"] == 1:  # x contiguous: one vector load, like A's
        short_ld, short_wf, short_b = 1, long_wf, long_b
    elif g.get("t"):
        short_ld = short_wf = gv * bm
        short_b = short_ld * SECTOR
    else:
        short_ld = short_wf = bm
        short_b = bm * SECTOR
    overhead, mlp = (0.75, float(g.get("gu", 4))) if engine == "gemm-c" else (6.0, 8.0)
    per = warps * steps
    return Counts(
        fma=per * bm * gv,
        instr=per * (bm * gv + 1 + short_ld + 2 + overhead),
        l1_wf=per * (long_wf + short_wf),
        l1_bytes=per * (long_b + short_b),
        trips=steps,
        mlp=mlp,
    )
