"""The ``#define``s of the shared GEMM sources: a plan (tiles + ``plan.options``) turned into
the constants the C-dialect kernels compile with (:func:`defines`, :func:`mma_defines`), the
checks the sources rely on, the sources themselves with those defines in front
(:func:`source`), and the launch shape. Below the kernels' face; :mod:`.launch` and
:mod:`.space` import it directly."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from tiledmm.model.hierarchy import pad_pays as pad_pays_for

from . import mma_spec

__all__ = [
    "FAMILIES", "source", "defines", "vector_width", "launch_shape", "HERE", "aligned_ld",
    "pad_pays", "INT_MAX", "itemsize", "reduce_source", "split_k", "onepass", "REDUCE_THREADS",
    "MMA", "CPU_VECS", "mma_defines", "mma_smem_bytes", "spin_source",
]  # fmt: skip

HERE = Path(__file__).resolve().parent
#: the families every C-dialect backend runs (CuPy, OpenCL); ``mma`` is CUDA's alone (PTX)
FAMILIES = ("naive", "tiled", "register")
MMA = "mma"
INT_MAX = 2**31 - 1  # the kernels index with 32-bit ints
#: the CPU kernels' vector widths (``cpu_vec``): OpenCL's vector types of those sizes
CPU_VECS = (2, 4, 8, 16)


@cache
def _read(name: str) -> str:
    return (HERE / name).read_text()


def itemsize(dtype: str) -> int:
    """Bytes per element: REAL_BYTES of the float32/float64 families; 2 for the 16-bit inputs
    of the mma family."""
    return 8 if dtype == "float64" else 2 if dtype in ("float16", "bfloat16") else 4


def vector_width(itemsize: int) -> int:
    """Elements per 16-byte vector (float4 / double2)."""
    return 16 // itemsize


def source(family: str, defs: dict[str, int]) -> str:
    """The complete kernel text for ``family`` with ``defs`` as ``#define``s (header inlined);
    the naive family with ``GEMV_T`` defined is ``gemv.cl`` (its memory-bound skinny path), or
    ``gemv_cpu.cl`` with ``CPU_VEC`` as well (the same path for CPUs, without barriers)."""
    if family not in FAMILIES and family not in ("reduce", MMA):
        raise ValueError(f"unknown kernel family {family!r}")
    name = family
    if family == "naive" and "GEMV_T" in defs:  # the memory-bound path: GPUs', or CPUs'
        name = "gemv_cpu" if "CPU_VEC" in defs else "gemv"
    body = _read(f"{name}.cl").replace('#include "gemm_common.h"', _read("gemm_common.h"))
    head = "".join(f"#define {k} {int(v)}\n" for k, v in sorted(defs.items()))
    return head + body


def mma_defines(plan: Any, aligned_a: bool = True, aligned_b: bool = True) -> dict[str, int]:
    """``mma.cl``'s defines for an mma plan (``thread_tile`` is the warp tile; options fm, fn,
    fk, stages, group_m, precision, kk_unroll, min_blocks, and the pipeline knobs tf32_round,
    tf32_ldsm, copy_after, tf32_pipe, tf32_copy_b, frag_pipe of ``mma_spec.mma_defines``)."""
    (bm, bn, bk), (wm, wn), o = plan.block_tile, plan.thread_tile, plan.options
    kind = mma_spec.DTYPE_KIND.get(plan.dtype)
    if plan.dtype == "float32" and o.get("precision") != "tf32":
        raise ValueError("float32 runs on the tensor cores only with precision='tf32'")
    if kind is None or bm % wm or bn % wn:
        raise ValueError(f"mma: no kernel for {plan.dtype} with tiles {bm}x{bn}/{wm}x{wn}")
    dflt = mma_spec.SHAPES[kind][0]
    shape = tuple(int(o.get(x, d)) for x, d in zip(("fm", "fn", "fk"), dflt, strict=True))
    mb = o.get("min_blocks")
    return mma_spec.mma_defines(
        kind, bm, bn, bk, bm // wm, bn // wn, int(o.get("stages", 3)), shape,
        aligned_a=aligned_a, aligned_b=aligned_b, group_m=int(o.get("group_m", 1)),
        kk_unroll=o.get("kk_unroll"), min_blocks=int(mb) if mb else None,
        tf32_round=int(o.get("tf32_round", 1)), tf32_ldsm=bool(int(o.get("tf32_ldsm", 0))),
        copy_after=int(o.get("copy_after", 0)), tf32_pipe=int(o.get("tf32_pipe", 0)),
        tf32_copy_b=int(o.get("tf32_copy_b", 0)) or None, frag_pipe=int(o.get("frag_pipe", 0)),
    )  # fmt: skip


def mma_smem_bytes(defs: dict[str, int]) -> int:
    """Dynamic shared memory of one mma block (bytes)."""
    return mma_spec.smem_bytes(defs)


def defines(plan: Any, aligned: bool = False, single: bool = False) -> dict[str, int]:
    """Compile-time parameters for ``plan``; raises ValueError for tiles the source can't run.
    ``single``: the launch is one product without K slices (the batch prologue compiles out)."""
    if plan.kernel == MMA:
        return mma_defines(plan, aligned, aligned)
    s = itemsize(plan.dtype)
    vw = vector_width(s)
    bm, bn, bk = plan.block_tile
    tm, tn = plan.thread_tile
    opt = plan.options
    d = dict(REAL_BYTES=s, BM=bm, BN=bn, BK=bk, TM=tm, TN=tn, THREADS=plan.threads_per_block)
    fam = plan.kernel
    d["SPLIT_K"] = split_k(plan)
    if single and d["SPLIT_K"] == 1:
        d["NO_BATCH"] = 1
    # CUDA's __launch_bounds__ minimum, the register budget (register tiles, the gemv path);
    # absent: ptxas' own choice. OpenCL ignores it.
    if "min_blocks" in opt:
        d["MIN_BLOCKS"] = int(opt["min_blocks"])
    if fam == "naive" and opt.get("gemv") and opt.get("cpu"):  # gemv_cpu.cl: no barriers
        d["GEMV_T"] = int(plan.n < plan.m)
        d["CPU_VEC"], d["NV"] = _cpu_gemv_vectors(opt)
        d.update(WG_X=1, WG_Y=bn if d["GEMV_T"] else 1)
        d["THREADS"] = d["WG_Y"]
        return d
    if fam == "naive" and opt.get("gemv"):  # the skinny path: K split over KS items per output
        ks = int(opt.get("ks", 8))
        d["GEMV_T"] = int(plan.n < plan.m)  # which output side is short
        d["KS"] = ks
        d["GEMV_U"] = int(opt.get("gu", 4))  # 16-byte loads in flight per item
        d["GEMV_SHFL"] = int(opt.get("shfl", 1))  # CUDA: partial sums by warp shuffles
        if d["GEMV_U"] not in (1, 2, 4, 8, 16):
            raise ValueError(f"gemv gu (loads in flight) must be 1-16, a power of 2: {d['GEMV_U']}")
        if opt.get("onepass") and d["SPLIT_K"] > 1:  # K slices summed by the last group
            d["GEMV_ONEPASS"] = 1
        if d["GEMV_T"]:
            d.update(WG_X=ks, WG_Y=bn)
        else:
            d.update(WG_X=bn, WG_Y=ks)
        d["THREADS"] = bn * ks
        return d
    if fam in ("naive", "tiled"):  # one output per work-item: 2-D groups (BN x BM)
        d.update(WG_X=bn, WG_Y=bm)
    if fam == "tiled":
        d["VEC_SMEM"] = int(opt.get("vec_smem", bk % vw == 0))
        d["SPLIT"] = int(opt.get("split", 1))
        d["B_T"] = int(opt.get("b_transposed", 0))
        if bk % d["SPLIT"]:
            raise ValueError(f"tiled split needs BK % split == 0, got BK={bk}")
        if d["VEC_SMEM"] and bk % vw:
            raise ValueError(f"tiled vec_smem needs BK % {vw} == 0, got BK={bk}")
    elif fam == "register":
        use_local = int(opt.get("use_local", 1))
        d["USE_LOCAL"] = use_local
        if use_local:
            vm, vn = int(opt.get("vm", min(vw, tm))), int(opt.get("vn", min(vw, tn)))
            d.update(VM=vm, VN=vn, PAD=int(opt.get("pad", 0)), GROUP_M=int(opt.get("group_m", 1)))
            d["STAGES"] = int(opt.get("stages", 1))
            d["FRAG_PREFETCH"] = _prefetch(plan)  # next step's fragments first
            d["ALIGNED"] = int(aligned)
            bad = []
            if bk % vw or bn % vw:
                bad.append(f"BK and BN must be multiples of {vw}")
            if tm % vm or tn % vn or vm not in (1, vw, tm) or vn not in (1, vw, tn):
                bad.append(f"TM, TN must be multiples of VM={vm}, VN={vn} (1, {vw} or TM/TN)")
            if d["PAD"] % vw:
                bad.append(f"pad must be a multiple of {vw}")
            if bad:
                tiles = f"{plan.block_tile}/{plan.thread_tile}"
                raise ValueError(f"register tiles {tiles}: " + "; ".join(bad))
        else:
            cv = int(opt.get("cpu_vec", 8))
            if cv not in CPU_VECS:  # realN: OpenCL's vector types (3 has 4's size)
                raise ValueError(f"register (CPU) cpu_vec must be one of {CPU_VECS}, got {cv}")
            if tn % cv:
                raise ValueError(f"register (CPU) needs TN % cpu_vec == 0, got TN={tn}, {cv}")
            d["CPU_VEC"] = cv
            d["KC"] = int(opt.get("kc", 0))  # K block between barriers (0: one block)
    return d


def _prefetch(plan: Any) -> int:
    """``FRAG_PREFETCH`` of a register plan: its ``prefetch`` option, 0 or 1, or ``"lone"``:
    1 where the plan's grid (K slices included) leaves at most one block per SM, with no other
    block's warps to hide the local loads behind, and a K step's FMAs per thread (TM x TN)
    number under 64, too few to hide them either (the H200 OpenCL entry, docs/kernels.md;
    batched products have their own class entries)."""
    p = plan.options.get("prefetch", 0)
    if p != "lone":
        return int(p)
    alone = plan.grid[0] * plan.grid[1] * split_k(plan) <= plan.device.compute_units
    return int(alone and plan.thread_tile[0] * plan.thread_tile[1] < 64)


def split_k(plan: Any) -> int:
    """K slices of ``plan`` (``plan.options["split_k"]``, at least 1)."""
    return max(1, int(plan.options.get("split_k", 1)))


def onepass(plan: Any) -> bool:
    """Whether ``plan``'s K slices are summed in the same launch (the gemv path's ``onepass``
    option: the last group of each output block adds them, ``gemv.cl``) rather than by
    ``splitk_reduce`` after it."""
    return bool(plan.options.get("onepass")) and plan.kernel == "naive" and split_k(plan) > 1


def _cpu_gemv_vectors(opts: dict) -> tuple[int, int]:
    """``gemv_cpu.cl``'s vector width (``cpu_vec`` elements) and the vectors of B's columns an
    x @ B item owns (``nv``)."""
    cv, nv = int(opts.get("cpu_vec", 8)), int(opts.get("nv", 8))
    if cv not in CPU_VECS or nv < 1:
        raise ValueError(f"gemv (CPU) needs cpu_vec in {CPU_VECS} and nv >= 1, got {cv}, {nv}")
    return cv, nv


def launch_shape(plan: Any) -> tuple[tuple[int, int], tuple[int, int]]:
    """(groups along x/y, work-items per group along x/y) for ``plan``: 2-D groups of
    BN x BM for the one-output-per-item families, 1-D groups for the register family, and
    for the gemv path groups of (BN, KS) or (KS, BN) (see ``gemv.cl``). The batch and the
    K slices are the third grid dimension (``launch.run``)."""
    bm, bn, _ = plan.block_tile
    if plan.kernel == "naive" and plan.options.get("gemv") and plan.options.get("cpu"):
        m, n = plan.m, plan.n  # gemv_cpu.cl: a row per item, or NV * CPU_VEC columns
        if n < m:
            return (-(-n // bm), -(-m // bn)), (1, bn)
        cpu_vec, nv = _cpu_gemv_vectors(plan.options)
        return (-(-n // (nv * cpu_vec)), -(-m // bm)), (1, 1)
    if plan.kernel == "naive" and plan.options.get("gemv"):
        ks = int(plan.options.get("ks", 8))
        m, n = plan.m, plan.n
        if n < m:  # GEMV_T 1: BN rows x BM columns per group
            return (-(-n // bm), -(-m // bn)), (ks, bn)
        return (-(-n // bn), -(-m // bm)), (bn, ks)
    local = (bn, bm) if plan.kernel in ("naive", "tiled") else (plan.threads_per_block, 1)
    return tuple(plan.grid), local


REDUCE_THREADS = 256  # work-items per group of the split-K reduction


def spin_source() -> str:
    """The timing spin kernel (``spin`` in ``spin.cl``), one source for CUDA and OpenCL."""
    return _read("spin.cl")


def reduce_source(dtype: str) -> str:
    """The split-K reduction kernel (``splitk_reduce`` in ``reduce.cl``) for ``dtype``."""
    return source("reduce", dict(REAL_BYTES=itemsize(dtype), THREADS=REDUCE_THREADS, BK=1))


def aligned_ld(cols: int, vw: int) -> int:
    """A leading dimension of at least ``cols`` elements whose rows start 16-byte aligned."""
    return max(-(-cols // vw) * vw, vw)


def pad_pays(plan: Any, odd_a: bool = True, odd_b: bool = True) -> bool:
    """Whether copying the unaligned operands (``odd_a``, ``odd_b``) into 16-byte-aligned rows
    pays off: only the local-memory register kernel has 16-byte loads to gain; the rule and its
    H200 measurements are ``tiledmm.model.hierarchy.pad_pays``'s (the model uses the same one)."""
    if plan.kernel != "register" or not int(plan.options.get("use_local", 1)):
        return False
    return pad_pays_for(plan.m, plan.n, plan.k, plan.dtype, itemsize(plan.dtype), plan.device,
                        odd_a, odd_b)  # fmt: skip
