"""The planner: tile geometry, padding, arithmetic intensity, occupancy and roofline time.

Pure Python. Given a problem (M, N, K, dtype), a kernel family and a DeviceSpec, it returns a
:class:`Plan`. ``global_bytes``/``intensity`` are DESIGN.md's tiling formulas: naive reads a row
of A and a column of B per output (2K elements); a BM x BN block tile reads its A row-panel and
B column-panel once, so global intensity is 2*BM*BN / ((BM+BN) * itemsize). The prediction is
the hierarchical roofline of :mod:`tiledmm.hierarchy` (``plan.levels``: bytes and time at every
level; the slowest binds) on devices that describe their levels, else the single DRAM roofline.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from . import tensorcore as tc
from .backend import KERNEL_FAMILIES, Geometry
from .device import DeviceSpec
from .hierarchy import Level, cpu_levels, engine_of, gpu_levels

__all__ = ["Plan", "Occupancy", "PlanError", "make_plan", "default_geometry"]

_ITEMSIZE = {"float16": 2, "float32": 4, "float64": 8}


class PlanError(ValueError):
    """A requested geometry does not fit the device, or the request is malformed."""


@dataclass(frozen=True)
class Occupancy:
    """Resident blocks per compute unit, what limits them, and how the grid fills the device."""

    blocks_per_unit: int
    limiter: str  # "threads" | "shared memory" | "registers" | "block slots" | "one block per core"
    threads_per_unit: int
    fraction: float  # resident threads / maximum threads per unit
    waves: int
    wave_efficiency: float  # useful block slots / slots over all waves (tile quantization)

    def __str__(self) -> str:
        return (
            f"{self.blocks_per_unit} block(s) per unit ({self.threads_per_unit} threads, "
            f"{self.fraction:.0%} of the maximum), limited by {self.limiter}; "
            f"{self.waves} wave(s) at {self.wave_efficiency:.0%} efficiency"
        )


@dataclass(frozen=True)
class Plan:
    """Everything decided before a launch. Read-only; ``str(plan)`` explains it."""

    backend: str
    kernel: str
    dtype: str
    m: int
    n: int
    k: int
    block_tile: tuple[int, int, int]
    thread_tile: tuple[int, int]
    threads_per_block: int
    grid: tuple[int, int]  # (blocks along N, blocks along M): CUDA's (x, y)
    padded_shape: tuple[int, int, int]
    padding_waste: float
    flops: int
    global_bytes: int
    intensity: float
    shared_bytes: int
    registers_per_thread: int
    bound: str
    predicted_seconds: float
    occupancy: Occupancy
    device: DeviceSpec
    options: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    geometry_source: str = "default"
    #: every level's traffic and time (tiledmm.hierarchy.Level), nearest the ALUs first
    levels: tuple[Level, ...] = field(default=(), compare=False)

    @property
    def binding(self) -> Level | None:
        """The level that takes longest: the one that bounds the predicted time."""
        return max(self.levels, key=lambda lv: lv.seconds, default=None)

    def level(self, name: str) -> Level | None:
        """The level called ``name`` ("DRAM", "L2", "shared memory", "compute", ...)."""
        return next((lv for lv in self.levels if lv.name == name), None)

    @cached_property
    def launch_key(self) -> tuple:
        """Everything that decides a launch of this plan: what backends key launch caches on
        (``id(plan)`` would be reused after the plan is freed; options are not in ``hash``).
        Computed once per plan."""
        opts = tuple(sorted(self.options.items()))
        return (self.backend, self.kernel, self.dtype, self.m, self.n, self.k,
                self.block_tile, self.thread_tile, opts, self.device.name)  # fmt: skip

    @property
    def predicted_gflops(self) -> float:
        return self.flops / self.predicted_seconds / 1e9 if self.predicted_seconds else 0.0

    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__ if k not in ("device",)}
        d["occupancy"] = self.occupancy.__dict__.copy()
        d["levels"] = [
            lv.to_dict() | {"intensity": _finite(lv.intensity(self.flops))} for lv in self.levels
        ]
        d["binding"] = self.binding.name if self.binding else None
        d["explanation"] = self.explanation
        d["device"] = self.device.name
        d["ceilings"] = self.device.ceilings_source
        return d

    def __str__(self) -> str:
        bm, bn, bk = self.block_tile
        tm, tn = self.thread_tile
        mp, np_, kp = self.padded_shape
        dev = self.device
        s = _ITEMSIZE.get(self.dtype, tc.ITEMSIZE.get(self.dtype, 4))
        lines = [
            f"{self.kernel} kernel on {dev.name} ({self.backend}), {self.dtype}: "
            f"C[{self.m}x{self.n}] = A[{self.m}x{self.k}] @ B[{self.k}x{self.n}]",
        ]
        if self.kernel == "mma":
            lines.append(_mma_words(self))
        elif self.kernel == "naive":
            lines.append(
                f"  each of {self.threads_per_block} threads per {bm}x{bn} block computes one "
                f"output from a row of A and a column of B read from global memory"
            )
        else:
            what = "one output" if (tm, tn) == (1, 1) else f"a {tm}x{tn} micro-tile in registers"
            lines.append(
                f"  block tile {bm}x{bn}x{bk}: the block stages A {bm}x{bk} and B {bk}x{bn} "
                f"tiles in shared memory ({_kib(self.shared_bytes)} per block); each of "
                f"{self.threads_per_block} threads computes {what}"
            )
        lines.append(
            f"  grid {self.grid[0]} x {self.grid[1]} = {self.grid[0] * self.grid[1]} blocks; "
            f"padded shape {mp}x{np_}x{kp}: {self.padding_waste:.1%} of executed FLOPs are "
            f"padding (edge tiles zero-filled)"
        )
        lines.append(
            f"  arithmetic intensity {self.intensity:.3g} FLOP/B "
            f"({self.flops / 1e9:.3g} GFLOP over {self.global_bytes / 1e6:.4g} MB of global "
            f"traffic, {s}-byte elements; caches and C writes not counted)"
        )
        if dev.is_gpu:
            lines.append(
                f"  occupancy: {self.occupancy} on {dev.compute_units} units; "
                f"~{self.registers_per_thread} registers per thread"
            )
        else:
            lines.append(
                f"  blocks run one per core: {self.occupancy.waves} wave(s) over "
                f"{dev.compute_units} cores at {self.occupancy.wave_efficiency:.0%} balance"
            )
        peak, bw = dev.peak(self.dtype), dev.bandwidth
        if self.levels and len(self.levels) > 2:
            lines.append("  levels (bytes crossing each, its intensity, time at its ceiling):")
            for lv in self.levels:
                lines.append("    " + _level_line(lv, self.flops))
            lines.append(f"  {self.explanation}; predicted {_time(self.predicted_seconds)}")
        else:
            lines.append(
                f"  roofline: {peak / 1e12:.3g} TFLOP/s peak, {bw / 1e9:.4g} GB/s, ridge at "
                f"{peak / bw:.3g} FLOP/B -> {self.bound}-bound; "
                f"predicted {_time(self.predicted_seconds)}"
                f" ({self.predicted_gflops:.4g} GFLOP/s)"
            )
        lines.append(f"  ceilings: {dev.ceilings_source}; tiles: {self.geometry_source}")
        return "\n".join(lines)

    @property
    def explanation(self) -> str:
        """The binding level in words: what each FMA costs there and the rate it allows."""
        lv = self.binding
        if lv is None:
            return f"{self.bound}-bound"
        rate = self.flops / lv.seconds / 1e12 if lv.seconds else math.inf
        why = f" ({lv.note})" if lv.note else ""
        return f"{self.kernel}: bound by {lv.name}{why} at {rate:.3g} TFLOP/s"


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _level_line(lv: Level, flops: int) -> str:
    if lv.unit == "B":
        ai = lv.intensity(flops)
        what = f"{lv.amount / 1e9:.4g} GB, {ai:.3g} FLOP/B" if math.isfinite(ai) else "0 B"
    else:
        what = f"{lv.amount:.4g} {lv.unit}"
    ceiling = f" at {lv.ceiling / 1e12:.3g} T{lv.unit}/s" if lv.ceiling else ""
    note = f" [{lv.note}]" if lv.note else ""
    return f"{lv.name:<14} {what}{ceiling} -> {_time(lv.seconds)}{note}"


def _kib(n: int) -> str:
    return f"{n / 1024:.1f} KiB"


def _time(t: float) -> str:
    if t >= 1:
        return f"{t:.3g} s"
    if t >= 1e-3:
        return f"{t * 1e3:.3g} ms"
    return f"{t * 1e6:.3g} us"


# --------------------------------------------------------------------------- geometry


def default_geometry(kernel: str, dtype: str, device: DeviceSpec) -> Geometry:
    """Textbook tiles for a device class; backends override with tuned ones."""
    if kernel == "mma":
        return default_mma_geometry(dtype, device)
    s = _ITEMSIZE.get(dtype, 4)
    if kernel == "naive":
        return Geometry((16, 16, 1), (1, 1))
    if device.is_gpu:
        if kernel == "tiled":
            return Geometry((16, 16, 16), (1, 1))
        return Geometry((128, 128, 8), (8, 8)) if s <= 4 else Geometry((64, 64, 8), (4, 4))
    # CPU: the tiled family's square tile fits L1; the register family's block fits half of L2.
    l1, l2 = device.cache("L1") or 32768, device.cache("L2") or 1 << 20
    t = 8
    while 3 * (2 * t) ** 2 * s <= l1 and t < 64:
        t *= 2
    if kernel == "tiled":
        return Geometry((t, t, t), (1, 1))
    t = 32
    while 3 * (2 * t) ** 2 * s <= l2 // 2 and t < 512:
        t *= 2
    return Geometry((t, t, t), (8, 8))


def _estimate_registers(kernel: str, thread_tile: tuple[int, int], s: int) -> int:
    words = max(1, s // 4)
    tm, tn = thread_tile
    if kernel == "register":
        return (tm * tn + tm + tn) * words + 24
    return 24 + 8 * words


# --------------------------------------------------------------------------- planning


def make_plan(
    m: int,
    n: int,
    k: int,
    *,
    dtype: str,
    kernel: str,
    device: DeviceSpec,
    geometry: Geometry | None = None,
    backend: str = "",
) -> Plan:
    """Plan one (M, N, K) product for a kernel family on a device. Pure: no device access."""
    for label, v in (("m", m), ("n", n), ("k", k)):
        if not isinstance(v, int) or v < 0:
            raise PlanError(f"{label} must be a non-negative integer, got {v!r}")
    if kernel not in KERNEL_FAMILIES:
        raise PlanError(f"unknown kernel {kernel!r}; choose one of {', '.join(KERNEL_FAMILIES)}")
    if kernel == "mma":
        return _plan_mma(m, n, k, dtype, device, geometry, backend)
    if dtype not in _ITEMSIZE:
        raise PlanError(f"the planner models float16/float32/float64, not {dtype!r}")
    s = _ITEMSIZE[dtype]
    geo = geometry or default_geometry(kernel, dtype, device)
    bm, bn, bk = (int(x) for x in geo.block_tile)
    tm, tn = (int(x) for x in geo.thread_tile)
    if min(bm, bn, bk, tm, tn) < 1:
        raise PlanError(
            f"tile sizes must be positive, got block {geo.block_tile} thread {geo.thread_tile}"
        )
    if kernel == "naive":
        bk, tm, tn = 1, 1, 1
    elif kernel == "tiled" and (tm, tn) != (1, 1):
        raise PlanError(
            "the tiled family computes one output per thread: thread_tile must be (1, 1)"
        )
    if bm % tm or bn % tn:
        raise PlanError(
            f"block tile {bm}x{bn} is not a multiple of thread tile {tm}x{tn}; "
            f"choose BM divisible by TM and BN divisible by TN"
        )
    threads = (bm // tm) * (bn // tn)
    if threads > device.max_threads_per_block:
        raise PlanError(
            f"{bm}x{bn} block with {tm}x{tn} per thread needs {threads} threads per block, but "
            f"{device.name} allows {device.max_threads_per_block}; use a smaller block_tile or "
            f"a larger thread_tile"
        )
    opts = dict(geo.options)
    stages = int(opts.get("stages", 1))
    shared = 0 if kernel == "naive" else (bm * bk + bk * bn) * s * stages
    if shared > device.max_shared_per_block:
        where = "shared memory" if device.is_gpu else "the per-core cache (L2)"
        raise PlanError(
            f"block tile {bm}x{bn}x{bk} ({dtype}) needs {_kib(shared)} of {where} per block, "
            f"but {device.name} has {_kib(device.max_shared_per_block)}; use a smaller block_tile"
        )
    regs = geo.registers or _estimate_registers(kernel, (tm, tn), s)
    if device.is_gpu and regs > device.max_registers_per_thread:
        raise PlanError(
            f"a {tm}x{tn} {dtype} micro-tile needs about {regs} registers per thread, over the "
            f"limit of {device.max_registers_per_thread}; use a smaller thread_tile"
        )

    gx, gy = math.ceil(n / bn) if n else 0, math.ceil(m / bm) if m else 0
    mp, np_ = gy * bm, gx * bn
    kp = k if kernel == "naive" else math.ceil(k / bk) * bk
    flops = 2 * m * n * k
    executed = 2 * mp * np_ * kp
    waste = 1 - flops / executed if executed else 0.0
    if kernel == "naive":
        global_bytes = 2 * m * n * k * s
    else:
        global_bytes = (s * kp * (bm + bn) * mp * np_) // (bm * bn) if bm * bn else 0
    intensity = flops / global_bytes if global_bytes else 0.0

    occ = _occupancy(device, kernel, threads, shared, regs, gx * gy)
    warps = math.ceil(threads / max(1, device.warp_size))
    geo_d = dict(m=m, n=n, k=k, mp=mp, np=np_, kp=kp, bm=bm, bn=bn, bk=bk, tm=tm, tn=tn,
                 gx=gx, gy=gy, threads=threads, warps=warps)  # fmt: skip
    levels: tuple[Level, ...] = ()
    if device.levels and flops:
        engine = engine_of(backend, opts)
        if device.is_gpu:
            found = gpu_levels(kernel, geo_d, s, device, engine, opts, occ.blocks_per_unit, dtype)
        else:
            found = cpu_levels(kernel, geo_d, s, device, engine, opts, dtype)
        levels = tuple(found)
    if levels:
        top = max(levels, key=lambda lv: lv.seconds)
        bound = top.name
        predicted = device.launch_overhead + top.seconds
    else:  # the single DRAM roofline for devices that do not describe their levels
        peak = device.peak(dtype) * occ.wave_efficiency
        t_compute = executed / peak if peak else 0.0
        t_memory = global_bytes / device.bandwidth if device.bandwidth else 0.0
        bound = "memory" if t_memory > t_compute else "compute"
        predicted = device.launch_overhead + max(t_compute, t_memory)
        levels = (
            Level("compute", executed, peak, t_compute, "", "FLOP"),
            Level("DRAM", global_bytes, device.bandwidth, t_memory, "tiling formula"),
        )
    return Plan(
        backend=backend,
        kernel=kernel,
        dtype=dtype,
        m=m,
        n=n,
        k=k,
        block_tile=(bm, bn, bk),
        thread_tile=(tm, tn),
        threads_per_block=threads,
        grid=(gx, gy),
        padded_shape=(mp, np_, kp),
        padding_waste=waste,
        flops=flops,
        global_bytes=global_bytes,
        intensity=intensity,
        shared_bytes=shared,
        registers_per_thread=regs,
        bound=bound,
        predicted_seconds=predicted,
        occupancy=occ,
        device=device,
        options=opts,
        geometry_source=geo.source,
        levels=levels,
    )


def _mma_words(p: Plan) -> str:
    bm, bn, bk = p.block_tile
    wm, wn = p.thread_tile
    o = p.options
    frag = (int(o.get("fm", 16)), int(o.get("fn", 8)), int(o.get("fk", 8)))
    k = tc.kind(p.dtype, o.get("precision")) or "?"
    warps = p.threads_per_block // 32
    return (
        f"  block tile {bm}x{bn}x{bk} on tensor cores: {o.get('stages', 3)} cp.async stages of A "
        f"{bm}x{bk} and B {bk}x{bn} in shared memory ({_kib(p.shared_bytes)} per block, rows "
        f"padded against bank conflicts); each of {warps} warps computes a {wm}x{wn} warp tile "
        f"as {wm // frag[0]}x{wn // frag[1]} fragments of {tc.describe(k, frag)}"
    )


def default_mma_geometry(dtype: str, device: DeviceSpec, precision: str | None = None,
                         small: bool = False, fit: bool = True) -> Geometry:  # fmt: skip
    """Tiles of the mma family before tuning (the H200 screen of benches/mma.py): f64 128x128x16
    with 8 warps of 32x64, 16-bit 128x256x32 with 8 warps of 64x64, TF32 128x256x32 with 8 warps
    of 64x64 (0.37 of cuBLAS TF32 against 0.32 for 128x128x32 with 64x32 warps); ``small``: a
    quarter of the block (f64 64x64 with 4 warps of 32x32, 16-bit 128x128, TF32 128x64) for
    products with too few large blocks to fill the device. ``fit``: the planner
    plans both and keeps the one it predicts faster (option ``fit``; gone from the plan)."""
    k = tc.kind(dtype, precision) or "f64"
    fm, fn, fk = tc.default_fragment(k, tc.compute_capability(device))
    opts: dict[str, Any] = {"fm": fm, "fn": fn, "fk": fk, "stages": 3, "group_m": 8}
    if precision:
        opts["precision"] = precision
    if k == "f64":
        bt, wt = ((64, 64, 16), (32, 32)) if small else ((128, 128, 16), (32, 64))
    elif k in ("f16", "bf16"):
        bt, wt = ((128, 128, 32), (64, 64)) if small else ((128, 256, 32), (64, 64))
    else:
        bt, wt = ((128, 64, 16), (64, 32)) if small else ((128, 256, 32), (64, 64))
    if small and k == "f64":  # 128 registers: three blocks of 4 warps per SM (57 KB each)
        opts.update(stages=3, min_blocks=3)
    elif small:
        opts["stages"] = 4
    if fit:
        opts["fit"] = 1
    return Geometry(bt, wt, tuple(sorted(opts.items())), source=f"mma default for {k}")


def _plan_mma(m: int, n: int, k: int, dtype: str, device: DeviceSpec, geo: Geometry | None,
              backend: str) -> Plan:  # fmt: skip
    """An mma plan: ``thread_tile`` is the warp tile (WM, WN); options carry the fragment
    (fm, fn, fk), stages, group_m and precision ("tf32" lets float32 in)."""
    precision = dict(geo.options).get("precision") if geo else None
    why = tc.supported(device, dtype, precision)
    if why:
        raise PlanError(why)
    geo = geo or default_mma_geometry(dtype, device, precision)
    big = default_mma_geometry(dtype, device, precision)
    fit = dict(geo.options).get("fit")
    if fit and (geo.block_tile, geo.thread_tile) != (big.block_tile, big.thread_tile):
        opts = tuple((key, v) for key, v in geo.options if key != "fit")  # tiles were requested
        geo, fit = replace(geo, options=opts), None
    if fit:  # the model default: the faster of the two default sizes
        plans = []
        for small in (False, True):
            g = default_mma_geometry(dtype, device, precision, small=small, fit=False)
            try:
                plans.append(_plan_mma(m, n, k, dtype, device, replace(g, source=geo.source),
                                       backend))  # fmt: skip
            except PlanError:
                continue
        if plans:
            return min(plans, key=lambda p: p.predicted_seconds)
        raise PlanError(f"no default mma tiles fit {device.name}")
    opts = dict(geo.options)
    kind = tc.kind(dtype, precision) or ""
    d_frag = tc.default_fragment(kind, tc.compute_capability(device))
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
    if shared > tc.optin_shared(device):
        raise PlanError(f"{stages} stages of {bm}x{bn}x{bk} need {_kib(shared)} of shared memory, "
                        f"over the {_kib(tc.optin_shared(device))} a block may opt into on "
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
    occ = _occupancy(device, "mma", threads, shared, regs, gx * gy)
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
        predicted_seconds=device.launch_overhead + (top.seconds if top else 0.0),
        occupancy=occ, device=device, options=opts, geometry_source=geo.source, levels=levels,
    )  # fmt: skip


def _occupancy(
    device: DeviceSpec, kernel: str, threads: int, shared: int, regs: int, blocks: int
) -> Occupancy:
    if not device.is_gpu:
        per_wave = max(1, device.compute_units)
        waves = max(1, math.ceil(blocks / per_wave))
        return Occupancy(
            1, "one block per core", threads, 1.0, waves, _eff(blocks, waves, per_wave)
        )
    warp = max(1, device.warp_size)
    warps = math.ceil(threads / warp)
    regs_alloc = math.ceil(regs / 8) * 8  # registers are allocated per warp in chunks
    limits = {
        "threads": device.max_threads_per_unit // (warps * warp),
        "shared memory": device.shared_per_unit // shared if shared else 1 << 30,
        "registers": device.registers_per_unit // (regs_alloc * warps * warp),
        "block slots": device.max_blocks_per_unit,
    }
    limiter = min(limits, key=lambda key: limits[key])
    per_unit = limits[limiter]
    if per_unit < 1:
        raise PlanError(
            f"one block ({threads} threads, {_kib(shared)} shared, ~{regs} registers/thread) "
            f"does not fit on a compute unit of {device.name} ({limiter}); use smaller tiles"
        )
    per_wave = per_unit * device.compute_units
    waves = max(1, math.ceil(blocks / per_wave))
    resident = per_unit * warps * warp
    return Occupancy(
        per_unit,
        limiter,
        resident,
        min(1.0, resident / device.max_threads_per_unit),
        waves,
        _eff(blocks, waves, per_wave),
    )


def _eff(blocks: int, waves: int, per_wave: int) -> float:
    return blocks / (waves * per_wave) if blocks else 1.0
