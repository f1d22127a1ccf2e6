"""Per-product adjustments of a tile geometry from the tuning database (issue 11): the same
class entry serves products of different grids and orientations. ``resolve_split`` turns
``split_k="auto"`` into slices for the grid, ``fit_grid`` halves a register tile whose grid
leaves SMs idle, ``orient`` turns a skinny product's tile to its short side. Pure functions of
the geometry, the product and the device's SM count; dispatch applies them on GPUs."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from .backend import Geometry

__all__ = ["MIN_SLICE", "MAX_SPLIT", "SMALL_GRID_BLOCKS_PER_SM",
           "FILLED_GRID_BLOCKS_PER_SM", "auto_split", "resolve_split",
           "fit_grid", "orient", "for_product"]  # fmt: skip


#: K elements per slice at least, and slices at most, for ``split_k="auto"``
MIN_SLICE, MAX_SPLIT = 256, 16


def auto_split(m: int, n: int, k: int, block_tile: tuple, sms: int, batch: int = 1) -> int:
    """K slices for ``split_k="auto"``: double them while the grid (blocks x slices) is under
    two blocks per SM, each slice keeps at least ``MIN_SLICE`` of K, and at most ``MAX_SPLIT``
    (64x4096x4096 with 64x64 tiles on 132 SMs: 64 blocks, 8 slices; 16x8192x8192: 4)."""
    bm, bn = block_tile[0], block_tile[1]
    blocks = -(-m // bm) * -(-n // bn) * max(1, batch)
    s = 1
    while blocks * s < 2 * max(1, sms) and k // (2 * s) >= MIN_SLICE and s < MAX_SPLIT:
        s *= 2
    return s


#: Fewer blocks than this per SM: the register tile is halved along N (see :func:`fit_grid`).
SMALL_GRID_BLOCKS_PER_SM = 1.5
#: After the first halving, a grid with at least this many blocks per SM stays (one block on
#: nearly every SM): 1024^3 runs 128x64 (128 blocks, 0.86 of cuBLAS) rather than 64x64 (0.79).
FILLED_GRID_BLOCKS_PER_SM = 0.9


def fit_grid(geo: Geometry, m: int, n: int, sms: int, batch: int = 1) -> Geometry:
    """``geo`` with its register tile halved along N (block and thread tile) when its grid
    leaves SMs idle: fewer than ``SMALL_GRID_BLOCKS_PER_SM`` blocks per SM. One wave of
    half-size blocks spreads the same work over twice the SMs, and the halved tile keeps the
    threads per block. Measured on the H200 (benches/tile_choice.py, both CuPy and OpenCL):
    128x64 beats 128x128 at 1024^3 (0.91 / 1.03 of cuBLAS against 0.54 / 0.57),
    257x4097x1031 and 1000x3000x777; from 2048^3 (1.9 blocks per SM) 128x128 wins. Only
    the shared C sources' register tiles (their ``vn`` option; measured there), once; a tile
    with the option ``min_tile`` (numba-cuda's) keeps halving, its longer side first, while
    the grid is small and both block sides stay >= ``min_tile`` (thread tiles >= 2): after
    the first halving only while the grid fills fewer than ``FILLED_GRID_BLOCKS_PER_SM`` per
    SM (benches/results/logs/h200-small-grid.log: 512^3 and 256^3 gain from 64x64 and 32x32,
    1024^3 loses 0.86 -> 0.79 of cuBLAS going from 128x64, 128 blocks, to 64x64). Tiles
    with a split-K, or (``vn``) already narrower than 128, are left alone."""
    bm, bn, bk = geo.block_tile
    tm, tn = geo.thread_tile
    opts = dict(geo.options)
    floor = int(opts.get("min_tile", 0))
    if ("vn" not in opts and not floor) or opts.get("split_k", 1) not in (1, "1"):
        return geo
    blocks = first = -(-m // bm) * -(-n // bn) * max(1, batch)
    limit = SMALL_GRID_BLOCKS_PER_SM
    while blocks < limit * max(1, sms):
        n_ok = tn >= 4 and tn % 2 == 0 and (bn // 2 >= floor if floor else bn >= 128)
        m_ok = floor > 0 and tm >= 4 and tm % 2 == 0 and bm // 2 >= floor
        if n_ok and (bn >= bm or not m_ok):
            bn, tn = bn // 2, tn // 2
            if "vn" in opts:
                opts["vn"] = min(int(opts["vn"]), tn)
        elif m_ok:
            bm, tm = bm // 2, tm // 2
            if "vm" in opts:
                opts["vm"] = min(int(opts["vm"]), tm)
        else:
            break
        blocks = -(-m // bm) * -(-n // bn) * max(1, batch)
        if not floor:
            break
        limit = FILLED_GRID_BLOCKS_PER_SM
    if (bm, bn) == geo.block_tile[:2]:
        return geo
    note = f"{geo.source}; halved to {bm}x{bn} for a grid of {first} blocks on {sms} SMs"
    return replace(geo, block_tile=(bm, bn, bk), thread_tile=(tm, tn),
                   options=tuple(sorted(opts.items())), source=note)  # fmt: skip


def orient(geo: Geometry, m: int, n: int) -> Geometry:
    """``geo`` with its block and thread tiles (and vector widths) transposed when its short
    block side lies along the product's long side: a skinny product's tile is narrow along
    the short dimension (M or N <= 64), whichever of the two it is. On the H200 one class
    entry served both orientations badly: CuPy's 64x32 ran 16x8192x8192 at 0.48 of cuBLAS
    where OpenCL's 32x64 ran it at 0.99 (benches/results/h200-shapes.json). Only the shared C
    sources' register tiles (their ``vn`` option) and tiles with ``min_tile`` (numba-cuda's)."""
    bm, bn, bk = geo.block_tile
    tm, tn = geo.thread_tile
    opts = dict(geo.options)
    fits = "vn" in opts or "min_tile" in opts
    if not fits or bm == bn or (m < n) == (bm < bn) or m == n:
        return geo
    if "vn" in opts:
        opts["vm"], opts["vn"] = opts.get("vn", 1), opts.get("vm", 1)
    note = f"{geo.source}; transposed to {bn}x{bm} for a {m}x{n} output"
    return replace(geo, block_tile=(bn, bm, bk), thread_tile=(tn, tm),
                   options=tuple(sorted(opts.items())), source=note)  # fmt: skip


def resolve_split(geo: Geometry, m: int, n: int, k: int, sms: int, batch: int = 1) -> Geometry:
    """``geo`` with ``split_k="auto"`` replaced by :func:`auto_split` for this product (a
    geometry without it is returned as it is)."""
    opts = dict(geo.options)
    if opts.get("split_k") != "auto":
        return geo
    opts["split_k"] = auto_split(m, n, k, geo.block_tile, sms, batch)
    return replace(geo, options=tuple(sorted(opts.items())))


def for_product(geo: Geometry, family: str, m: int, n: int, k: int, device: Any, shape_class: str,
                batch: int = 1) -> Geometry:  # fmt: skip
    """What runs for a stored geometry on this product (dispatch, the tuner and the benches
    apply the same steps): on a GPU a register tile is turned to a skinny product's short side
    and fitted to the grid; ``split_k="auto"`` becomes a slice count."""
    sms = device.compute_units
    if family == "register" and device.is_gpu:
        if shape_class == "skinny_mn":
            geo = orient(geo, m, n)
        geo = fit_grid(geo, m, n, sms, batch)
    return resolve_split(geo, m, n, k, sms, batch)
