"""The ``mma`` family's compile-time layout (``mma.cl``): defines and shared-memory size.

Imports only the padding rule from tiledmm (:func:`tiledmm.model.tensorcore.padded_lds`, the one
place the padded shared-memory leading dimensions are computed), so the kernel and the planner
agree on the dynamic shared-memory size. ``benches/probes/mma.py`` loads this file by path, run
as ``python -m benches.probes.mma`` from the checkout (which puts ``tiledmm`` on the path).

Kinds (``MMA_KIND``): ``f64`` (DMMA, f64 in and out), ``f16`` / ``bf16`` (16-bit in, f32
accumulate, 16-bit out), ``tf32`` (f32 in and out, inputs rounded to TF32 by ``cvt.rna`` or
``cvt.rn``).
Fragment shapes (``mma.sync`` M x N x K per warp instruction): f64 8x8x4 (sm_80), 16x8x4,
16x8x8, 16x8x16 (sm_90); f16/bf16 16x8x16; tf32 16x8x8.
"""

from __future__ import annotations

from tiledmm.device.nvidia import OPTIN_SHARED_KIB
from tiledmm.model.tensorcore import padded_lds

__all__ = [
    "KINDS", "SHAPES", "DTYPE_KIND", "ELEM_BYTES", "mma_defines", "smem_bytes", "check",
    "wgmma_defines", "wgmma_smem_bytes", "WGMMA_SMEM_LIMIT",
]  # fmt: skip

KINDS = {"f64": 1, "f16": 2, "bf16": 3, "tf32": 4}
ELEM_BYTES = {"f64": 8, "f16": 2, "bf16": 2, "tf32": 4}
#: NumPy dtype name (and "tf32" for float32 on request) -> kind
DTYPE_KIND = {"float64": "f64", "float16": "f16", "bfloat16": "bf16", "float32": "tf32"}
#: fragment shapes (FM, FN, FK) per kind; the first is the default
SHAPES = {
    "f64": ((16, 8, 8), (8, 8, 4), (16, 8, 4), (16, 8, 16)),
    "f16": ((16, 8, 16),),
    "bf16": ((16, 8, 16),),
    "tf32": ((16, 8, 8),),
}


def check(kind: str, bm: int, bn: int, bk: int, warps_m: int, warps_n: int, stages: int,
          shape: tuple[int, int, int]) -> list[str]:  # fmt: skip
    """What is wrong with a configuration (empty when the kernel can run it)."""
    bad = []
    if kind not in KINDS:
        return [f"unknown mma kind {kind!r} (one of {', '.join(KINDS)})"]
    fm, fn, fk = shape
    if tuple(shape) not in SHAPES[kind]:
        bad.append(f"fragment {fm}x{fn}x{fk} is not an {kind} mma.sync shape {SHAPES[kind]}")
    if warps_m < 1 or warps_n < 1 or bm % (warps_m * fm) or bn % (warps_n * fn):
        bad.append(f"block {bm}x{bn} must split into {warps_m}x{warps_n} warp tiles of whole "
                   f"{fm}x{fn} fragments")  # fmt: skip
    elif kind in ("f16", "bf16") and (bn // warps_n // fn) % 2:
        bad.append("f16/bf16 warp tiles need an even number of 8-wide fragments (ldmatrix.x4)")
    if bk % fk or bk % (16 // ELEM_BYTES[kind]):
        bad.append(f"BK={bk} must be a multiple of {fk} and of a 16-byte chunk")
    if bn % (16 // ELEM_BYTES[kind]):
        bad.append(f"BN={bn} must be a multiple of a 16-byte chunk")
    if stages < 2:
        bad.append("the cp.async pipeline needs at least 2 stages")
    if warps_m * warps_n * 32 > 1024:
        bad.append("at most 32 warps per block")
    return bad


def mma_defines(kind: str, bm: int, bn: int, bk: int, warps_m: int, warps_n: int,
                stages: int = 3, shape: tuple[int, int, int] | None = None,
                aligned_a: bool = True, aligned_b: bool = True, group_m: int = 1,
                scalar: bool = False, kk_unroll: int | None = None,
                min_blocks: int | None = None, tf32_round: int = 1,
                tf32_ldsm: bool = False, tf32_bvec: bool = False,
                copy_after: int = 0, tf32_round_at: int | None = None,
                tf32_pipe: int = 0, tf32_copy_b: int | None = None, frag_pipe: int = 0,
                ) -> dict[str, int]:  # fmt: skip
    """The ``#define``s of one ``mma.cl`` build; raises ValueError for tiles it can't run.

    ``aligned_a``/``aligned_b``: the operand's rows start 16-byte aligned (leading dimension a
    multiple of 16 bytes and a 16-byte aligned base): 16-byte ``cp.async`` copies, else one
    element per copy. ``scalar``: the plain-FMA micro-kernel even under CUDA (for testing).
    ``kk_unroll`` 1: one FK step at a time (default for f64: fewer registers, see mma.cl);
    ``min_blocks``: resident blocks per SM the register allocation must allow.
    TF32 only: ``tf32_round`` 1 rounds every fragment register (cvt.rna in the inner loop), 2 each
    thread rounds the pieces it copied once per stage (in shared memory, before the barrier), 0
    truncates (the raw float32 bits); 3 and 4 round to nearest even (cvt.rn: one instruction on
    sm_90), 3 in the inner loop, 4 in shared memory while the previous stage is multiplied
    (``tf32_round_at`` k-steps into it; default half the stage); ``tf32_pipe`` 1/2/3: fragments
    double-buffered across the stage boundary, STAGES tiles in flight, the stage's last k-step
    multiplied after (1) or before (2) the barrier, or (3) the copies deferred past the next
    tile's first k-step (STAGES-1 in flight); an even number of k-steps per stage (no
    ``copy_after``, except in 3: k-steps before A's copies, ``tf32_copy_b`` before B's, both
    default 1); 16-byte aligned operands only, others take the plain loop; ``tf32_ldsm``: A
    fragments by ldmatrix.x4; ``tf32_bvec``: B fragments by 16-byte loads (warp tiles 64 wide,
    BN a multiple of 32; see mma.cl).
    ``copy_after``: FK steps of a stage multiplied before the next stage's copies are issued
    (0: right after the barrier, ahead of every fragment load). float16/bfloat16:
    ``frag_pipe`` 1-4 is TF32's ``tf32_pipe`` for the ldmatrix fragments (same rules)."""
    shape = tuple(shape or SHAPES.get(kind, ((16, 8, 8),))[0])
    bad = check(kind, bm, bn, bk, warps_m, warps_n, stages, shape)
    if bad:
        raise ValueError(f"mma tiles {bm}x{bn}x{bk} ({kind}): " + "; ".join(bad))
    fm, fn, fk = shape
    threads, ch = 32 * warps_m * warps_n, 16 // ELEM_BYTES[kind]
    va, vb = ch if aligned_a else 1, ch if aligned_b else 1
    if threads % (bk // va) or threads % (bn // vb):
        raise ValueError(f"mma tiles {bm}x{bn}x{bk} ({kind}): {threads} threads must be a "
                         f"multiple of the copies per tile row ({bk // va} of A, {bn // vb} of B; "
                         "unaligned rows copy one element at a time)")  # fmt: skip
    sa, sb = padded_lds(kind, bk, bn, fk, bvec=tf32_bvec)
    es = ELEM_BYTES[kind]
    extra = {"MIN_BLOCKS": min_blocks} if min_blocks else {}
    if copy_after:
        extra["COPY_AFTER"] = int(copy_after)
    if kk_unroll is None:
        kk_unroll = int(kind == "f64")
    if kind == "tf32":
        if tf32_round not in (0, 1, 2, 3, 4):
            raise ValueError(f"tf32_round must be 0, 1, 2, 3 or 4, not {tf32_round!r}")
        extra |= {"TF32_RNA": int(tf32_round), "TF32_LDSM": int(tf32_ldsm)}
        if tf32_round_at is not None:
            if not 0 <= tf32_round_at <= bk // fk:
                raise ValueError(f"tf32_round_at must be 0..{bk // fk} k-steps")
            extra["TF32_ROUND_AT"] = int(tf32_round_at)
        extra |= _pipe(kind, bm, bn, bk, fk, tf32_pipe, copy_after, tf32_copy_b,
                       aligned_a and aligned_b)  # fmt: skip
        if tf32_bvec and (bn // warps_n != 64 or bn % 32):
            raise ValueError(f"mma tiles {bm}x{bn}x{bk} (tf32): tf32_bvec needs warp tiles 64 "
                             "columns wide and BN a multiple of 32")  # fmt: skip
        extra["TF32_BVEC"] = int(tf32_bvec)
    elif tf32_bvec or tf32_round_at is not None or tf32_pipe or tf32_copy_b:
        raise ValueError("tf32_bvec, tf32_round_at, tf32_pipe, tf32_copy_b are for TF32 only")
    if frag_pipe and kind not in ("f16", "bf16"):
        raise ValueError("frag_pipe is for float16 and bfloat16 (TF32: tf32_pipe)")
    if frag_pipe:
        extra |= _pipe(kind, bm, bn, bk, fk, frag_pipe, copy_after, None, aligned_a and aligned_b)
    return extra | dict(
        MMA_KIND=KINDS[kind], REAL_BYTES=8 if kind == "f64" else 4, ELEM_BYTES=es,
        BM=bm, BN=bn, BK=bk, TM=1, TN=1, WARPS_M=warps_m, WARPS_N=warps_n,
        THREADS=32 * warps_m * warps_n, FM=fm, FN=fn, FK=fk, STAGES=stages,
        SA_LD=sa, SB_LD=sb, SMEM_ELEMS=stages * (bm * sa + bk * sb),
        ALIGNED_A=int(aligned_a), ALIGNED_B=int(aligned_b), GROUP_M=group_m,
        MMA_SCALAR=int(scalar), KK_UNROLL=int(kk_unroll),
    )  # fmt: skip


def _pipe(kind: str, bm: int, bn: int, bk: int, fk: int, pipe: int, copy_after: int,
          copy_b: int | None, aligned: bool) -> dict[str, int]:  # fmt: skip
    """FRAG_PIPE's defines (fragments double-buffered across the stage boundary; see mma.cl)."""
    if not pipe or not aligned:  # one-element copies need the registers: the plain loop
        return {}
    if pipe not in (1, 2, 3, 4):
        raise ValueError(f"the fragment pipe must be 0..4, not {pipe!r}")
    ks, last = bk // fk, max(copy_after or 1, copy_b or 1)
    if ks % 2 or (copy_after and pipe < 3):  # 3, 4: copies deferred
        raise ValueError(f"mma tiles {bm}x{bn}x{bk} ({kind}): the fragment pipe needs an even "
                         "number of k-steps per stage (copy_after: pipe 3)")  # fmt: skip
    if pipe >= 3 and last >= ks:
        raise ValueError(f"fragment pipe 3/4 issues copies after 1..{ks - 1} k-steps")
    out = {"FRAG_PIPE": int(pipe)}
    if copy_b and pipe >= 3:
        out["TF32_COPY_B"] = int(copy_b)
    return out


def smem_bytes(defs: dict[str, int]) -> int:
    """Dynamic shared memory of one block (bytes)."""
    return defs["SMEM_ELEMS"] * defs["ELEM_BYTES"]


#: the dynamic shared memory a block may opt into on sm_90 (227 KiB; the fact in device/nvidia)
WGMMA_SMEM_LIMIT = OPTIN_SHARED_KIB[(9, 0)] * 1024


def wgmma_smem_bytes(d: dict[str, int]) -> int:
    """Dynamic shared memory of one ``wgmma.cu`` block (stage ring, mbarriers, 1 KiB so the
    ring can start 1024-byte aligned, as the 128-byte swizzle needs)."""
    bm = 64 * d["WG_M"] * d["NWG"]
    return d["STAGES"] * ((bm + d["BN"]) * 128 + 16 * d["TMA"]) + 1024


def wgmma_defines(bm: int, bn: int, bk: int = 32, stages: int = 4, group_m: int = 8,
                  wg_m: int = 1, tma: bool = False, cluster: int = 1, swizzle: bool = True,
                  wait1: bool = True, tf32_round: int = 3,
                  half: int = 0) -> dict[str, int]:  # fmt: skip
    """The ``#define``s of one ``wgmma.cu`` build (Hopper TF32); raises ValueError for what the
    kernel can't run. Block ``bm`` x ``bn`` x 32: ``bm / (64 wg_m)`` consumer warpgroups, each
    ``wg_m`` m64 slabs of ``bn`` (64, 128 or 256) columns; ``tma``: TMA copies by a producer
    warpgroup (128-byte swizzle only), ``cluster`` 2 blocks along M sharing B by multicast;
    else cp.async by every thread (``swizzle`` 0: no-swizzle core matrices; ``wait1``: one
    wgmma group in flight across the barrier). ``tf32_round`` as ``mma_defines``: 3/4 round to
    nearest even (cvt.rn), 1/2 to nearest away (cvt.rna), both in the pack pre-pass. ``half``
    1 / 2: float16 / bfloat16 inputs (``wgmma_gemm_h``: BK 64, BN 128 or 256, cp.async only)."""
    bad = []
    if bk != (64 if half else 32):
        bad.append(f"BK must be {64 if half else 32} (one 128-byte swizzle row)")
    if bn not in ((128, 256) if half else (64, 128, 256)):
        bad.append(f"BN must be {'128 or 256' if half else '64, 128 or 256'} (the wgmma N)")
    if half not in (0, 1, 2) or (half and tma):
        bad.append("half: 1 (float16) or 2 (bfloat16), cp.async only")
    if wg_m not in (1, 2) or bm % (64 * wg_m) or not 1 <= bm // (64 * wg_m) <= 3:
        bad.append(f"BM must be 64 * wg_m (1 or 2) * 1..3 warpgroups, not {bm} (wg_m {wg_m})")
    if wg_m * bn > 256:
        bad.append("at most 128 accumulators per thread (wg_m * BN <= 256)")
    if stages < (3 if wait1 and not tma else 2):
        bad.append("too few stages (cp.async with wait1: 3; else 2)")
    if cluster not in (1, 2) or (cluster == 2 and not tma):
        bad.append("cluster must be 1, or 2 with tma")
    if cluster == 2 and group_m % 2:
        bad.append("clusters of 2 need an even group_m")
    if tma and not swizzle:
        bad.append("tma copies here use the 128-byte swizzle")
    if tf32_round not in (1, 2, 3, 4):
        bad.append("tf32_round must be 1..4 (wgmma always rounds: in the pack pre-pass)")
    d = dict(BN=bn, WG_M=wg_m, NWG=max(1, bm // (64 * wg_m)), STAGES=stages, SWIZZLE=int(swizzle),
             WAIT1=int(wait1), GROUP_M=group_m, MINB=1, NS_SWAP=0,
             ROUND=1 if tf32_round >= 3 else 2, TMA=int(tma), CLUSTER=cluster,
             HALF=half)  # fmt: skip
    if not bad and wgmma_smem_bytes(d) > WGMMA_SMEM_LIMIT:
        bad.append(f"{stages} stages need {wgmma_smem_bytes(d)} bytes of shared memory, over "
                   f"{WGMMA_SMEM_LIMIT}")  # fmt: skip
    if bad:
        raise ValueError(f"wgmma tiles {bm}x{bn}x{bk}: " + "; ".join(bad))
    return d
