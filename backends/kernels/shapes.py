"""Candidate geometries per shape class for the shared C sources (what the shape sweep and
the tuner may try beyond the square-shape search space), and the split-K heuristic.

Classes are ``tiledmm.tuning.SHAPE_CLASSES``. Small grids (few blocks for the device) get
smaller block tiles and/or split-K (``split_k``: K slices into a workspace, then a reduction);
skinny and vector products get the naive family's gemv path (``gemv``: K split over ``ks``
work-items per output) and small register tiles; batched products keep the square tiles and
fill the device through the batch (grid z). Every candidate passes ``kernels.defines``.
"""

from __future__ import annotations

from tiledmm import Geometry

__all__ = ["CANDIDATES", "candidates"]


def _g(bt, tt=(1, 1), **opts) -> dict:
    return {"block_tile": list(bt), "thread_tile": list(tt), "options": opts}


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
_SKINNY = [
    _g((32, 64, 16), (4, 4), **_REG, stages=2),
    _g((32, 64, 16), (4, 4), **_REG, stages=2, split_k=4),
    _g((64, 64, 16), (4, 4), **_REG, stages=2, split_k=8),
    _g((16, 64, 16), (2, 4), use_local=1, vm=2, vn=4, pad=4, split_k=4),
]
_GEMV = [
    _g((1, 64, 1), gemv=1, ks=8),
    _g((1, 128, 1), gemv=1, ks=4),
    _g((2, 64, 1), gemv=1, ks=8),
    _g((1, 32, 1), gemv=1, ks=16),
    _g((1, 64, 1), gemv=1, ks=8, split_k=4),
    _g((4, 32, 1), gemv=1, ks=8),
]

#: float32 GPU candidates: shape class -> family -> geometry dicts (float64 halves TM/TN).
CANDIDATES: dict[str, dict[str, list[dict]]] = {
    "square": {"register": _SQUARE + _SMALL_GRID[1:4]},
    "odd": {"register": _SQUARE + _SMALL_GRID[1:3]},
    "skinny_k": {"register": _SQUARE[:2] + [_SMALL_GRID[0], _SMALL_GRID[4]]},
    "skinny_mn": {"register": _SKINNY, "naive": _GEMV[2:3] + _GEMV[5:]},
    "batched": {"register": _SQUARE + [_g((32, 32, 16), (4, 4), **_REG)]},
    "vector": {"naive": _GEMV, "register": _SKINNY[3:]},
}


def candidates(kernel: str, dtype: str, shape_class: str) -> list[Geometry]:
    """The candidate geometries of ``kernel`` for ``shape_class`` (GPU, gemm-c sources)."""
    out = []
    for e in CANDIDATES.get(shape_class, {}).get(kernel, []):
        opts = dict(e["options"])
        tm, tn = e["thread_tile"]
        if dtype == "float64" and kernel == "register":  # 16-byte vectors hold 2 doubles
            opts.update(vm=min(2, opts.get("vm", 2)), vn=min(2, opts.get("vn", 2)), pad=2)
        out.append(Geometry(tuple(e["block_tile"]), (tm, tn), tuple(sorted(opts.items())),
                            source=f"shape candidate ({shape_class})"))  # fmt: skip
    return out
