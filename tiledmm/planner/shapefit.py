"""Per-product adjustments of a tile geometry from the tuning database (issue 11): the same
class entry serves products of different grids and orientations. ``resolve_split`` turns
``split_k="auto"`` into slices for the grid, ``fit_grid`` halves a register tile where the
planner predicts the smaller tile faster (small grids, partial last waves), ``orient`` turns a
skinny product's tile to its short side and ``fit_short_side`` trims that side to the
product. Pure functions of the geometry, the product and the device; dispatch applies them on
GPUs."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from .geometry import Geometry

__all__ = ["MIN_SLICE", "MAX_SPLIT", "MIN_TILE", "FIT_MARGIN", "MAX_FIT_WAVES",
           "SMALL_GRID_BLOCKS_PER_SM",
           "auto_split", "gemv_orient", "resolve_split", "halvings", "fit_grid", "fit_mma_grid",
           "orient",
           "fit_short_side", "for_product"]  # fmt: skip


#: K elements per slice at least, and slices at most, for ``split_k="auto"``
MIN_SLICE, MAX_SPLIT = 256, 16


def auto_split(m: int, n: int, k: int, block_tile: tuple, sms: int, batch: int = 1,
               per_sm: float = 2.0) -> int:  # fmt: skip
    """K slices for ``split_k="auto"``: double them while the grid (blocks x slices) is under
    ``per_sm`` blocks per SM (``SPLIT_PER_SM``: two for "auto", 0.9 for "fill"), each slice keeps at
    least ``MIN_SLICE`` of K, and at most ``MAX_SPLIT`` (64x4096x4096 with 64x64 tiles on 132
    SMs: 64 blocks, 8 slices; 16x8192x8192: 4)."""
    bm, bn = block_tile[0], block_tile[1]
    blocks = -(-m // bm) * -(-n // bn) * max(1, batch)
    s = 1
    while blocks * s < per_sm * max(1, sms) and k // (2 * s) >= MIN_SLICE and s < MAX_SPLIT:
        s *= 2
    return s


#: ``split_k="fill"``: slices only until the grid covers this share of the SMs (groups of 1024
#: items, two at most per SM: x @ A at 1x4096x4096 in 128 groups of 32 columns, unsplit, ran
#: 20.9 us on the H200 where 16 slices in one pass took 21.2-21.5).
FILL_PER_SM = 0.9
#: blocks per SM each ``split_k`` mode slices K for
SPLIT_PER_SM = {"auto": 2.0, "fill": FILL_PER_SM}


#: The smallest block side :func:`fit_grid` halves a register tile to (a ``min_tile`` option
#: overrides it).
MIN_TILE = 32
#: Grids of more waves than this keep the stored tile: a partial last wave then costs at most
#: 1/5 of the time, less than the model's error on the smaller tiles' own speed (it puts 128x64
#: at 1.03-1.04x of 128x128, the H200 measures 1.12x), which picked 64x64 for 8192x8192x64
#: (16 waves; 0.85 of cuBLAS against 1.12 for 128x128, benches/results/h200-shapes.json).
MAX_FIT_WAVES = 4
#: numba-cuda's tiles halve while their grid has fewer blocks than this per SM.
SMALL_GRID_BLOCKS_PER_SM = 1.5
#: A halved tile is taken only when predicted this much faster (near-ties keep the larger
#: tile: the model puts 128x64 at 1.03-1.04x the time of 128x128 where both fill their waves,
#: the H200 measures 1.12x at 8192^3; 1000x3000x777, predicted 0.955x, measured 0.95x/0.76x).
FIT_MARGIN = 0.03


def halvings(geo: Geometry) -> list[Geometry]:
    """``geo``'s register tile and its successive halvings, the longer block side first (N on
    a square), thread tile with it (vector widths clipped), while block sides stay >= the
    floor (``min_tile``, else :data:`MIN_TILE`) and thread tiles even and >= 2: 128x128/8x8,
    128x64/8x4, 64x64/4x4, 64x32/4x2, 32x32/2x2; a side whose thread tile is down to 2 stops
    and the other goes on (64x128/8x4: 64x64/8x2, 32x64/4x2). Threads per block stay the
    same."""
    bm, bn, bk = geo.block_tile
    tm, tn = geo.thread_tile
    opts = dict(geo.options)
    floor = int(opts.get("min_tile", MIN_TILE))
    out = [geo]
    while True:
        n_ok = tn >= 4 and tn % 2 == 0 and bn // 2 >= floor
        m_ok = tm >= 4 and tm % 2 == 0 and bm // 2 >= floor
        if n_ok and (bn >= bm or not m_ok):
            bn, tn = bn // 2, tn // 2
            if "vn" in opts:
                opts["vn"] = min(int(opts["vn"]), tn)
        elif m_ok:
            bm, tm = bm // 2, tm // 2
            if "vm" in opts:
                opts["vm"] = min(int(opts["vm"]), tm)
        else:
            return out
        if min(tm, tn) < 2:
            return out
        out.append(replace(geo, block_tile=(bm, bn, bk), thread_tile=(tm, tn),
                           options=tuple(sorted(opts.items()))))  # fmt: skip


def fit_grid(geo: Geometry, m: int, n: int, k: int, device: Any, dtype: str = "float32",
             backend: str = "", batch: int = 1) -> Geometry:  # fmt: skip
    """``geo`` or one of its :func:`halvings`, whichever the planner predicts fastest for this
    product on ``device`` (its wave quantization and occupancy: fewer, larger tiles leave SMs
    idle on a small grid or in a last partial wave; smaller tiles reuse less), for grids of at
    most :data:`MAX_FIT_WAVES` waves of the stored tile. Near-ties
    (:data:`FIT_MARGIN`) keep the larger tile. Measured on the H200 (benches/studies/tile_choice.py,
    CuPy and OpenCL, benches/results/logs/h200-tile-choice-s6.txt), the model ranks the
    candidates right: 64x32 at 512^3 (0.84 of cuBLAS against 0.65 for 64x64), 128x64 at 1024^3,
    1536^3, 3072^3 (0.90 against 0.78 for 128x128: 2.2 waves of 128x128 blocks at 2 per SM)
    and 1000x3000x777, 128x128 from 2048^3 and at 4096^3-16384^3. That is the shared C
    sources' register tiles (their ``vn`` option). numba-cuda's tiles (``min_tile`` without
    ``vn``), whose model ranks 128x64 first at 1024^3 where 64x64 measured 0.53 of cuBLAS
    against 0.47, keep the rule they were measured with (benches/studies/numba_classes.py): halve
    while
    the grid is under ``SMALL_GRID_BLOCKS_PER_SM`` blocks per SM. Tiles with a split-K, and
    batches (their class tile is measured: 64x64 lost to 128x64 on all four batched shapes,
    benches/results/logs/h200-shapes-0255.json), are left alone."""
    from .make import make_plan
    from .plans import PlanError

    opts = dict(geo.options)
    if ("vn" not in opts and "min_tile" not in opts) or opts.get("split_k", 1) not in (1, "1"):
        return geo
    if batch > 1:
        return geo
    if "vn" not in opts:  # numba-cuda's tiles: the grid rule
        sms = max(1, device.compute_units)
        for cand in halvings(geo):
            bm, bn = cand.block_tile[:2]
            if -(-m // bm) * -(-n // bn) >= SMALL_GRID_BLOCKS_PER_SM * sms:
                break
        if cand is geo:
            return geo
        note = f"{geo.source}; halved to {bm}x{bn} for a grid of {m}x{n} on {sms} SMs"
        return replace(cand, source=note)
    best, best_t = geo, None
    for cand in halvings(geo):
        try:
            plan = make_plan(m, n, k, dtype=dtype, kernel="register", device=device,
                             geometry=cand, backend=backend)  # fmt: skip
            t = plan.predicted_seconds
        except PlanError:
            continue
        if best_t is None and plan.occupancy.waves > MAX_FIT_WAVES:
            return geo  # many waves: the stored tile (see MAX_FIT_WAVES)
        if best_t is None or t < best_t * (1 - FIT_MARGIN):
            best, best_t = cand, t
    if best is geo:
        return geo
    bm, bn = best.block_tile[:2]
    note = f"{geo.source}; halved to {bm}x{bn}, predicted fastest for {m}x{n}x{k}"
    return replace(best, source=note)


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


def fit_short_side(geo: Geometry, m: int, n: int) -> Geometry:
    """``geo`` (already turned by :func:`orient`) with the block side along a skinny product's
    short dimension halved, thread tile with it (vector width clipped), while that side is at
    least twice what the product needs (its short dimension rounded up to a power of two, and
    the floor: ``min_tile``, else :data:`MIN_TILE`). Those rows are padding: the block does
    the same useful work with half the FMAs, on the same grid, and the K slices stay. A class
    tile tuned on 64-row products then serves a 16-row one (a cold-started tuner's 64x128 ran
    16x8192x8192 at 0.57 of the shipped 32x64 on the H200, logs/h200-tune-coldstart-cupy.log).
    Only the shared C sources' register tiles (``vn``) and numba-cuda's (``min_tile``)."""
    bm, bn, bk = geo.block_tile
    tm, tn = geo.thread_tile
    opts = dict(geo.options)
    if "vn" not in opts and "min_tile" not in opts:
        return geo
    floor = int(opts.get("min_tile", MIN_TILE))
    short_m = m < n
    side, t, need = (bm, tm, m) if short_m else (bn, tn, n)
    need = max(floor, 1 << max(0, need - 1).bit_length())
    while side >= 2 * need and t >= 4 and t % 2 == 0:
        side, t = side // 2, t // 2
    if side == (bm if short_m else bn):
        return geo
    vec = "vm" if short_m else "vn"
    if vec in opts:
        opts[vec] = min(int(opts[vec]), t)
    bt, tt = ((side, bn, bk), (t, tn)) if short_m else ((bm, side, bk), (tm, t))
    note = f"{geo.source}; short side fitted to {bt[0]}x{bt[1]} for a {m}x{n} output"
    return replace(geo, block_tile=bt, thread_tile=tt, options=tuple(sorted(opts.items())),
                   source=note)  # fmt: skip


def gemv_orient(geo: Geometry, m: int, n: int) -> Geometry:
    """A gemv geometry for this product's orientation. Its ``xb_bn`` and ``xb_ks`` options give
    the layout for x @ B (M short: ``gemv.cl``'s GEMV_T 0, where a warp reads BN columns of a B
    row, so 512-byte rows need BN = 128 floats), which then runs one pass with K slices
    (``onepass``, ``split_k="auto"``; with ``xb_fill``, ``"fill"``: slices only where the
    groups do not cover the SMs) and ``xb_gu`` 16-byte loads in flight per item; A @ x (N short:
    a warp reads KS elements along K) keeps the block tile, ``ks`` and ``gu``. One class entry
    serves both (H200: x @ A at 1x8192x8192 64-67 us in 128-column groups, 70 us in the
    16-column groups A @ x wants; 63.8 us in 32-column groups of 1024 items with 16 loads in
    flight each and no slices, where A @ x with 16 in flight slows from 20 to 34 us)."""
    opts = dict(geo.options)
    if "xb_bn" not in opts:
        return geo
    bn, ks = int(opts.pop("xb_bn")), int(opts.pop("xb_ks", opts.get("ks", 8)))
    gu, fill = opts.pop("xb_gu", None), opts.pop("xb_fill", 0)
    if n < m:
        return replace(geo, options=tuple(sorted(opts.items())))
    opts.update(ks=ks, onepass=1, split_k="fill" if fill else "auto")
    if gu:
        opts["gu"] = int(gu)
    bt = (geo.block_tile[0], bn, geo.block_tile[2])
    return replace(geo, block_tile=bt, options=tuple(sorted(opts.items())))


def resolve_split(geo: Geometry, m: int, n: int, k: int, sms: int, batch: int = 1) -> Geometry:
    """``geo`` for this product: its gemv orientation (:func:`gemv_orient`) and ``split_k="auto"``
    replaced by :func:`auto_split` (a geometry with neither is returned as it is)."""
    geo = gemv_orient(geo, m, n)
    opts = dict(geo.options)
    per_sm = SPLIT_PER_SM.get(opts.get("split_k"))
    if per_sm is None:
        return geo
    opts["split_k"] = auto_split(m, n, k, geo.block_tile, sms, batch, per_sm)
    return replace(geo, options=tuple(sorted(opts.items())))


def fit_mma_grid(geo: Geometry, m: int, n: int, device: Any, dtype: str) -> Geometry:
    """A 16-bit mma tile of 8 warps (one block per SM) halved along its longer side to 4 warps,
    two blocks per SM (at most 3 stages, so that two fit in shared memory), where its grid has
    fewer blocks than the device has SMs. H200 float16 (benches/studies/mma_results.py, session 10):
    1024^3 ran at 0.26 of the vendor with 32 blocks of 128x256 and 0.38 with 64 of 128x128;
    2048^3 (128 blocks) alike with both; from 4096^3 128x256 led (0.49 against 0.47)."""
    (bm, bn, bk), (wm, wn) = geo.block_tile, geo.thread_tile
    if dtype not in ("float16", "bfloat16") or (bm // wm) * (bn // wn) != 8:
        return geo
    if "fit" in dict(geo.options):  # the model default: the planner picks its size itself
        return geo
    if -(-m // bm) * -(-n // bn) >= device.compute_units:
        return geo
    if bn >= bm and (bn // wn) % 2 == 0:
        bn //= 2
    elif (bm // wm) % 2 == 0:
        bm //= 2
    else:
        return geo
    opts = dict(geo.options)
    opts.update(min_blocks=2, stages=min(3, int(opts.get("stages", 3))))
    note = f"{geo.source}; halved to {bm}x{bn} (two blocks per SM) for a grid of {m}x{n}"
    return replace(geo, block_tile=(bm, bn, bk), options=tuple(sorted(opts.items())), source=note)


def for_product(geo: Geometry, family: str, m: int, n: int, k: int, device: Any, shape_class: str,
                batch: int = 1, dtype: str = "float32", backend: str = "") -> Geometry:  # fmt: skip
    """What runs for a stored geometry on this product (dispatch, the tuner and the benches
    apply the same steps): on a GPU a register tile is turned to a skinny product's short side
    and fitted to the grid (:func:`fit_grid`), a 16-bit mma tile too (:func:`fit_mma_grid`);
    ``split_k="auto"`` becomes a slice count."""
    sms = device.compute_units
    if family == "register" and device.is_gpu:
        if shape_class == "skinny_mn":
            geo = fit_short_side(orient(geo, m, n), m, n)
        geo = fit_grid(geo, m, n, k, device, dtype, backend, batch)
    if family == "mma" and device.is_gpu and batch == 1:
        geo = fit_mma_grid(geo, m, n, device, dtype)
    return resolve_split(geo, m, n, k, sms, batch)
