"""Candidate geometries per shape class for the shared C sources (what the shape sweep and
the tuner may try beyond the square-shape search space), with the reasons in comments.

Classes are ``tiledmm.core.tuning_check.SHAPE_CLASSES``. Small grids (few blocks for the device) get
smaller block tiles and/or split-K (``split_k``: K slices into a workspace, then a reduction);
skinny and vector products get the naive family's gemv path (``gemv``: K split over ``ks``
work-items per output) and small register tiles; batched products keep the square tiles and
fill the device through the batch (grid z). ``split_k="auto"`` picks the K slices per product
from the grid and the SM count (``tiledmm.planner.shapefit.auto_split``; ``kernel="auto"`` and the
sweep
resolve it before planning). Every resolved candidate passes ``kernels.defines``.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from tiledmm import DeviceSpec, Geometry

from . import tables

__all__ = ["CANDIDATES", "candidates", "shipped_gflops"]


def _g(bt, tt=(1, 1), **opts) -> Geometry:
    return Geometry(bt, tt, tuple(sorted(opts.items())))


_REG = dict(use_local=1, vm=4, vn=4, pad=4)
_SQUARE = [
    _g((128, 128, 16), (8, 8), **_REG, stages=2),
    _g((128, 64, 16), (8, 4), **_REG, stages=2),
    _g((64, 64, 16), (4, 4), **_REG, stages=2),
]
_SMALL_GRID = [
    _g((64, 64, 16), (4, 4), **_REG, stages=2),
    _g((64, 64, 16), (4, 4), **_REG, stages=2, split_k=2),
    _g((128, 128, 16), (8, 8), **_REG, stages=2, split_k=2),
    _g((128, 128, 16), (8, 8), **_REG, stages=2, split_k=4),
    _g((64, 32, 16), (4, 4), **_REG, stages=2),
]
# 128x64 (8x4) at 3 resident blocks per SM: NVRTC gives it 87 registers (2 blocks), 80 with
# __launch_bounds__(256, 3) (16-20 bytes of spills): measure which wins (docs/kernels.md)
_MB3 = _g((128, 64, 16), (8, 4), **_REG, stages=2, min_blocks=3)
# K slices from the grid: split-K only where the block tiles leave SMs idle (``auto_split``)
_AUTO128 = _g((128, 128, 16), (8, 8), **_REG, stages=2, split_k="auto")
# M or N <= 64: tiles that are 32 or 64 wide on the short side, and enough K slices that
# blocks x slices is 2-8 per SM (64x4096x4096 with 64x64 tiles: 64 blocks; 4096x32: 64 or 128)
_SKINNY = [
    _g((32, 64, 16), (4, 4), **_REG, stages=2),
    _g((32, 64, 16), (4, 4), **_REG, stages=2, split_k=4),
    _g((64, 64, 16), (4, 4), **_REG, stages=2, split_k=8),
    _g((16, 64, 16), (2, 4), use_local=1, vm=2, vn=4, pad=4, split_k=4),
    _g((64, 64, 16), (4, 4), **_REG, stages=2, split_k=16),
    _g((32, 64, 16), (4, 4), **_REG, stages=2, split_k=8),
    _g((64, 32, 16), (4, 4), **_REG, stages=2, split_k=8),
    _g((128, 32, 16), (8, 4), **_REG, stages=2, split_k=4),
    _g((32, 128, 16), (4, 8), **_REG, stages=2, split_k=4),
    _g((64, 128, 16), (8, 8), **_REG, stages=2, split_k=8),
    _g((128, 64, 16), (8, 8), **_REG, stages=2, split_k=8),
    _g((64, 64, 16), (4, 4), **_REG, stages=2, split_k="auto"),
    _g((32, 64, 16), (4, 4), **_REG, stages=2, split_k="auto"),
    _g((64, 32, 16), (4, 4), **_REG, stages=2, split_k="auto"),
]
# the gemv path (gemv.cl): (short-side outputs per group, long-side outputs per group, 1) and
# ks; THREADS = BN * ks; gu: 16-byte loads in flight per item (default 4). Vectors want many
# groups (>= 2 per SM) of 256-512 items and 16-byte loads; local memory is BM * BN * ks * 4
# elements (x @ B), at most 48 KiB.
# one pass (``onepass``, x @ B): a warp reads a whole 512-byte row segment (32 items x 16 bytes:
# BN = 128 floats or 64 doubles), K slices over groups so that the grid fills the device
# (split_k "auto"), and the last group of each column block adds the slices in the same launch.
# The vector sweep on the H200 (2026-12-01, geomean over 1x4096x4096, 4096x1x4096, 1x8192x8192,
# 8192x1x8192): (1, 32, 1) ks 32 with xb 128/2 1822 GFLOP/s float32 through CuPy, against 1766
# without the x @ B layout; float64 xb 64/8 995 against 970. OpenCL's vector entries keep these;
# CuPy's took the cuBLAS-like layout below on 2026-12-02 (geometry.json's sources)
_ONEPASS = [
    _g((1, 128, 1), gemv=1, ks=2, split_k="auto", onepass=1),
    _g((1, 128, 1), gemv=1, ks=4, split_k="auto", onepass=1),
    _g((1, 64, 1), gemv=1, ks=4, split_k="auto", onepass=1),
    _g((1, 64, 1), gemv=1, ks=8, split_k="auto", onepass=1),
    _g((1, 128, 1), gemv=1, ks=2, split_k="auto", onepass=1, gu=8),
    # narrower groups that also suit A @ x (where the slices stay 1: its grid is full already)
    _g((1, 16, 1), gemv=1, ks=32, split_k="auto", onepass=1),
    _g((1, 32, 1), gemv=1, ks=16, split_k="auto", onepass=1),
    _g((1, 32, 1), gemv=1, ks=8, split_k="auto", onepass=1),
    # one entry for both orientations (``shapefit.gemv_orient``): A @ x in the block tile and
    # ks, x @ B in xb_bn columns x xb_ks lanes, one pass
    _g((1, 16, 1), gemv=1, ks=32, xb_bn=128, xb_ks=2),
    _g((1, 32, 1), gemv=1, ks=32, xb_bn=128, xb_ks=2),
    _g((1, 16, 1), gemv=1, ks=32, xb_bn=64, xb_ks=4),
    _g((1, 32, 1), gemv=1, ks=32, xb_bn=64, xb_ks=8),
    _g((1, 16, 1), gemv=1, ks=32, xb_bn=128, xb_ks=4),
    _g((1, 8, 1), gemv=1, ks=32, xb_bn=128, xb_ks=2),
    # x @ B as cuBLAS's gemv runs it (Nsight Compute: 128 blocks of 512 threads, 128 registers,
    # no slices): 32-column groups of 1024 items, 16 loads in flight each, slices only to fill
    _g((1, 32, 1), gemv=1, ks=32, xb_bn=32, xb_ks=32, xb_gu=16, xb_fill=1),
    _g((1, 16, 1), gemv=1, ks=32, xb_bn=32, xb_ks=32, xb_gu=16, xb_fill=1),
    _g((1, 32, 1), gemv=1, ks=32, xb_bn=32, xb_ks=32, xb_gu=8, xb_fill=1),
    # the same with the register budget of one group per SM (CUDA's __launch_bounds__ minimum
    # 1: 64 registers, where ptxas otherwise takes 32 and keeps two loads in flight per item)
    _g((1, 32, 1), gemv=1, ks=32, xb_bn=32, xb_ks=32, xb_gu=16, xb_fill=1, min_blocks=1),
]
_GEMV = _ONEPASS + [
    _g((1, 64, 1), gemv=1, ks=8),
    _g((1, 128, 1), gemv=1, ks=4),
    _g((2, 64, 1), gemv=1, ks=8),
    _g((1, 32, 1), gemv=1, ks=16),
    _g((1, 64, 1), gemv=1, ks=8, split_k=4),
    _g((4, 32, 1), gemv=1, ks=8),
    _g((1, 16, 1), gemv=1, ks=32),
    _g((1, 8, 1), gemv=1, ks=32),
    _g((1, 4, 1), gemv=1, ks=64),
    _g((1, 16, 1), gemv=1, ks=16),
    _g((1, 32, 1), gemv=1, ks=8),
    _g((1, 16, 1), gemv=1, ks=32, split_k=2),
    _g((1, 32, 1), gemv=1, ks=16, gu=8),  # 8 loads in flight: twice the bytes per item
    _g((1, 16, 1), gemv=1, ks=32, gu=8),
    _g((1, 64, 1), gemv=1, ks=8, gu=8),
    _g((1, 16, 1), gemv=1, ks=16, gu=8),
    _g((1, 8, 1), gemv=1, ks=32, gu=8),
    _g((1, 8, 1), gemv=1, ks=64),
    _g((1, 32, 1), gemv=1, ks=32),
    # 1024 items, 8 loads in flight: wider row segments per warp (x @ B reads BN * 4 bytes of
    # each row of B per group) with fewer groups, each with more bytes in flight
    _g((1, 64, 1), gemv=1, ks=16, gu=8),
    _g((1, 32, 1), gemv=1, ks=32, gu=8),
    _g((1, 128, 1), gemv=1, ks=8, gu=8),
]
_GEMV_SKINNY = [
    _g((4, 128, 1), gemv=1, ks=2, split_k="auto", onepass=1),
    _g((4, 32, 1), gemv=1, ks=8),
    _g((2, 64, 1), gemv=1, ks=8),
    _g((4, 16, 1), gemv=1, ks=16),
    _g((8, 16, 1), gemv=1, ks=8),
    _g((8, 8, 1), gemv=1, ks=32),
    _g((16, 8, 1), gemv=1, ks=16),
]

#: float32 GPU candidates: shape class -> family -> geometry dicts (float64 halves TM/TN).
CANDIDATES: dict[str, dict[str, list[Geometry]]] = {
    "square": {"register": _SQUARE + _SMALL_GRID[1:4] + [_MB3, _AUTO128]},
    "odd": {"register": _SQUARE + _SMALL_GRID[1:3] + [_MB3, _AUTO128]},
    "skinny_k": {"register": _SQUARE[:2] + [_SMALL_GRID[0], _SMALL_GRID[4], _MB3]},
    "skinny_mn": {"register": _SKINNY, "naive": _GEMV_SKINNY},
    "batched": {
        "register": _SQUARE
        + [_MB3, _g((32, 32, 16), (4, 4), **_REG), _g((64, 32, 16), (4, 4), **_REG, stages=2)]
    },
    "vector": {"naive": _GEMV, "register": _SKINNY[3:4]},
}


def candidates(kernel: str, dtype: str, shape_class: str) -> list[Geometry]:
    """The candidate geometries of ``kernel`` for ``shape_class`` (GPU, gemm-c sources)."""
    out = []
    for g in CANDIDATES.get(shape_class, {}).get(kernel, []):
        opts = dict(g.options)
        if dtype == "float64" and kernel == "register":  # 16-byte vectors hold 2 doubles
            opts.update(vm=min(2, opts.get("vm", 2)), vn=min(2, opts.get("vn", 2)), pad=2)
        out.append(replace(g, options=tuple(sorted(opts.items())),
                           source=f"shape candidate ({shape_class})"))  # fmt: skip
    return out


def shipped_gflops(kernel: str, dtype: str, device: DeviceSpec, backend: str, shape_class: str,
                   path: Path | None = None, kernels: str = "gemm-c") -> float | None:  # fmt: skip
    """Measured GFLOP/s of the geometry database's entry (of ``kernels``: "gemm-c" for the
    shared C sources, "numba" for numba-cuda's) for ``kernel`` on ``device`` (by name:
    measurements are per device) for exactly ``shape_class``, through ``backend``; None when
    nothing is measured. ``measured`` may be an object with ``gflops`` (the entry's own
    backend) or a list of them with ``backend`` each; a backend's own entry before a shared one.
    ``kernel="auto"`` compares these between families
    (``tiledmm.core.tuning.measured_families``)."""
    best = None
    for e in tables.read_entries(str(path or tables.DATABASE)):
        if e.get("kernels") != kernels or e["family"] != kernel or e.get("dtype", dtype) != dtype:
            continue
        if e.get("device") != device.name or e.get("shape_class") != shape_class:
            continue
        if e.get("backend", backend) != backend:
            continue
        meas = e.get("measured")
        rows = meas if isinstance(meas, list) else [meas] if isinstance(meas, dict) else []
        own = "backend" in e
        for r in rows:
            if not isinstance(r, dict) or r.get("backend", e.get("backend", backend)) != backend:
                continue
            g = r.get("gflops")
            if isinstance(g, int | float) and g > 0 and (best is None or own > best[0]):
                best = (own, float(g))
    return best[1] if best else None
