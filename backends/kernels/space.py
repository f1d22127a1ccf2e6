"""Search spaces of the shared kernels (what ``tiledmm tune`` may try), beside their constraints.

:func:`space` lists candidate geometries for the C-dialect sources (``kernels="gemm-c"``, run by
CuPy and OpenCL) or numba-cuda's generated kernels (``kernels="numba"``) on one device, already
pruned by the constraints :func:`~tiledmm_backends.kernels.defines` checks (vector widths,
multiples) and, for the generated kernels, by the source generator's own (block a multiple of
the thread tile). The planner's device limits (threads, shared memory, registers) prune the
rest in the tuner. Sets follow the kernels' knobs: block tile, thread tile, vector sub-blocks,
padding, launch grouping, stages and ``split_k="auto"`` (K slices resolved per product by
``shapefit``; the tuner drops the variants that resolve alike) on GPUs; the barrier-free
micro-kernel's height, vector width and K block on CPUs (PoCL).
"""

from __future__ import annotations

import itertools
from types import SimpleNamespace

from tiledmm import DeviceSpec, Geometry

from .defs import defines, itemsize, vector_width

__all__ = ["space", "feasible"]

_SRC = "search space"


def feasible(kernel: str, dtype: str, geo: Geometry) -> bool:
    """Whether :func:`defines` accepts ``geo`` (a stand-in plan; no device limits here)."""
    (bm, bn, bk), (tm, tn) = geo.block_tile, geo.thread_tile
    threads = (bm // tm) * (bn // tn) if bm % tm == 0 and bn % tn == 0 else 0
    if not threads:
        return False
    opts = dict(geo.options)
    if opts.get("split_k") == "auto":  # resolved per product; any count checks the same
        opts["split_k"] = 2
    plan = SimpleNamespace(kernel=kernel, dtype=dtype, block_tile=(bm, bn, bk),
                           thread_tile=(tm, tn), threads_per_block=threads,
                           options=opts)  # fmt: skip
    try:
        defines(plan)
    except ValueError:
        return False
    return True


def _geo(bt, tt=(1, 1), **opts) -> Geometry:
    return Geometry(tuple(bt), tuple(tt), tuple(sorted(opts.items())), source=_SRC)


def _naive(device: DeviceSpec) -> list[Geometry]:
    lim = device.max_threads_per_block
    out = []
    for bm, bn in itertools.product((1, 2, 4, 8, 16), (8, 16, 32, 64, 128, 256)):
        if bm * bn <= lim and bm * bn >= (32 if device.is_gpu else 8):
            out.append(_geo((bm, bn, 1)))
    return out


def _gemm_c(kernel: str, dtype: str, device: DeviceSpec) -> list[Geometry]:
    s = itemsize(dtype)
    vw = vector_width(s)
    lanes = max(1, device.simd_bytes // s)
    if kernel == "naive":
        return _naive(device)
    out: list[Geometry] = []
    if kernel == "tiled" and device.is_gpu:
        for bm, bn, bk, vec in itertools.product((8, 16, 32), (8, 16, 32, 64), (8, 16, 32, 64),
                                                 (0, 1)):  # fmt: skip
            out.append(_geo((bm, bn, bk), vec_smem=vec))
    elif kernel == "tiled":  # CPU: B tile transposed, one SIMD vector of partial sums per item
        for bm, bn, bk in itertools.product((8, 16, 32, 64), (8, 16, 32, 64), (16, 32, 64, 128)):
            out.append(_geo((bm, bn, bk), b_transposed=1, split=lanes))
    elif device.is_gpu:  # register, local-memory tiles; K slices where the grid asks for them
        for bm, bn, bk, (tm, tn), pad, g, st, split in itertools.product(
            (32, 64, 128, 256), (32, 64, 128, 256), (8, 16, 32),
            ((2, 2), (4, 4), (8, 4), (4, 8), (8, 8)), (0, vw), (1, 8), (1, 2), (None, "auto"),
        ):  # fmt: skip
            vm, vn = min(vw, tm), min(vw, tn)
            opts = dict(use_local=1, vm=vm, vn=vn, pad=pad, group_m=g, stages=st)
            out.append(_geo((bm, bn, bk), (tm, tn), **opts, **({"split_k": split} if split
                                                                 else {})))  # fmt: skip
    else:  # register on a CPU: barrier-free vector micro-kernel
        for tm, tv, rows, cols, kc in itertools.product(
            (2, 4, 6, 8), (1, 2), (4, 8, 16), (2, 4, 8), (0, 128, 256, 512)
        ):
            tn = tv * lanes
            out.append(_geo((tm * rows, tn * cols, 1), (tm, tn), use_local=0, cpu_vec=lanes,
                            kc=kc))  # fmt: skip
    return [g for g in out if feasible(kernel, dtype, g)]


def _numba(kernel: str, dtype: str, device: DeviceSpec) -> list[Geometry]:
    if kernel == "naive":
        return _naive(device)
    if kernel == "tiled":
        return [_geo((bm, bn, bk)) for bm, bn, bk in
                itertools.product((8, 16, 32), (8, 16, 32), (8, 16, 32))]  # fmt: skip
    out = []
    # min_tile as in the shipped entries: shapefit fits a class tile to each product (halved
    # for small grids, turned and trimmed to a skinny product's short side); without it a
    # cold-tuned 64x128 ran 256^3 at 0.41 and 4096x32x4096 at 0.15 of the shipped tiles
    # (H200, benches/results/logs/h200-tune-coldstart-numba-cuda-s9a.log).
    # The "smaller space" for numba, whose ~5 s compile per candidate leaves a 5-minute
    # budget 4-10 tries per task: of 148 candidates four H200 cold starts measured over eight
    # tasks (logs/h200-tune-coldstart-numba-cuda-s9a/s9b/s10a/s10b.jsonl), none with 4-wide
    # thread rows (4x4, 4x8: at most 0.84 of the task's best), a 128x64 block (0.86) or contig
    # rows without padding (0.83) came within 0.95 of its task's best, nor double buffering
    # but on the batched task (elsewhere at most 0.85); 8x8 threads over a 16-deep step took
    # numba ~35 s to compile (s10a). 27 tiles and options, each with and without K slices.
    for (bm, bn), (bk, tm, tn), (layout, pad), split in itertools.product(
        ((64, 64), (64, 128), (128, 128)), ((8, 8, 4), (16, 8, 4), (8, 8, 8)),
        (("contig", 4), ("strided", 0), ("strided", 4)), (None, "auto"),
    ):  # fmt: skip
        opts = dict(layout=layout, pad=pad, unroll_k=True, stages=1, min_tile=32)
        out.append(_geo((bm, bn, bk), (tm, tn), **opts, **({"split_k": split} if split
                                                             else {})))  # fmt: skip
    return out


def space(kernel: str, dtype: str, device: DeviceSpec, *, kernels: str = "gemm-c",
          stages: bool = True) -> list[Geometry]:  # fmt: skip
    """Candidate geometries for ``kernel``/``dtype`` on ``device`` (``kernels``: "gemm-c" or
    "numba"); ``stages=False`` drops double-buffered candidates (PoCL miscompiles them)."""
    found = _numba(kernel, dtype, device) if kernels == "numba" else _gemm_c(kernel, dtype, device)
    if not stages:
        found = [g for g in found if int(dict(g.options).get("stages", 1)) == 1]
    return found
