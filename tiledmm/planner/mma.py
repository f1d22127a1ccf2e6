"""The tensor-core rung's plans (issue 14): default tiles per dtype and the mma plan, with the
tensor-core levels of :mod:`tiledmm.model.tensorcore`; 16-bit plans the Hopper kernel runs
(issue 38) are :mod:`tiledmm.planner.hopper`'s."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from ..device import nvidia
from ..device.spec import DeviceSpec
from ..model import tensorcore as tc
from . import hopper
from .geometry import Geometry
from .plans import Plan, PlanError, kib, occupancy

__all__ = ["default_mma_geometry", "plan_mma"]


def default_mma_geometry(dtype: str, device: DeviceSpec, precision: str | None = None,
                         small: bool = False, fit: bool = True) -> Geometry:  # fmt: skip
    """Tiles of the mma family before tuning (the screens of benches/probes/mma.py): f64
    128x64x16 with 8 warps of 32x32, two blocks per SM, the next stage's copies issued after
    the first k-step (``copy_after`` 1; H100 session 21: 0.87 of cuBLAS DGEMM at 4096^3 and
    8192^3, where 128x128x16 with 32x64 warps ran 0.76-0.79; the H200's screen chose the same
    tile without ``copy_after``), 16-bit 128x256x32 with 8 warps of 64x64, TF32 128x256x32
    with 8 warps of 64x64 (0.37 of cuBLAS TF32 against 0.32 for 128x128x32 with 64x32 warps;
    from sm_90 rounded by cvt.rn, 4 stages and the cross-stage fragment pipe: 0.46-0.48 on the
    H200, cvt.rna 0.39); ``small``: a quarter of the block (f64 64x64 with 4 warps of 32x32,
    16-bit 128x128, TF32 128x64) for products with too few large blocks to fill the device.
    ``fit``: the planner plans both and keeps the one it predicts faster (option ``fit``; gone
    from the plan)."""
    k = tc.kind(dtype, precision) or "f64"
    fm, fn, fk = tc.default_fragment(k, nvidia.compute_capability(device))
    opts: dict[str, Any] = {"fm": fm, "fn": fn, "fk": fk, "stages": 3, "group_m": 8}
    if precision:
        opts["precision"] = precision
    if k == "f64":
        # 128 registers per thread: three blocks of 4 warps per SM (57 KB each) or two of 8
        # warps (86 KB each), these with the copies after the first k-step
        bt, wt = (64, 64, 16) if small else (128, 64, 16), (32, 32)
        opts["min_blocks"] = 3 if small else 2
        if not small:
            opts["copy_after"] = 1
    elif k in ("f16", "bf16"):
        bt, wt = ((128, 128, 32), (64, 64)) if small else ((128, 256, 32), (64, 64))
    else:
        bt, wt = ((128, 64, 16), (64, 32)) if small else ((128, 256, 32), (64, 64))
        if (nvidia.compute_capability(device) or (0, 0)) >= (9, 0):  # cvt.rn: one F2FP from sm_90
            opts["tf32_round"] = 3
            if not small:  # the H200 screen's winner: ldmatrix A, 4 stages, the fragment pipe
                opts.update(stages=4, tf32_ldsm=1, tf32_pipe=3, tf32_copy_b=2)
    if small and k != "f64":
        opts["stages"] = 4
    if fit:
        opts["fit"] = 1
    return Geometry(bt, wt, tuple(sorted(opts.items())), source=f"mma default for {k}")


def plan_mma(m: int, n: int, k: int, dtype: str, device: DeviceSpec, geo: Geometry | None,
              backend: str) -> Plan:  # fmt: skip
    """An mma plan: ``thread_tile`` is the warp tile (WM, WN); options carry the fragment
    (fm, fn, fk), stages, group_m and precision ("tf32" lets float32 in)."""
    precision = dict(geo.options).get("precision") if geo else None
    why = tc.supported(device, dtype, precision)
    if why:
        raise PlanError(why)
    geo = geo or default_mma_geometry(dtype, device, precision)
    cc = nvidia.compute_capability(device)
    if hopper.carried(dtype, backend) and hopper.runs(dtype, cc, dict(geo.options), m):
        if geo.source != "requested" or hopper.requested(geo, m):
            return hopper.plan_hopper(m, n, k, dtype, device, geo, backend)
        # tiles asked for that only mma.sync has: mma.sync runs them
    sync_only = dtype in hopper.DTYPES and cc is not None and cc[0] == 9  # the plan says so
    big = default_mma_geometry(dtype, device, precision)
    fit = dict(geo.options).get("fit")
    if fit and (geo.block_tile, geo.thread_tile) != (big.block_tile, big.thread_tile):
        opts = tuple((key, v) for key, v in geo.options if key != "fit")  # tiles were requested
        geo, fit = replace(geo, options=opts), None
    if fit:  # the model default: the faster of the two default sizes
        plans = []
        for small in (False, True):
            g = default_mma_geometry(dtype, device, precision, small=small, fit=False)
            if sync_only:  # decided above: mma.sync, for both sizes
                g = replace(g, options=tuple(sorted({**dict(g.options), "hopper": 0}.items())))
            try:
                plans.append(plan_mma(m, n, k, dtype, device, replace(g, source=geo.source),
                                       backend))  # fmt: skip
            except PlanError:
                continue
        if plans:
            return min(plans, key=lambda p: p.predicted_seconds)
        raise PlanError(f"no default mma tiles fit {device.name}")
    opts = dict(geo.options)
    if sync_only and not int(opts.get("wgmma", 0)):
        opts["hopper"] = 0
    kind = tc.kind(dtype, precision) or ""
    d_frag = tc.default_fragment(kind, nvidia.compute_capability(device))
    frag = tuple(int(opts.get(x, d)) for x, d in zip(("fm", "fn", "fk"), d_frag, strict=True))
    why = tc.supported(device, dtype, precision, frag)
    if why:
        raise PlanError(why)
    (bm, bn, bk), (wm, wn) = (int(x) for x in geo.block_tile), (int(x) for x in geo.thread_tile)
    fm, fn, fk = frag
    s, stages = tc.ITEMSIZE[dtype], int(opts.get("stages", 3))
    bad = []
    if min(bm, bn, bk, wm, wn) < 1 or bm % wm or bn % wn or wm % fm or wn % fn:
        bad.append(f"block {bm}x{bn} must split into warp tiles {wm}x{wn} of {fm}x{fn} fragments")
    elif kind in ("f16", "bf16") and (wn // fn) % 2:
        bad.append("16-bit warp tiles need an even number of 8-wide fragments (ldmatrix.x4)")
    if bk % fk or (bk * s) % 16 or (bn * s) % 16:
        bad.append(f"BK must be a multiple of {fk} and BK, BN of 16 bytes")
    if stages < 2:
        bad.append("the cp.async pipeline needs at least 2 stages")
    if bad:
        raise PlanError(f"mma tiles {bm}x{bn}x{bk}/{wm}x{wn}: " + "; ".join(bad))
    threads = 32 * (bm // wm) * (bn // wn)
    if threads > device.max_threads_per_block:
        raise PlanError(f"{threads} threads per block, over {device.name}'s "
                        f"{device.max_threads_per_block}; use larger warp tiles")  # fmt: skip
    lda, ldb = tc.padded_lds(kind, bk, bn, fk)
    shared = stages * (bm * lda + bk * ldb) * s
    if shared > nvidia.optin_shared(device):
        raise PlanError(f"{stages} stages of {bm}x{bn}x{bk} need {kib(shared)} of shared memory, "
                        f"over the {kib(nvidia.optin_shared(device))} a block may opt into on "
                        f"{device.name}; use fewer stages or smaller tiles")  # fmt: skip
    acc = tc.accumulator_bytes(kind)
    # fragments live at once: f64 walks one FK step at a time (KK_UNROLL); others ~2 steps
    steps = 1 if kind == "f64" else min(2, bk // fk)
    regs = geo.registers or int(wm * wn / 32 * acc / 4 + steps * (wm + wn) * fk / 32 * s / 4 + 48)
    if regs > device.max_registers_per_thread:
        raise PlanError(f"a {wm}x{wn} {dtype} warp tile needs about {regs} registers per "
                        f"thread, over {device.max_registers_per_thread}; use a smaller warp "
                        "tile")  # fmt: skip
    gx, gy = math.ceil(n / bn) if n else 0, math.ceil(m / bm) if m else 0
    mp, np_, kp = gy * bm, gx * bn, math.ceil(k / bk) * bk
    flops, executed = 2 * m * n * k, 2 * mp * np_ * kp
    global_bytes = (s * kp * (bm + bn) * mp * np_) // (bm * bn)
    occ = occupancy(device, "mma", threads, shared, regs, gx * gy)
    out_s = tc.ITEMSIZE[tc.INPUTS[dtype][2]]
    g = dict(m=m, n=n, k=k, mp=mp, np=np_, kp=kp, bm=bm, bn=bn, gx=gx, gy=gy, wm=wm, wn=wn,
             warps=threads // 32,
             fragment=frag, global_bytes=global_bytes, group=int(opts.get("group_m", 1)),
             resident=occ.blocks_per_unit * device.compute_units)  # fmt: skip
    levels = tuple(tc.mma_levels(g, kind, s, out_s, device, precision, dtype,
                                 occ.blocks_per_unit)) if flops else ()  # fmt: skip
    top = max(levels, key=lambda lv: lv.seconds) if levels else None
    return Plan(
        backend=backend, kernel="mma", dtype=dtype, m=m, n=n, k=k, block_tile=(bm, bn, bk),
        thread_tile=(wm, wn), threads_per_block=threads, grid=(gx, gy),
        padded_shape=(mp, np_, kp), padding_waste=1 - flops / executed if executed else 0.0,
        flops=flops, global_bytes=global_bytes,
        intensity=flops / global_bytes if global_bytes else 0.0, shared_bytes=shared,
        registers_per_thread=regs, bound=top.name if top else "compute",
        predicted_seconds=device.host_cost(backend) + (top.seconds if top else 0.0),
        occupancy=occ, device=device, options=opts, geometry_source=geo.source, levels=levels,
    )  # fmt: skip
