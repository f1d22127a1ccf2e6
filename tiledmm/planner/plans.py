"""What a plan is: :class:`Plan` (everything decided before a launch, and its explanation in
words), :class:`Occupancy` and how it is computed, :class:`PlanError`. The planner
(:mod:`tiledmm.planner.make`) and the tensor-core planner (:mod:`tiledmm.planner.mma`) build
them."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from ..device.spec import DeviceSpec
from ..model import hopper as hm
from ..model import tensorcore as tc
from ..model.levels import Level

__all__ = ["Plan", "Occupancy", "PlanError", "ITEMSIZE", "occupancy", "kib"]

ITEMSIZE = {"float16": 2, "float32": 4, "float64": 8}


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
    #: every level's traffic and time (tiledmm.model.levels.Level), nearest the ALUs first
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
        d["host_cost"] = self.device.host_cost(self.backend)
        d["host_cost_source"] = self.device.host_cost_source(self.backend)
        return d

    def __str__(self) -> str:
        bm, bn, bk = self.block_tile
        tm, tn = self.thread_tile
        mp, np_, kp = self.padded_shape
        dev = self.device
        s = ITEMSIZE.get(self.dtype, tc.ITEMSIZE.get(self.dtype, 4))
        lines = [
            f"{self.kernel} kernel on {dev.name} ({self.backend}), {self.dtype}: "
            f"C[{self.m}x{self.n}] = A[{self.m}x{self.k}] @ B[{self.k}x{self.n}]",
        ]
        if self.kernel == "mma":
            lines.append(mma_words(self))
        elif self.kernel == "naive":
            lines.append(
                f"  each of {self.threads_per_block} threads per {bm}x{bn} block computes one "
                f"output from a row of A and a column of B read from global memory"
            )
        else:
            what = "one output" if (tm, tn) == (1, 1) else f"a {tm}x{tn} micro-tile in registers"
            lines.append(
                f"  block tile {bm}x{bn}x{bk}: the block stages A {bm}x{bk} and B {bk}x{bn} "
                f"tiles in shared memory ({kib(self.shared_bytes)} per block); each of "
                f"{self.threads_per_block} threads computes {what}"
            )
        what = "blocks"
        if int(self.options.get("hopper", 0)):  # a persistent grid walks the tiles
            what = (f"tiles, walked by {min(self.grid[0] * self.grid[1], dev.compute_units)} "
                    "persistent blocks (one per SM)")
        lines.append(
            f"  grid {self.grid[0]} x {self.grid[1]} = {self.grid[0] * self.grid[1]} {what}; "
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
        lines.append(f"  host cost per call {_time(dev.host_cost(self.backend))} "
                     f"({dev.host_cost_source(self.backend)}), in the prediction")
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


def kib(n: int) -> str:
    return f"{n / 1024:.1f} KiB"


def _time(t: float) -> str:
    if t >= 1:
        return f"{t:.3g} s"
    if t >= 1e-3:
        return f"{t * 1e3:.3g} ms"
    return f"{t * 1e6:.3g} us"


# --------------------------------------------------------------------------- geometry


def mma_words(p: Plan) -> str:
    bm, bn, bk = p.block_tile
    wm, wn = p.thread_tile
    o = p.options
    if int(o.get("hopper", 0)):  # the Hopper kernel (tiledmm.planner.hopper)
        cfg = {key[7:]: int(v) for key, v in o.items() if key.startswith("hopper_")}
        cfg["c_tma"] = p.n % 8 == 0 or p.m <= 1
        return hm.describe(cfg, ITEMSIZE.get(p.dtype, 2), p.shared_bytes, p.threads_per_block)
    frag = (int(o.get("fm", 16)), int(o.get("fn", 8)), int(o.get("fk", 8)))
    k = tc.kind(p.dtype, o.get("precision")) or "?"
    warps = p.threads_per_block // 32
    return (
        f"  block tile {bm}x{bn}x{bk} on tensor cores: {o.get('stages', 3)} cp.async stages of A "
        f"{bm}x{bk} and B {bk}x{bn} in shared memory ({kib(p.shared_bytes)} per block, rows "
        f"padded against bank conflicts); each of {warps} warps computes a {wm}x{wn} warp tile "
        f"as {wm // frag[0]}x{wn // frag[1]} fragments of {tc.describe(k, frag)}"
    )


#: Registers per thread of the naive kernels (one accumulator, two indices, the bounds):
#: ptxas (CUDA 13.0, sm_90) allocates 32 for the gemm-c naive kernel in float32 and float64
#: and 29-32 for Numba's (float64 / float32); the planner's per-dtype estimate (40 for
#: float64) would hold a float64 naive SM to 6 blocks of 256 threads instead of 8
#: (docs/model.md).
NAIVE_REGISTERS = 32


def occupancy(
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
    if kernel == "naive":  # what ptxas allocates, whatever the dtype (NAIVE_REGISTERS)
        regs = min(regs, NAIVE_REGISTERS)
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
            f"one block ({threads} threads, {kib(shared)} shared, ~{regs} registers/thread) "
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
