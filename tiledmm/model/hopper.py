"""The levels of the Hopper kernel (issue 38, ``backends/kernels/hopper_gemm.cu``): TMA copies
into a stage ring, ``wgmma`` from shared memory, a persistent grid walking the tiles in a grouped
order, the C tile stored from registers or through shared memory by TMA. 16-bit inputs, or
float32 as TF32 (DTYPE 3: ``wgmma`` m64nNk8, BK 32 floats, 4-byte elements, B packed to B^T by
an extra launch first; element size ``s`` 4 below).

Pure Python. Every ceiling is an architectural fact of ``tiledmm.device.nvidia`` or a
calibrated one (docs/model.md, "The Hopper rung"):

- **tensor cores**: ``wgmma`` at the device's dense 16-bit rate (:func:`tensorcore.roof`: the
  calibrated float16 vendor-GEMM rate, else the whitepaper's FLOP per clock per SM x SMs x the
  clock; TF32: a measured TF32 roof, else the 16-bit one x the whitepaper's TF32 / 16-bit FLOP
  per clock, half, at the same clock), timed on the busiest SM: the persistent grid gives SM
  ``b`` the tiles ``b, b + G, ...``, so the SM with the most tiles (``ceil(tiles / G)``)
  finishes last (wave quantization);
- **shared memory**: per stage the TMA writes (BM + BN rows of 128 bytes) and the operands
  every ``wgmma`` reads from shared memory (A: 64 x 16, B: 16 x WN per m64nWNk16, per consumer
  and m64 slab), at 128 bytes per clock per SM (``SHARED_BYTES_PER_CLOCK``) at the clock the
  tensor rate implies (the SMs run one clock: the calibrated 16-bit rate is the tensor pipe's
  full rate at the clock it holds under a tensor-core load);
- **L2**: the TMA loads in 128-byte lines (a box row that does not start on a line boundary
  reads two), B halved per block in a 2-block cluster (multicast), and the C stores; timed on
  the busiest SM at its share of the L2's measured ceiling (a grid of fewer tiles than SMs
  uses only part of it);
- **latency**: the stage ring; a slot freed when its MMAs complete is refilled (an L2 round
  trip, ``device.latency``, and the stage's bytes at the SM's share of the L2) and multiplied
  STAGES k-steps later: a k-step takes at least (round trip + its MMAs) / STAGES;
- **DRAM**: :func:`tiledmm.model.dram.dram_traffic` over the grouped tile order, the resident
  grid being one wave;
- **serial** (added to every level): per tile the consumers' epilogue (their C tile into the
  staging panels, or its sectors stored from registers, through the SM's data pipe), the first
  stage's round trip, the last tiles' TMA stores, and the host copies of operands whose rows TMA
  cannot read in place (CuPy's strided copy: ``hierarchy.PAD_COPY_*``, per element); TF32: the
  B^T pack (K x N floats read, N x Kp written, through DRAM, and one more launch).
"""

from __future__ import annotations

import math

from ..device.nvidia import SHARED_BYTES_PER_CLOCK, compute_capability, tensor_flop_per_clock
from ..device.spec import DeviceSpec
from .dram import dram_key, dram_traffic_cached
from .hierarchy import PAD_COPY_EFFICIENCY, PAD_COPY_LAUNCH
from .levels import Level
from .tensorcore import roof
from .warps import L2_STORE_REPEATS

__all__ = ["BK", "LINE", "tiles_of", "line_reads", "tensor_clock", "copies", "packed_k",
           "hopper_levels", "describe"]  # fmt: skip

#: K elements per stage (one 128-byte row of A), as ``hopper_gemm.cu`` fixes it for 16-bit
#: inputs (TF32: 32 floats, the configuration's ``bk``)
BK = 64
#: bytes of an L2 line (TMA reads whole lines)
LINE = 128


def tiles_of(c: dict, sms: int) -> dict:
    """The persistent schedule of configuration ``c`` (bm, bn, cluster and the problem's m, n,
    k; ``bk``, K per stage, 64 unless given): tiles along M (whole clusters) and N, the tiles, K
    stages per tile, the blocks launched and the tiles of the busiest block (SM)."""
    tm = -(-max(1, c["m"]) // c["bm"])
    tm = -(-tm // c["cluster"]) * c["cluster"]
    tn = -(-max(1, c["n"]) // c["bn"])
    clusters = max(1, sms // c["cluster"])
    ctiles = tm * tn // c["cluster"]
    per = -(-ctiles // clusters)
    return dict(tm=tm, tn=tn, tiles=tm * tn, kb=-(-c["k"] // c.get("bk", BK)), per=per,
                blocks=min(ctiles, clusters) * c["cluster"], waves=ctiles / clusters)  # fmt: skip


def line_reads(pitch: int, rows: int) -> float:
    """128-byte lines a TMA box row of 128 bytes reads, on average, where rows start ``pitch``
    bytes apart (boxes start on 128-byte multiples along the row): one where the row starts on a
    line, two where it does not (a fraction 1 - gcd(pitch, 128) / 128 of the rows)."""
    if rows <= 1 or pitch <= 0:
        return 1.0
    return 2.0 - math.gcd(pitch, LINE) / LINE


def tensor_clock(device: DeviceSpec, dtype: str) -> tuple[float, float, str]:
    """(tensor FLOP/s for ``dtype``, SM clock under that load, where the rate comes from): the
    clock is the rate over the whitepaper's FLOP per clock per SM x SMs. float32 is TF32: its
    measured roof, else the 16-bit roof x the whitepaper's TF32 / 16-bit FLOP per clock (one
    clock for both: half the rate on Hopper)."""
    per = tensor_flop_per_clock(compute_capability(device) or (9, 0))
    if dtype != "float32":
        rate, src = roof(device, dtype)
        per_clock = per.get("f16", 0)
    else:
        rate, src = roof(device, "float32", "tf32")
        per_clock = per.get("tf32", 0)
        if not src.startswith("measured") and per.get("f16"):
            half, hsrc = roof(device, "float16")
            rate = half * per_clock / per["f16"]
            src = f"{hsrc} x {per_clock}/{per['f16']} FLOP/clock (TF32 / 16-bit)"
    clock = rate / (per_clock * max(1, device.compute_units)) if rate and per_clock else 0.0
    return rate, clock, src


def copies(m: int, n: int, k: int, s: int = 2) -> tuple[tuple[str, int], ...]:
    """The operands the host copies into 16-byte aligned rows before the launch (row-major
    operands of ``s``-byte elements: A's rows are K elements, B's N; one row needs none), with
    their elements. TF32 (``s`` 4) never copies B: the B^T pack reads any strides."""
    out, per = [], 16 // s
    if k % per and m > 1:
        out.append(("A", m * k))
    if s == 2 and n % per and k > 1:
        out.append(("B", k * n))
    return tuple(out)


def packed_k(k: int) -> int:
    """Row length (floats) of the TF32 path's packed B^T: K rounded up to 4 (16-byte rows)."""
    return max(4, -(-k // 4) * 4)


def hopper_levels(c: dict, s: int, device: DeviceSpec, dtype: str) -> list[Level]:
    """The levels of a Hopper plan. ``c``: m n k bm bn cm cn stages cluster group_m epi (the
    configuration), ``pitch_a`` / ``pitch_b`` (bytes between rows as TMA reads them),
    ``c_tma`` (C's rows allow TMA stores) and ``copied`` (:func:`copies`)."""
    sms = max(1, device.compute_units)
    t = tiles_of(c, sms)
    bm, bn, kb, per, bk = c["bm"], c["bn"], t["kb"], t["per"], c.get("bk", BK)
    ncons, wm, wn = c["cm"] * c["cn"], bm // c["cm"], bn // c["cn"]
    kin = 32 // s  # K of one wgmma: 32 bytes (k16 for 16-bit, k8 for TF32)
    rate, clock, src = tensor_clock(device, dtype)
    tile_flops = 2 * bm * bn * kb * bk
    flops = t["tiles"] * tile_flops
    t_tensor = per * tile_flops / (rate / sms) if rate else 0.0
    last = t["waves"] - (per - 1)
    out = [Level("tensor cores", flops, rate, t_tensor,
                 f"wgmma m64n{wn}k{kin} from shared memory, {ncons} consumer warpgroup(s) of "
                 f"{wm}x{wn}; {src}; {t['tiles']} tiles of {bm}x{bn} over {sms} SMs: "
                 f"{t['waves']:.2f} waves, the last {last:.0%} full, {per} on the busiest SM",
                 "FLOP")]  # fmt: skip
    # shared memory: the TMA writes of a stage and the operands every wgmma reads
    smem = SHARED_BYTES_PER_CLOCK * clock * sms
    tma_w = (bm + bn) * bk * s
    # (TF32: A's fragments by ldmatrix into registers, as many bytes as a descriptor read)
    wg_r = ncons * (wm // 64) * (bk // kin) * (64 * kin + kin * wn) * s
    if smem:
        amount = t["tiles"] * kb * (tma_w + wg_r)
        out.append(Level("shared memory", amount, smem, per * kb * (tma_w + wg_r) / (smem / sms),
                         f"per stage {tma_w // 1024} KiB of TMA writes + {wg_r // 1024} KiB of "
                         f"wgmma operand reads, {SHARED_BYTES_PER_CLOCK} B/clock at the "
                         f"{clock / 1e9:.3g} GHz the tensor rate implies",
                         parts=(("TMA writes", t["tiles"] * kb * tma_w),
                                ("wgmma reads", t["tiles"] * kb * wg_r))))  # fmt: skip
    # L2: TMA reads in lines (B multicast to both blocks of a cluster), C's stores
    b_rows = c.get("b_rows", c["k"])  # TF32: B^T's N rows
    rows_a, rows_b = bm * line_reads(c["pitch_a"], c["m"]), bn * line_reads(c["pitch_b"], b_rows)
    stage_l2 = (rows_a + rows_b / c["cluster"]) * LINE
    c_tile = bm * bn * s
    stored = c_tile if c["epi"] and c["c_tma"] else c_tile * (1 + L2_STORE_REPEATS)
    l2 = device.level("L2")
    if l2:
        busy = per * (kb * stage_l2 + stored)
        why = (f"TMA reads {stage_l2 / 1024:.3g} KiB per stage in 128-byte lines "
               f"({line_reads(c['pitch_a'], c['m']):.3g} per A row, "
               f"{line_reads(c['pitch_b'], b_rows):.3g} per B row"
               + (", B multicast to the cluster's 2 blocks" if c["cluster"] > 1 else "")
               + f") + C stores; the busiest SM's {per} tiles at 1/{sms} of the L2")  # fmt: skip
        out.append(Level("L2", t["tiles"] * (kb * stage_l2 + stored), l2,
                         busy / (l2 / sms), why))  # fmt: skip
        # the stage ring: a slot released when its MMAs complete is refilled (an L2 round
        # trip and the stage's bytes at the SM's share of the L2) and multiplied again STAGES
        # k-steps later, so a k-step takes at least (trip + its MMAs) / STAGES
        trip = device.latency / (device.sustained or 1.0) if device.latency else 0.0
        trip += stage_l2 / (l2 / sms)
        step = (trip + tile_flops / kb / (rate / sms)) / c["stages"] if rate else 0.0
        out.append(Level("latency", t["tiles"] * kb, 0.0, per * kb * step,
                         f"{c['stages']} stages in flight: a {trip * 1e6:.3g} us TMA round trip "
                         f"and a stage's MMAs per {c['stages']} k-steps", "stages"))  # fmt: skip
    g = dict(m=c["m"], n=c["n"], k=c["k"], bm=bm, bn=bn, gx=t["tn"], gy=t["tm"])
    read, written = dram_traffic_cached(dram_key(g), s, device, t["blocks"], c["group_m"])
    if device.bandwidth:
        out.append(Level("DRAM", read + written, device.bandwidth,
                         (read + written) / device.bandwidth,
                         f"A and B panels through the L2 in the grouped tile order (group_m "
                         f"{c['group_m']}, {t['blocks']} tiles at a time)",
                         parts=(("read", read), ("written", written))))  # fmt: skip
    serial, why = _serial(c, t, s, device, smem / sms if smem else 0.0, l2)
    if serial:
        note = "+ " + ", ".join(why) + " (serial)"
        out = [Level(lv.name, lv.amount, lv.ceiling, lv.seconds + serial,
                     f"{lv.note}; {note}", lv.unit, lv.parts, serial) for lv in out]  # fmt: skip
    return out


def _serial(c: dict, t: dict, s: int, device: DeviceSpec, smem_sm: float,
            l2: float) -> tuple[float, list[str]]:  # fmt: skip
    """Seconds no level overlaps, and their names."""
    serial, why = 0.0, []
    c_tile = c["bm"] * c["bn"] * s
    if smem_sm:
        # the consumers' epilogue stops their MMAs: the tile into the staging panels (one
        # write of its bytes), or from registers 16 bytes per row and instruction, each
        # 32-byte sector moved whole through the data pipe
        staged = c["epi"] and c["c_tma"]
        each = (c_tile if staged else 2 * c_tile) / smem_sm
        serial += t["per"] * each
        why.append(f"{t['per']} epilogue(s) {each * 1e6:.3g} us each")
    if l2:
        first = t["blocks"] * (c["bm"] + c["bn"]) * c.get("bk", BK) * s / l2
        lat = device.latency / (device.sustained or 1.0) if device.latency else 0.0
        tail = t["blocks"] * c_tile / l2 if c["epi"] and c["c_tma"] else 0.0
        serial += first + lat + tail
        why.append(f"start and end {(first + lat + tail) * 1e6:.3g} us")
    if c["copied"] and device.bandwidth:
        rate = PAD_COPY_EFFICIENCY * device.bandwidth
        # CuPy's strided copy runs at an element rate (its index arithmetic), measured on
        # float32: a 4-byte read and write per element
        cost = sum(PAD_COPY_LAUNCH + 2 * 4 * e / rate for _, e in c["copied"])
        serial += cost
        why.append(f"host copies of {'+'.join(x for x, _ in c['copied'])} into aligned rows "
                   f"{cost * 1e6:.3g} us")  # fmt: skip
    if c.get("pack") and device.bandwidth:
        # TF32: hopper_tf32_pack_bt before the GEMM, one more launch: B (K x N) read and B^T
        # (N x Kp) written through DRAM
        cost = PAD_COPY_LAUNCH + s * sum(c["pack"]) / device.bandwidth
        serial += cost
        why.append(f"B^T pack {cost * 1e6:.3g} us")
    return serial, why


def describe(c: dict, s: int, shared: int, threads: int) -> str:
    """The kernel in words (``str(plan)``)."""
    ncons, wm, wn = c["cm"] * c["cn"], c["bm"] // c["cm"], c["bn"] // c["cn"]
    bk, kin = LINE // s, 32 // s  # a 128-byte row of K; a wgmma's K (32 bytes)
    stage = (c["bm"] + c["bn"]) * bk * s
    store = ("C staged in shared memory and written by TMA stores that run on while the next "
             "tile starts" if c["epi"] and c["c_tma"] else "C stored from registers")  # fmt: skip
    multicast = (f"; clusters of {c['cluster']} blocks along M share B by TMA multicast"
                 if c["cluster"] > 1 else "")  # fmt: skip
    tf32 = (" TF32: B packed to B^T (K-major, rounded) by one more launch first, A rounded in "
            "registers (ldmatrix + cvt.rna);" if s == 4 else "")  # fmt: skip
    return (f"  Hopper kernel (TMA + wgmma, sm_90a):{tf32} block tile {c['bm']}x{c['bn']}x{bk}, "
            f"{c['stages']} TMA stages of A {c['bm']}x{bk} and B {bk}x{c['bn']} "
            f"({stage // 1024} KiB each; {shared / 1024:.1f} KiB of shared memory per block); "
            f"{threads // 128} warpgroups: one producer (one thread issues the TMA copies), "
            f"{ncons} consumer(s) of {wm}x{wn} issuing wgmma m64n{wn}k{kin} (f32 sums); a "
            f"persistent grid walks the tiles in a grouped order (group_m {c['group_m']}); "
            f"{store}{multicast}")  # fmt: skip
