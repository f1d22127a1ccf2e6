"""The DRAM/L2 reuse model of a tiled GPU launch (part of the traffic model,
``tiledmm.model.hierarchy``).

Pure Python (no device access): which A and B panels the launched blocks read, in their raster
(or grouped) order, how much of a panel read again still sits in the L2 (random replacement over
its shared capacity), and how much of C's write-back the L2 still holds when the kernel ends.
"""

from __future__ import annotations

import functools
import math

from ..device.spec import DeviceSpec

__all__ = [
    "dram_traffic",
    "dram_traffic_cached",
    "dram_key",
    "miss_fraction",
    "scan_miss_fraction",
    "L2_SHARED_FRACTION",
    "LOCKSTEP_BLOCKS",
]


#: Fraction of the L2 that holds operand data read by every SM. Hopper's L2 is two
#: partitions and a line read from both halves of the chip is cached in both, so data shared by
#: all SMs sees about half of it; 0.535 (33.7 MB of the H200's 60 MiB) is fitted by the float64
#: tiled 2048^3 counter, where B (33.5 MB) sits just above it (docs/model.md).
L2_SHARED_FRACTION = 0.535
#: An SM holding at most this many blocks runs them in lockstep with the other SMs' blocks of
#: the same wave (a wave starts together and shares every B tile it reads at the same time);
#: with more, completions spread over the block time and block rows start staggered.
LOCKSTEP_BLOCKS = 4


@functools.lru_cache(maxsize=4096)
def miss_fraction(x: float) -> float:
    """Misses per reuse of a working set ``x`` times the cache, under random replacement: a
    line survives the evictions between its two uses, h = exp(-x (1 - h)); 0 while it fits."""
    if x <= 1.0:
        return 0.0
    lo, hi = 0.0, 1.0 - 1e-12  # the root h < 1 of exp(-x (1 - h)) - h
    for _ in range(60):
        h = (lo + hi) / 2
        if math.exp(-x * (1 - h)) > h:
            lo = h
        else:
            hi = h
    return 1.0 - lo


def scan_miss_fraction(x: float) -> float:
    """Misses per reuse of a working set ``x`` times the cache under the best replacement (a
    cache that keeps a fixed part of a set read again in the same order hits on that part)."""
    return max(0.0, 1.0 - 1.0 / x) if x > 1.0 else 0.0


def _block_order(p: int, gx: int, gy: int, group: int) -> tuple[int, int]:
    """(block row, block column) of the p-th launched block (register.cl's GROUP_M order)."""
    if group <= 1:
        return p // gx, p % gx
    per = group * gx
    first = (p // per) * group
    rows = min(gy - first, group)
    return first + (p % per) % rows, (p % per) // rows


def _window(p0: int, p1: int, gx: int, gy: int, group: int) -> tuple[range | set, range | set]:
    """Block rows and columns touched by the launched blocks p0 .. p1 - 1."""
    if group > 1:
        rows, cols = set(), set()
        for p in range(p0, p1):
            r, c = _block_order(p, gx, gy, group)
            rows.add(r)
            cols.add(c)
        return rows, cols
    rows = range(p0 // gx, (p1 - 1) // gx + 1)
    if p1 - p0 >= gx:
        return rows, range(gx)
    c0, c1 = p0 % gx, (p1 - 1) % gx
    return rows, (range(c0, c1 + 1) if c0 <= c1 else set(range(c0, gx)) | set(range(c1 + 1)))


def dram_traffic(
    g: dict, s: int, dev: DeviceSpec, resident: int, group: int = 1, convoys: bool = False
) -> tuple[float, float]:
    """(read, written) bytes between DRAM and L2 for a tiled launch of ``resident`` blocks at
    a time, launched in raster (or ``group``-row) order.

    Reads: the launch is cut into windows of blocks that share what they read: a wave of
    resident blocks when they run in lockstep, else one block row's worth of blocks. A window
    reads the A row panels and B column panels it touches; a panel read by an earlier window
    comes again from DRAM with :func:`miss_fraction` of (bytes the windows since then touched)
    / (the L2's shared capacity). Writes: C, less the dirty lines of the last wave's epilogue
    still in the L2 when the kernel ends (the counter sees only what leaves during the kernel;
    random replacement among the whole L2 keeps cap (1 - exp(-c/cap)) of c bytes).

    ``convoys``: blocks whose speed follows their L2 hits (the naive family: a line from DRAM
    costs it four fill wavefronts, one from the L2 one) catch up with the block ahead in their
    column and read its lines while the L2 still holds them; a panel read again misses
    :func:`scan_miss_fraction` of it (the counters sit at or below it, docs/model.md)."""
    m, n, k, bm, bn, gx, gy = g["m"], g["n"], g["k"], g["bm"], g["bn"], g["gx"], g["gy"]
    blocks = gx * gy
    l2 = dev.cache("L2")
    if not blocks:
        return 0.0, 0.0
    if not l2:
        return float((m * k + k * n) * s), float(m * n * s)
    cap = l2 * L2_SHARED_FRACTION
    misses = scan_miss_fraction if convoys else miss_fraction
    lockstep = resident <= LOCKSTEP_BLOCKS * max(1, dev.compute_units)
    window = max(1, resident if lockstep else gx)
    a_panel = [min(bm, m - r * bm) * k * s for r in range(gy)]
    b_panel = [min(bn, n - c * bn) * k * s for c in range(gx)]
    # staggered rows: the A panels of the other block rows in flight stay live as well
    in_flight = 0.0 if lockstep else max(0.0, resident / gx - 1) * sum(a_panel) / gy
    last: dict[tuple[str, int], int] = {}
    foot: list[float] = [0.0]  # prefix sums of the windows' footprints
    read = 0.0
    for w, p0 in enumerate(range(0, blocks, window)):
        rows, cols = _window(p0, min(blocks, p0 + window), gx, gy, group)
        panels = [(("A", r), a_panel[r]) for r in rows] + [(("B", c), b_panel[c]) for c in cols]
        for key, size in panels:
            if key in last:
                dist = foot[w] - foot[last[key]] + in_flight
                read += size * misses(dist / cap)
            else:
                read += size
            last[key] = w
        foot.append(foot[-1] + sum(size for _, size in panels))
    # the last wave's C
    waves = math.ceil(blocks / max(1, resident))
    tail = blocks - (waves - 1) * resident
    c_all = m * n * s
    c_tail = min(c_all, tail * bm * bn * s)
    kept = l2 * (1 - math.exp(-c_tail / l2))
    return read, max(0.0, c_all - kept)


DRAM_KEYS = ("m", "n", "k", "bm", "bn", "gx", "gy")


def dram_key(g: dict) -> tuple[int, ...]:
    return tuple(int(g[key]) for key in DRAM_KEYS)


@functools.lru_cache(maxsize=512)
def dram_traffic_cached(
    key: tuple[int, ...], s: int, dev: DeviceSpec, resident: int, group: int, convoys: bool = False
) -> tuple[float, float]:
    return dram_traffic(dict(zip(DRAM_KEYS, key, strict=True)), s, dev, resident, group, convoys)
