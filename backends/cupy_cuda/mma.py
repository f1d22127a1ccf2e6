"""The ``mma`` family (tensor cores) on CuPy: ``kernels/mma.cl`` compiled by NVRTC.

What differs from the other families: the stage tiles live in dynamic shared memory (up to the
227 KiB a block may opt into on sm_90, set on the compiled kernel), so a launch passes
``shared_mem``; and 16-bit inputs (float16, bfloat16) need rows that start 16-byte aligned
(there is no 2-byte ``cp.async``), so such operands are copied into padded rows first.
float32 runs here only as TF32, when the plan asks (``options["precision"] == "tf32"``; the
planner refuses plain float32). :class:`MmaFamily` adds the family to a backend class: its
``kernels`` gain ``"mma"``, ``mma_dtypes`` lists the inputs the family takes (beyond the
backend's ``dtypes``: float16, bfloat16), ``_build``/``run``/``run_batched`` hand mma plans
here and ``search_space`` answers for mma with :func:`search_space`. A float32 (TF32) plan
whose options ask for ``wgmma`` runs Hopper's warpgroup MMA instead (:mod:`.wgmma`, sm_90a); one
the planner gave the Hopper kernel (the default on 9.x; ``TILEDMM_HOPPER_TF32=0`` not) runs
:mod:`.hopper` (DTYPE 3) first.
"""

from __future__ import annotations

import itertools
from typing import Any

from tiledmm import Geometry
from tiledmm.device import nvidia
from tiledmm.util.lru import LRUCache

from .. import kernels as K
from ..kernels import launch
from . import hopper, hopper_batch, hopper_bound, wgmma
from .arrays import ARRAYS, cupy_module

__all__ = ["MMA_DTYPES", "build", "run", "run_batched", "MmaFamily", "search_space",
           "HOPPER_TILES", "HOPPER_GROUPS", "hopper_space"]  # fmt: skip

#: input dtypes of the family (float32 only with precision="tf32")
MMA_DTYPES = ("float64", "float16", "bfloat16", "float32")
_MODULES: LRUCache[Any] = LRUCache(64)
STATIC_LIMIT = 48 * 1024


class Launch:
    """A compiled mma kernel called the way ``CupyArrays.enqueue`` calls a function, plus its
    dynamic shared memory."""

    __slots__ = ("fn", "smem")

    def __init__(self, fn: Any, smem: int) -> None:
        self.fn, self.smem = fn, smem

    def __call__(self, grid: tuple, block: tuple, args: tuple) -> None:
        self.fn(grid, block, args, shared_mem=self.smem)


def _compile(cp: Any, src: str, smem: int) -> Any:
    try:
        fn = cp.RawKernel(src, "gemm")
        fn.compile()
    except Exception:  # noqa: BLE001 - an NVRTC without __cvta_generic_to_shared: inline PTX
        fn = cp.RawKernel("#define SMEM_CVTA_ASM 1\n" + src, "gemm")
        fn.compile()
    if smem > STATIC_LIMIT:
        fn.max_dynamic_shared_size_bytes = smem
    return fn


def build(cp: Any, plan: Any, aligned: bool) -> tuple[Launch, tuple, tuple]:
    """(launch, grid, block) for ``plan``; compiled once per source and device."""
    if wgmma.wants(plan):
        raise ValueError("a wgmma plan has no single launch (see mma.run)")
    defs = K.mma_defines(plan, aligned, aligned)
    smem = K.mma_smem_bytes(defs)
    src = K.source(K.MMA, defs)
    key = (src, cp.cuda.runtime.getDevice())
    fn = _MODULES.get_or_make(key, lambda: _compile(cp, src, smem))
    return Launch(fn, smem), tuple(plan.grid), (defs["THREADS"], 1)


def _rows16(cp: Any, x: Any) -> tuple[Any, int]:
    """``x`` (2-D, 2-byte elements) and its leading dimension, as rows that start 16-byte
    aligned with unit column stride: ``x`` itself when it is laid out so, else a padded copy."""
    rows, cols = x.shape
    s0, s1 = x.strides
    if (s1 == 2 or cols <= 1) and s0 > 0 and s0 % 16 == 0 and x.data.ptr % 16 == 0:
        return x, s0 // 2
    ld = max(8, -(-cols // 8) * 8)
    launch.check_extent("operand", rows, cols, 0, ld)
    y = cp.empty((rows, ld), x.dtype)[:, :cols]
    y[...] = x
    return y, ld


def run(cp: Any, arrays: Any, launches: Any, plan: Any, a: Any, b: Any, out: Any) -> None:
    """``out[...] = a @ b`` with an mma plan. 4- and 8-byte inputs take the shared launch path
    (``kernels.launch.run``); 16-bit inputs on compute capability 9.x go to the Hopper kernel
    (:func:`.hopper.run`, issue 38) where :func:`.hopper.takes` says so, else they are brought
    to aligned rows here; so do TF32 plans the planner gave it; wgmma plans go to
    :func:`.wgmma.run`."""
    # --- issue 38: Hopper 16-bit / TF32 GEMM (TMA + wgmma) where hopper.takes says so ---
    if plan.dtype in hopper.KERNEL_DTYPES and hopper.takes(plan, hopper.device_info(cp)[1]):
        hopper.run(cp, plan, a, b, out)
        return
    # ---
    if wgmma.wants(plan):
        wgmma.run(cp, plan, a, b, out)
        return
    if K.itemsize(plan.dtype) >= 4:
        launch.run(arrays, launches, plan, a, b, out)
        return
    m, k = a.shape
    n = b.shape[1]
    if not m or not n:
        return
    a2, lda = _rows16(cp, a)
    b2, ldb = _rows16(cp, b)
    c = out
    s0, s1 = out.strides
    plain = (s1 == 2 or n == 1) and s0 >= 2 * n and s0 % 2 == 0
    if not plain or cp.may_share_memory(out, a) or cp.may_share_memory(out, b):
        c = cp.empty((m, n), out.dtype)
    ldc = c.strides[0] // 2 if m > 1 else n
    launch.check_extent("A", m, k, 0, lda)
    launch.check_extent("B", k, n, 0, ldb)
    launch.check_extent("out", m, n, 0, ldc)
    call = launches.get(plan, arrays.device_id(), True)
    arrays.enqueue(call, m, n, k, a2, 0, lda, b2, 0, ldb, c, 0, ldc)
    if c is not out:
        out[...] = c


def run_batched(cp: Any, arrays: Any, launches: Any, plan: Any, a: Any, b: Any,
                out: Any) -> bool:  # fmt: skip
    """The batch in one launch: 4- and 8-byte inputs by the shared launch path, 16-bit ones
    on compute capability 9.x by the Hopper kernel (:func:`.hopper.run_batched`), TF32 ones
    too where the planner gave it the plan; other 16-bit and wgmma batches go matrix by
    matrix."""
    if plan.dtype in hopper.KERNEL_DTYPES and hopper.takes(plan, hopper.device_info(cp)[1]):
        return hopper_batch.run_batched(cp, plan, a, b, out)
    if K.itemsize(plan.dtype) < 4 or wgmma.wants(plan):
        return False
    return launch.run_batched(arrays, launches, plan, a, b, out)


#: (block tile, warp tile, fragment, stages) candidates per kind for ``tiledmm tune``
_SPACE = {
    "f64": [((128, 128, 16), (32, 64), (16, 8, 8), 3), ((128, 64, 16), (32, 32), (16, 8, 8), 3),
            ((64, 64, 16), (32, 32), (16, 8, 8), 4), ((64, 64, 32), (32, 32), (16, 8, 8), 3),
            ((64, 64, 16), (32, 32), (16, 8, 8), 3),
            ((128, 128, 16), (32, 64), (16, 8, 4), 3), ((128, 64, 16), (32, 32), (16, 8, 4), 3),
            ((128, 128, 16), (32, 64), (8, 8, 4), 3), ((128, 128, 16), (32, 64), (16, 8, 16), 3)],
    "f16": [((128, 256, 32), (64, 64), (16, 8, 16), 3), ((128, 256, 32), (64, 64), (16, 8, 16), 4),
            ((256, 128, 32), (64, 64), (16, 8, 16), 3), ((128, 128, 32), (64, 64), (16, 8, 16), 4),
            ((128, 128, 32), (64, 32), (16, 8, 16), 4), ((128, 256, 64), (64, 64), (16, 8, 16), 3)],
}  # fmt: skip
_SPACE["bf16"] = _SPACE["f16"]


def search_space(kernel: str, dtype: str, device: Any) -> list[Geometry] | None:
    """mma candidates for ``tiledmm tune`` (float32 is TF32 only on request: not tuned here).
    16-bit on compute capability 9.x: the Hopper kernel's (:func:`hopper_space`) and the
    ``mma.sync`` tiles, these with option ``hopper`` 0 (the planner would give them to the
    Hopper kernel otherwise)."""
    kind = {"float64": "f64", "float16": "f16", "bfloat16": "bf16"}.get(dtype)
    cc = nvidia.compute_capability(device)
    hop = dtype in hopper.DTYPES and cc is not None and cc[0] == 9
    out = hopper_space(dtype) if hop else []
    for bt, wt, (fm, fn, fk), st in _SPACE.get(kind or "", []):
        opts = {"fm": fm, "fn": fn, "fk": fk, "stages": st, "group_m": 8}
        if kind == "f64" and wt == (32, 32):  # 128 registers: 2 blocks of 8 warps, 3 of 4
            opts["min_blocks"] = 2 if bt[0] * bt[1] > 64 * 64 else 3
            if bt == (128, 64, 16) and st == 3:  # also with the copies after the first k-step
                ca = dict(opts, copy_after=1)
                out.append(Geometry(bt, wt, tuple(sorted(ca.items())), source="search space"))
        if hop:
            opts["hopper"] = 0
        out.append(Geometry(bt, wt, tuple(sorted(opts.items())), source="search space"))
    return out


#: the Hopper kernel's knobs ``tiledmm tune`` crosses: block tiles (BM, BN), consumer
#: warpgroups (CM, CN), epilogue, cluster and tile-order group; per tile and epilogue the two
#: deepest stage rings that fit
HOPPER_TILES = ((128, 256, 2, 1), (256, 128, 2, 1), (128, 128, 2, 1), (128, 64, 2, 1),
                (256, 64, 2, 1), (128, 256, 1, 2), (128, 128, 1, 2), (64, 256, 1, 2),
                (64, 128, 1, 2))  # fmt: skip
HOPPER_GROUPS = (8, 16)


def hopper_space(dtype: str) -> list[Geometry]:
    """The Hopper kernel's candidates (options ``hopper`` 1 and ``hopper_<key>``), only those
    :func:`.hopper.defines` accepts."""
    out = []
    for (bm, bn, cm, cn), epi, cluster, group in itertools.product(
        HOPPER_TILES, (0, 1), (1, 2), HOPPER_GROUPS
    ):  # fmt: skip
        fits = []
        for stages in range(8, 1, -1):
            cfg = dict(bm=bm, bn=bn, cm=cm, cn=cn, stages=stages, cluster=cluster,
                       group_m=group, epi=epi)  # fmt: skip
            try:
                hopper.defines(dtype, cfg)
            except ValueError:
                continue
            fits.append(cfg)
            if len(fits) == 2:
                break
        for cfg in fits:
            opts = {"hopper": 1, **{f"hopper_{key}": v for key, v in cfg.items()}}
            out.append(Geometry((bm, bn, 64), (bm // cm, bn // cn), tuple(sorted(opts.items())),
                                source="search space"))  # fmt: skip
    return out


class MmaFamily:
    """The mma family for a CuPy backend class, mixed in before its base (see the module
    docstring): the base's families plus ``"mma"``, and mma plans built, run and searched
    here; every other plan goes to the base."""

    kernels = K.FAMILIES + (K.MMA,)
    mma_dtypes = MMA_DTYPES  # what the API may route to kernel="mma" (float32: TF32 only)

    def _build(self, plan, aligned: bool, single: bool = False):
        if plan.kernel == K.MMA:
            return build(cupy_module(), plan, aligned)
        return super()._build(plan, aligned, single)

    def run(self, plan, a, b, out) -> None:
        """``out = a @ b`` with ``plan`` (mma plans: the tensor-core kernel)."""
        if plan.kernel == K.MMA:
            return run(cupy_module(), ARRAYS, self.launches, plan, a, b, out)
        return super().run(plan, a, b, out)

    def bind(self, plan):
        """The pre-bound launch of a plan (Hopper 16-bit mma plans: :mod:`.hopper_bound`;
        other mma plans: none)."""
        if plan.kernel == K.MMA:
            if plan.dtype not in hopper.DTYPES:
                return None
            return hopper_bound.bind(cupy_module(), plan)
        return super().bind(plan)

    def run_batched(self, plan, a, b, out) -> bool:
        """A batch in one launch where the family can (mma plans included)."""
        if plan.kernel == K.MMA:
            return run_batched(cupy_module(), ARRAYS, self.launches, plan, a, b, out)
        return super().run_batched(plan, a, b, out)

    def plan_problem(self, plan) -> str | None:
        """What the kernels refuse in ``plan``: a Hopper plan's configuration as
        :func:`.hopper.defines` checks it; other plans as the shared sources check them."""
        if plan.kernel == K.MMA and int(plan.options.get("hopper", 0)):
            try:
                hopper.defines(plan.dtype, hopper.config(plan))
            except (ValueError, KeyError) as exc:
                return str(exc)
            return None
        return super().plan_problem(plan)

    def search_space(self, kernel: str, dtype: str, device: Any):
        """Candidate tiles for ``tiledmm tune`` (mma: :func:`search_space`)."""
        if kernel == K.MMA:
            return search_space(kernel, dtype, device)
        return super().search_space(kernel, dtype, device)
