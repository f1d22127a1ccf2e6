"""The ``mma`` family (tensor cores) on NVIDIA's OpenCL: ``kernels/mma.cl`` through inline PTX.

NVIDIA's OpenCL compiler accepts the source's inline PTX (``mma.sync``, ``cp.async``,
``ldmatrix``; measured on the H200 by ``benches/probes/mma.py``), so the same kernel runs here with
``MMA_PTX_OPENCL``. Offered only on NVIDIA GPUs of compute capability 8.0 or newer, as the
``cl_nv_device_attribute_query`` extension reports it (PoCL and other vendors never get it).

What differs from CuPy: OpenCL has no dynamic shared memory above the 48 KiB of static local
memory a work-group may declare, so the stage tiles must fit 48 KiB (fewer stages and smaller
blocks than on CuPy: :data:`GEOMETRY`), and the inputs are 4- and 8-byte only (float64 on DMMA,
float32 as TF32 when the plan asks for it): 16-bit operands are not offered here.
:class:`MmaFamily` adds the family to the backend class (its ``kernels`` gain ``"mma"`` on
supported devices, ``geometry``/``search_space`` answer for mma) and :class:`MmaState` to the
per-device state class (its ``_build`` compiles mma plans here), mixed in before their bases.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from tiledmm import Geometry

from .. import kernels as K
from ..kernels import mma_spec

__all__ = ["MMA_DTYPES", "GEOMETRY", "STATIC_LOCAL", "supports", "offered", "geometry",
           "search_space", "build", "MmaFamily", "MmaState"]  # fmt: skip

#: input dtypes of the family here (float32 only with precision="tf32")
MMA_DTYPES = ("float64", "float32")
STATIC_LOCAL = 48 * 1024  # local memory one OpenCL work-group may declare
#: (block tile, warp tile, stages, extra options) per kind, each within 48 KiB of local memory:
#: f64 64x64x16 with 4 warps of 32x32, 2 stages (37 KiB); TF32 64x64x32, 4 warps of 32x32,
#: 2 stages (36 KiB); first the default, then what ``tiledmm tune`` also tries
GEOMETRY = {
    "f64": [((64, 64, 16), (32, 32), 2, {"min_blocks": 3}),
            ((64, 64, 8), (32, 32), 3, {"min_blocks": 3}),
            ((64, 128, 8), (32, 32), 2, {})],
    "tf32": [((64, 64, 32), (32, 32), 2, {}),
             ((128, 64, 16), (64, 32), 2, {}),
             ((64, 128, 16), (32, 64), 2, {})],
}  # fmt: skip


@cache
def supports(dev: Any) -> bool:
    """Whether OpenCL device ``dev`` runs the PTX path: an NVIDIA GPU reporting compute
    capability 8.0+ (``cl_nv_device_attribute_query``; without it: no)."""
    import pyopencl as cl

    if not dev.type & cl.device_type.GPU or "NVIDIA" not in dev.vendor.upper():
        return False
    if "cl_nv_device_attribute_query" not in dev.extensions:
        return False
    try:
        cc = (int(dev.compute_capability_major_nv), int(dev.compute_capability_minor_nv))
    except Exception:  # noqa: BLE001 - unknown to this pyopencl
        return False
    return cc >= (8, 0)


def offered(backend: Any) -> bool:
    """Whether the device ``TILEDMM_OPENCL_DEVICE`` selects now gets the family. Never raises
    (no device: no) and never imports pyopencl itself (``import tiledmm`` stays light): before
    the backend has been touched in this process the answer is no (``backend.selected_device``
    is None then)."""
    try:
        dev = backend.selected_device()
        return dev is not None and supports(dev)
    except Exception:  # noqa: BLE001
        return False


def _geometry(kind: str, bt, wt, stages: int, extra: dict, source: str) -> Geometry:
    frag = mma_spec.SHAPES[kind][0]
    opts = {"fm": frag[0], "fn": frag[1], "fk": frag[2], "stages": stages, "group_m": 8, **extra}
    return Geometry(bt, wt, tuple(sorted(opts.items())), source=source)


def geometry(dtype: str) -> Geometry | None:
    """The default tiles of ``dtype`` (float32: TF32; the plan adds the precision)."""
    kind = {"float64": "f64", "float32": "tf32"}.get(dtype)
    if kind is None:
        return None
    return _geometry(kind, *GEOMETRY[kind][0], source=f"OpenCL mma default for {kind} (48 KiB)")


def search_space(dtype: str) -> list[Geometry]:
    """mma candidates for ``tiledmm tune`` on OpenCL (float64; TF32 is not tuned)."""
    if dtype != "float64":
        return []
    return [_geometry("f64", *g, source="search space (48 KiB)") for g in GEOMETRY["f64"]]


def build(state: Any, plan: Any, aligned: bool) -> tuple:
    """(kernel, global size, local size, 3-D global, 3-D local) for an mma ``plan``, the call
    ``OpenCLState.enqueue`` takes; raises ValueError for what this backend cannot run."""
    if K.itemsize(plan.dtype) < 4:
        raise ValueError("the OpenCL mma path takes float64 and float32 (TF32) inputs only")
    if not supports(state.dev):
        raise ValueError(f"{state.dev.name.strip()}: the mma family needs an NVIDIA GPU of "
                         "compute capability 8.0+ (inline PTX)")  # fmt: skip
    defs = K.mma_defines(plan, aligned, aligned)
    limit = min(STATIC_LOCAL, int(state.dev.local_mem_size))
    if mma_spec.smem_bytes(defs) > limit:
        raise ValueError(
            f"mma tiles {'x'.join(map(str, plan.block_tile))} with {defs['STAGES']} stages need "
            f"{mma_spec.smem_bytes(defs) // 1024} KiB of local memory; OpenCL allows "
            f"{limit // 1024} KiB (no dynamic shared memory): fewer stages or smaller tiles"
        )
    threads = defs["THREADS"]
    defs.update(WG_X=threads, WG_Y=1)
    src = "#define MMA_PTX_OPENCL 1\n" + K.source(K.MMA, defs)
    kern = state.kernel("gemm", src)
    gx, gy = plan.grid
    g, lsz = (gx * threads, gy), (threads, 1)
    return kern, g, lsz, (*g, 1), (*lsz, 1)


class MmaFamily:
    """The mma family for the OpenCL backend class, mixed in before its base (see the module
    docstring): the base's families plus ``"mma"`` where :func:`offered`, and mma tiles and
    candidates from here; every other family goes to the base. The class mixing it in
    provides ``selected_device()``."""

    mma_dtypes = MMA_DTYPES

    @property
    def kernels(self) -> tuple[str, ...]:
        """naive/tiled/register, plus mma where supported"""
        return K.FAMILIES + ((K.MMA,) if offered(self) else ())

    def geometry(self, kernel, dtype, device, shape_class=None):
        """Tiles from the geometry database (mma: :func:`geometry`); ``shape_class``
        (tiledmm.core.tuning's classes) picks a class entry before the general one
        (docs/shapes.md)."""
        if kernel == K.MMA:
            return geometry(dtype)
        return super().geometry(kernel, dtype, device, shape_class=shape_class)

    def search_space(self, kernel, dtype, device):
        """The geometries ``tiledmm tune`` tries (backends/kernels/space.py; mma:
        :func:`search_space`)."""
        if kernel == K.MMA:
            return search_space(dtype)
        return super().search_space(kernel, dtype, device)


class MmaState:
    """The mma family for the OpenCL state class, mixed in before its base: mma plans are
    compiled by :func:`build`, every other plan by the base."""

    def _build(self, plan, aligned: bool, single: bool = False):
        if plan.kernel == K.MMA:
            return build(self, plan, aligned)
        return super()._build(plan, aligned, single)
