"""The Hopper rung's plans (issue 38): whether the TMA + ``wgmma`` kernel runs a 16-bit or
TF32 mma plan (:func:`runs`), its configurations (:data:`CONFIGS`,
:data:`CONFIGS_TF32`, :func:`config`) and their constraints (:func:`problems`), and the plan
that carries its geometry and levels (:func:`plan_hopper`, the model in
:mod:`tiledmm.model.hopper`). The CuPy backend reads these decisions (its ``hopper.takes``,
``config`` and ``defines``), so the plan describes the kernel that runs it. Here "float32" means
TF32 (``precision="tf32"``): the kernel's DTYPE 3 has no IEEE float32 path.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

from ..device import nvidia
from ..device.spec import DeviceSpec
from ..model import hopper as hm
from ..model import tensorcore as tc
from .geometry import Geometry
from .plans import Plan, PlanError, occupancy

__all__ = ["DTYPES", "TF32", "CONFIGS", "CONFIGS_TF32", "KEYS", "DECODE_M", "DEFAULT_ON", "ENV",
           "ENV_TF32", "DEFAULT_ON_TF32", "BACKENDS", "carried", "runs", "config", "bk_of",
           "smem_bytes", "problems", "requested", "plan_hopper"]  # fmt: skip

DTYPES = ("float16", "bfloat16")
#: the input dtype of the TF32 path (DTYPE 3: float32 A, B, C with precision "tf32")
TF32 = "float32"
#: named configurations: block tile (bm, bn), consumer warpgroups (cm, cn), stages, cluster
#: (blocks along M sharing B by multicast), group_m (tile rows per group of the order), epi
#: (1: C through shared memory and TMA stores). "large": the H200 run's best (Le, 2026-12-07:
#: 0.98-1.03 of cuBLAS at 4096^3-8192^3 and the prefill shapes); "decode": D2 (0.875 at 8 and
#: 32 rows against D's 0.74-0.75)
CONFIGS: dict[str, dict[str, int]] = {
    "large": dict(bm=128, bn=256, cm=2, cn=1, stages=3, cluster=1, group_m=16, epi=1),
    "decode": dict(bm=64, bn=256, cm=1, cn=2, stages=5, cluster=1, group_m=1, epi=0),
}
#: the TF32 path's configuration (BK 32 floats: the same 128-byte stage rows), every row count:
#: the GPU probe's default "L" (benches/probes/hopper_tf32.py); C from registers only (epi 0)
CONFIGS_TF32: dict[str, dict[str, int]] = {
    "tf32": dict(bm=128, bn=256, cm=2, cn=1, stages=4, cluster=1, group_m=16, epi=0),
}
#: the fields a plan's options may set as ``hopper_<key>`` (wait1 0: each stage's MMAs waited
#: for before the next; default 1, one group in flight)
KEYS = ("bm", "bn", "cm", "cn", "stages", "cluster", "group_m", "epi", "wait1")
#: products with at most this many rows take the "decode" configuration
DECODE_M = 64
#: whether 16-bit mma plans on 9.x devices take the kernel unless told otherwise: on since the
#: H200 run of 2026-12-07 (docs/mma.md, "The fifth rung"), where tiledmm.matmul with it ran at
#: 0.91-1.05 of cuBLAS against mma.sync's 0.47-0.53; decode shapes too since the H100 run of
#: session 19, once the hot path kept 16-bit products (1, 8 and 32 x 14336 x 4096 through
#: tiledmm.matmul: 1.05-1.09 of cuBLAS with it, 0.64-1.02 with mma.sync)
DEFAULT_ON = True
#: the environment switch (1 / 0), read when a product is planned
ENV = "TILEDMM_HOPPER16"
#: the TF32 path's switch (1 / 0), read when a product is planned
ENV_TF32 = "TILEDMM_HOPPER_TF32"
#: whether TF32 plans on 9.x take the kernel unless told otherwise: on since the H100 run of
#: session 20 (benches/results/logs/h100-s20.txt; benches/studies/mma_results --precision tf32,
#: cuBLAS TF32 in the same run): 0.87 / 0.94 of cuBLAS at 4096^3 / 8192^3 (B^T pack included)
#: against the mma.sync route's 0.31 / 0.32, the error equal to cuBLAS's (2.6e-4)
DEFAULT_ON_TF32 = True


#: the backends whose mma family carries the kernel (TF32 plans of others, such as OpenCL's
#: mma family, keep their own kernel; 16-bit mma plans exist only where the kernel does)
BACKENDS = ("cupy",)


def carried(dtype: str, backend: str) -> bool:
    """Whether a ``dtype`` mma plan for ``backend`` may take the kernel at all (``backend`` ""
    : a plan for no backend in particular)."""
    return dtype != TF32 or not backend or backend in BACKENDS


def runs(dtype: str, cc: tuple[int, int] | None, options: Mapping[str, Any], m: int) -> bool:
    """Whether the Hopper kernel runs a ``dtype`` mma plan of ``m`` rows on a device of compute
    capability ``cc``: 16-bit on 9.x, where the option ``hopper`` (1 / 0), else the environment's
    ``TILEDMM_HOPPER16`` (1 / 0), else ``DEFAULT_ON`` says so (``m``: every row count alike
    since decode shapes measured faster with it); never a plan that asks for the older
    ``wgmma`` experiment. TF32 (float32 with option ``precision`` "tf32") likewise: the option
    ``hopper``, else ``TILEDMM_HOPPER_TF32``, else ``DEFAULT_ON_TF32``."""
    tf32 = dtype == TF32
    if tf32 and options.get("precision") != "tf32":
        return False
    if not (tf32 or dtype in DTYPES) or cc is None or cc[0] != 9 or int(options.get("wgmma", 0)):
        return False
    if "hopper" in options:
        return bool(int(options["hopper"]))
    env = os.environ.get(ENV_TF32 if tf32 else ENV)
    return env == "1" if env in ("0", "1") else (DEFAULT_ON_TF32 if tf32 else DEFAULT_ON)


def config(m: int, options: Mapping[str, Any], dtype: str = "float16") -> dict[str, int]:
    """The kernel's configuration: ``CONFIGS["decode"]`` for at most ``DECODE_M`` rows, else
    ``"large"`` (TF32: ``CONFIGS_TF32["tf32"]``); options ``hopper_<key>`` (:data:`KEYS`)
    override single fields."""
    if dtype == TF32:
        cfg = dict(CONFIGS_TF32["tf32"])
    else:
        cfg = dict(CONFIGS["decode" if m <= DECODE_M else "large"])
    for key in KEYS:
        v = options.get(f"hopper_{key}")
        if v is not None:
            cfg[key] = int(v)
    return cfg


def bk_of(dtype: str) -> int:
    """K elements per stage: one 128-byte row (64 16-bit values, 32 floats for TF32)."""
    return hm.LINE // tc.ITEMSIZE.get(dtype, 2)


def smem_bytes(cfg: Mapping[str, int]) -> int:
    """Dynamic shared memory of one block: the stage ring (A: BM rows of 128 bytes, B: BN of
    them), its 2 x STAGES mbarriers, with ``epi`` the C staging panels (BM x BN 16-bit
    values), and 1 KiB for the ring's 1024-byte alignment."""
    c = cfg["bm"] * cfg["bn"] * 2 if cfg.get("epi") else 0
    return cfg["stages"] * ((cfg["bm"] + cfg["bn"]) * 128 + 16) + c + 1024


def problems(dtype: str, cfg: Mapping[str, int], smem_limit: int) -> list[str]:
    """What ``hopper_gemm.cu`` cannot run in ``cfg`` for ``dtype`` (empty: it can), with
    ``smem_limit`` bytes of dynamic shared memory per block."""
    bm, bn, cm, cn = cfg["bm"], cfg["bn"], cfg["cm"], cfg["cn"]
    stages, cluster = cfg["stages"], cfg["cluster"]
    bad = []
    if dtype not in DTYPES and dtype != TF32:
        bad.append(f"dtype {dtype!r} is not float16 or bfloat16 (or float32 as TF32)")
    if dtype == TF32 and cfg.get("epi"):
        bad.append("TF32 stores C from registers only (epi 0; the TMA-store epilogue is "
                   "float16 or bfloat16 only)")  # fmt: skip
    if cm < 1 or cn < 1 or cm * cn > 2:
        bad.append("one or two consumer warpgroups (cm * cn)")
    elif bm % cm or bn % cn:
        bad.append(f"{cm}x{cn} consumers must split the block evenly")
    else:
        wm, wn = bm // cm, bn // cn
        if wm not in (64, 128) or wn not in (64, 128, 256) or wm // 64 * wn > 256:
            bad.append(f"each consumer owns 64 or 128 rows of 64, 128 or 256 columns, at most "
                       f"128 accumulators per thread (not {wm}x{wn})")  # fmt: skip
    if cluster not in (1, 2) or (cluster == 2 and (bn // 64) % 2):
        bad.append("cluster 1, or 2 with an even number of 64-column B panels")
    if stages < 2:
        bad.append("at least 2 stages")
    if bm > 256:
        bad.append("BM at most 256 (one TMA box)")
    if cfg.get("group_m", 1) < 1:
        bad.append("group_m at least 1")
    if not bad and smem_bytes(cfg) > smem_limit:
        bad.append(f"{stages} stages need {smem_bytes(cfg)} bytes of shared memory, over "
                   f"{smem_limit}")  # fmt: skip
    return bad


def requested(geo: Geometry, m: int, dtype: str | None = None) -> dict[str, int] | None:
    """A requested geometry (``plan --block-tile``) as a configuration: block tile
    BM x BN x BK (64; TF32: 32) and warp tile WM x WN as consumers of WM x WN; None when it is
    no such tile (then the tiles are ``mma.sync``'s). ``dtype`` None: 16-bit tiles, or TF32
    ones where the options say precision "tf32" (callers that do not pass the dtype)."""
    if dtype is None:
        tf32 = dict(geo.options).get("precision") == "tf32"
        return requested(geo, m, "float16") or (requested(geo, m, TF32) if tf32 else None)
    (bm, bn, bk), (wm, wn) = (int(x) for x in geo.block_tile), (int(x) for x in geo.thread_tile)
    if bk != bk_of(dtype) or min(bm, bn, wm, wn) < 1 or bm % wm or bn % wn:
        return None
    cfg = dict(config(m, dict(geo.options), dtype), bm=bm, bn=bn, cm=bm // wm, cn=bn // wn)
    return cfg if not problems(dtype if dtype == TF32 else "float16", cfg, 1 << 30) else None


def plan_hopper(m: int, n: int, k: int, dtype: str, device: DeviceSpec, geo: Geometry,
                backend: str) -> Plan:  # fmt: skip
    """The plan of a product the Hopper kernel runs: its block tile, consumer tile
    (``thread_tile``), options (``hopper`` 1 and every ``hopper_<key>`` resolved), shared
    memory, the tile grid (``grid``: tiles along N and M; the launch is persistent) and the
    levels of :func:`tiledmm.model.hopper.hopper_levels`."""
    opts = dict(geo.options)
    tf32 = dtype == TF32
    asked = requested(geo, m, dtype) if geo.source == "requested" else None
    cfg = asked or config(m, opts, dtype)
    limit = nvidia.optin_shared(device)
    bad = problems(dtype, cfg, limit)
    if bad:
        raise PlanError(f"hopper tiles {cfg['bm']}x{cfg['bn']}: " + "; ".join(bad))
    if asked or any(key.startswith("hopper_") for key in opts):
        why = geo.source
    elif tf32:
        why = (f"Hopper TF32 configuration (hopper.CONFIGS_TF32; {ENV_TF32}=0 or option hopper 0 "
               f"turn it off; the GPU probe's default L); tiles asked: {geo.source}")  # fmt: skip
    else:
        name = "decode" if m <= DECODE_M else "large"
        why = (f"Hopper {name!r} configuration (hopper.CONFIGS, "
               f"{'at most' if name == 'decode' else 'more than'} {DECODE_M} rows: "
               + ("the H200 run's best, Le: 0.98-1.03 of cuBLAS from 4096^3" if name == "large"
                  else "D2: 0.875 of cuBLAS at 8 and 32 rows")
               + f"); tiles asked: {geo.source}")  # fmt: skip
    bm, bn, s, bk = cfg["bm"], cfg["bn"], tc.ITEMSIZE[dtype], bk_of(dtype)
    kp = math.ceil(k / bk) * bk
    per = 16 // s  # elements of a 16-byte row unit (TMA's rule)
    c = dict(cfg, m=m, n=n, k=k, bk=bk, epi=int(cfg.get("epi", 0)),
             copied=hm.copies(m, n, k, s), c_tma=n % 8 == 0 or m <= 1)  # fmt: skip
    c["pitch_a"] = -(-k // per) * per * s
    if tf32:  # B^T packed by the kernel's hopper_tf32_pack_bt: N rows of K rounded up to 4
        c["pack"] = (k * n, n * hm.packed_k(k))
        c["pitch_b"], c["b_rows"] = hm.packed_k(k) * s, n
    else:
        c["pitch_b"] = -(-n // per) * per * s
    t = hm.tiles_of(c, device.compute_units)
    threads = 128 * (cfg["cm"] * cfg["cn"] + 1)
    shared = smem_bytes(cfg)
    regs = device.registers_per_unit // threads // 8 * 8  # setmaxnreg moves them to consumers
    occ = occupancy(device, "mma", threads, shared, regs, t["tiles"])
    mp, np_ = t["tm"] * bm, t["tn"] * bn
    flops, executed = 2 * m * n * k, 2 * mp * np_ * kp
    global_bytes = (s * kp * (bm + bn) * mp * np_) // (bm * bn)
    levels = tuple(hm.hopper_levels(c, s, device, dtype)) if flops else ()
    top = max(levels, key=lambda lv: lv.seconds) if levels else None
    options = {key: v for key, v in opts.items() if key == "precision"}
    options.update({"hopper": 1, **{f"hopper_{key}": int(v) for key, v in cfg.items()}})
    return Plan(
        backend=backend, kernel="mma", dtype=dtype, m=m, n=n, k=k, block_tile=(bm, bn, bk),
        thread_tile=(bm // cfg["cm"], bn // cfg["cn"]), threads_per_block=threads,
        grid=(t["tn"], t["tm"]), padded_shape=(mp, np_, kp),
        padding_waste=1 - flops / executed if executed else 0.0, flops=flops,
        global_bytes=global_bytes, intensity=flops / global_bytes if global_bytes else 0.0,
        shared_bytes=shared, registers_per_thread=regs, bound=top.name if top else "compute",
        predicted_seconds=device.host_cost(backend) + (top.seconds if top else 0.0),
        occupancy=occ, device=device, options=options, geometry_source=why, levels=levels,
    )  # fmt: skip
