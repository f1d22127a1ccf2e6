"""The GEMM kernel sources shared by the CuPy (CUDA) and OpenCL backends, and their knobs.

One source per family (``naive.cl``, ``tiled.cl``, ``register.cl``, and ``mma.cl`` for the
tensor-core family, see ``mma_spec``) is written in the small C dialect of ``gemm_common.h``;
:func:`source` inlines the header and prepends the ``#define``s a plan asks for, so the same
text compiles as OpenCL C and as CUDA C (mma: PTX under CUDA, a scalar fallback elsewhere).
:func:`defines` turns a plan (tiles + ``plan.options``) into those defines and checks the
constraints the sources rely on. :func:`load_geometry` reads the one geometry database
(``geometry.json``: tuned tiles by device name, defaults by device kind, for these sources and
for numba-cuda's). ``launch`` runs the sources: the launch steps CuPy and OpenCL share.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from tiledmm import DeviceSpec, Geometry

from . import tables
from .defs import (
    CPU_VECS,
    FAMILIES,
    HERE,
    INT_MAX,
    MMA,
    REDUCE_THREADS,
    aligned_ld,
    defines,
    itemsize,
    launch_shape,
    mma_defines,
    mma_smem_bytes,
    onepass,
    pad_pays,
    reduce_source,
    source,
    spin_source,
    split_k,
    vector_width,
)
from .shapes import shipped_gflops
from .tables import DATABASE, geometry_entries, write_geometry

__all__ = [
    "FAMILIES", "source", "defines", "load_geometry", "fit", "vector_width", "launch_shape", "HERE",
    "aligned_ld", "pad_pays", "DATABASE", "INT_MAX", "itemsize", "reduce_source", "split_k",
    "onepass",
    "REDUCE_THREADS", "MMA", "CPU_VECS", "mma_defines", "mma_smem_bytes", "SharedSourceTables",
    "geometry_entries", "write_geometry", "spin_source",
]  # fmt: skip


def load_geometry(kernel: str, dtype: str, device: DeviceSpec, *, kernels: str = "gemm-c",
                  backend: str | None = None, shape_class: str | None = None,
                  path: Path | None = None) -> Geometry | None:  # fmt: skip
    """Tiles for ``kernel``/``dtype`` on ``device`` from the geometry database, fitted to it.

    ``kernels`` names the kernel source the tiles are for ("gemm-c": the shared C sources here;
    "numba": numba-cuda's generated kernels). Lookup order: an entry for ``shape_class`` before
    a general one (a class changes the path: the gemv kernel for vectors, whose kind-wide entry
    must beat a device's general naive tile); then one for the device's own name (tuned) before
    one for its kind ("gpu"/"cpu"); then one for ``backend`` before a shared one. See
    ``geometry.json``'s ``about``.
    """
    best, rank = None, None
    for e in tables.read_entries(str(path or tables.DATABASE)):
        if e["kernels"] != kernels or e["family"] != kernel or e.get("dtype", dtype) != dtype:
            continue
        if e.get("backend", backend) != backend or e.get("shape_class", shape_class) != shape_class:
            continue
        if e.get("device", device.name) != device.name or e.get("kind", device.kind) != device.kind:
            continue
        r = ("shape_class" not in e, "device" not in e, "backend" not in e)
        if rank is None or r < rank:
            best, rank = e, r
    if best is None:
        return None
    src = f"tuned on {device.name}" if "device" in best else f"default for {device.kind}"
    return fit(Geometry.from_dict(best, src), kernel, dtype, device)


class SharedSourceTables:
    """The geometry database's side of a backend that runs these sources (CuPy and OpenCL
    mix it in): tiles per family, dtype, device and shape class, and the measured GFLOP/s that
    ``kernel="auto"`` compares families by."""

    name: str

    def geometry(self, kernel: str, dtype: str, device: DeviceSpec,
                 shape_class: str | None = None) -> Geometry | None:  # fmt: skip
        """Tiles from the geometry database; ``shape_class`` (tiledmm.core.tuning's classes) picks
        a class entry before the general one (docs/shapes.md)."""
        return load_geometry(kernel, dtype, device, backend=self.name, shape_class=shape_class)

    def geometry_entries(self) -> list[dict]:
        """The geometry database's entries for these sources (``"kernels": "gemm-c"``), in
        file order (``tiledmm.report.modelcheck`` reads them through this method)."""
        return [e for e in geometry_entries() if e.get("kernels") == "gemm-c"]

    def plan_problem(self, plan: Any) -> str | None:
        """What :func:`defines` (or :func:`mma_defines`) refuses in ``plan``: the sources'
        constraints (vector widths, multiples) beyond the planner's; None when it runs."""
        try:
            defines(plan)
        except ValueError as exc:
            return str(exc)
        return None

    def measured_gflops(self, kernel: str, dtype: str, device: DeviceSpec,
                        shape_class: str) -> float | None:  # fmt: skip
        """The geometry database's measured GFLOP/s for ``kernel`` on ``device`` for exactly
        ``shape_class`` through this backend."""
        return shipped_gflops(kernel, dtype, device, self.name, shape_class)


def fit(geo: Geometry, kernel: str, dtype: str, device: DeviceSpec) -> Geometry:
    """``geo`` made to fit ``device``: option values ``"simd"`` become the device's native
    vector width in elements (``simd_bytes`` / element size), and the one-output-per-item
    families halve their larger group side until the group fits ``max_threads_per_block``."""
    lanes = max(1, device.simd_bytes // itemsize(dtype))
    opts = tuple((k, lanes if v == "simd" else v) for k, v in geo.options)
    (bm, bn, bk), limit = geo.block_tile, max(1, device.max_threads_per_block)
    while kernel in ("naive", "tiled") and bm * bn > limit:
        bm, bn = (bm // 2, bn) if bm >= bn else (bm, bn // 2)
    if (bm, bn) == geo.block_tile[:2]:
        return replace(geo, options=opts)
    note = f"{geo.source}; group cut to {bm}x{bn} for {device.name}'s {limit} work-items"
    return replace(geo, block_tile=(bm, bn, bk), options=opts, source=note)
