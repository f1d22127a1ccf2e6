"""The tensor-core model for the ``mma`` family: which inputs run on them, the shared-memory
layout of the kernel, the peak per compute capability and dtype, and the levels of an mma plan.

Pure Python, imports only :mod:`tiledmm.device` (``spec``, and ``nvidia`` for the NVIDIA
hardware facts: tensor-core FLOP per clock per SM, FP32 lanes, fragment shapes and the compute
capability each needs, mma.sync's reach, the compute capability and opt-in shared memory of a
device), :mod:`tiledmm.model.dram` and ``Level``. The tensor-core rates become FLOP/s through
the device's own FP32 FMA peak (SMs x FP32 lanes x 2 x clock), so the clock comes from the same
place as every other GPU estimate. A measured ceiling for the dtype (``tiledmm calibrate``
times the vendor GEMM, which runs on the tensor cores) replaces the estimate. ``mma.sync``
(warp-level, what ``backends/kernels/mma.cl`` issues) does not reach Hopper's 16-bit peak,
which needs the asynchronous warpgroup ``wgmma``: ``tiledmm.device.nvidia.MMA_SYNC_FRACTION``.
"""

from __future__ import annotations

from ..device.nvidia import (
    FRAGMENTS,
    MMA_SYNC_FRACTION,
    compute_capability,
    lanes,
    tensor_flop_per_clock,
)
from ..device.spec import DeviceSpec
from .dram import dram_traffic
from .levels import Level

__all__ = [
    "INPUTS", "ITEMSIZE", "kind", "supported", "roof", "peak", "padded_lds", "accumulator_bytes",
    "describe", "default_fragment", "mma_levels", "WARPS_FULL",
]  # fmt: skip

#: input dtype -> (kind, accumulate dtype, result dtype)
INPUTS = {
    "float64": ("f64", "float64", "float64"),
    "float16": ("f16", "float32", "float16"),
    "bfloat16": ("bf16", "float32", "bfloat16"),
    "float32": ("tf32", "float32", "float32"),  # only with precision="tf32"
}
ITEMSIZE = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2}


def kind(dtype: str, precision: str | None = None) -> str | None:
    """The tensor-core kind of ``dtype`` inputs; float32 only with ``precision="tf32"``."""
    if dtype == "float32":
        return "tf32" if precision == "tf32" else None
    return INPUTS.get(dtype, (None,))[0]


def supported(device: DeviceSpec, dtype: str, precision: str | None = None,
              fragment: tuple[int, int, int] | None = None) -> str | None:  # fmt: skip
    """None when the mma family can run ``dtype`` on ``device``, else why not (a sentence)."""
    k = kind(dtype, precision)
    if k is None:
        if dtype == "float32":
            return ("float32 runs on tensor cores only when asked for TF32 (precision='tf32'); "
                    "IEEE float32 stays on the FMA pipes (kernel='register')")  # fmt: skip
        return f"no tensor-core path for {dtype} (float64, float16, bfloat16, float32 as TF32)"
    cc = compute_capability(device)
    if cc is None:
        return f"{device.name} has no NVIDIA tensor cores known to tiledmm"
    if cc < (8, 0):
        return f"the mma kernels need compute capability 8.0+ (cp.async), {device.name} is {cc}"
    if fragment is not None:
        need = FRAGMENTS[k].get(tuple(fragment))
        if need is None:
            shapes = ", ".join("x".join(map(str, f)) for f in FRAGMENTS[k])
            return f"{k} mma.sync has no {'x'.join(map(str, fragment))} shape (has {shapes})"
        if cc < need:
            return f"the {'x'.join(map(str, fragment))} {k} shape needs sm_{need[0]}{need[1]}"
    return None


def roof(device: DeviceSpec, dtype: str, precision: str | None = None) -> tuple[float, str]:
    """(FLOP/s, where it comes from): the tensor cores' ceiling for ``dtype`` inputs, the roof
    a result is held to. Measured when the device's ceilings are (``tiledmm calibrate`` times
    the vendor GEMM per dtype; bfloat16, which CuPy cannot time, at the measured float16 rate:
    both run at one rate per clock, ``tiledmm.device.nvidia.FLOP_PER_CLOCK``), else
    :func:`_sheet`."""
    k = kind(dtype, precision) or ""
    keys = ("tf32",) if k == "tf32" else (dtype, "float16") if k == "bf16" else (dtype,)
    table = dict(device.peak_flops) if device.ceilings_measured else {}
    for key in keys:
        if key in table:
            return table[key], f"measured {key} ({device.ceilings_source})"
    return _sheet(device, k)


def peak(device: DeviceSpec, dtype: str, precision: str | None = None) -> tuple[float, str]:
    """(FLOP/s, where it comes from) that ``mma.sync`` kernels can reach for ``dtype``: the
    :func:`roof`, except where warp-level mma.sync cannot issue at the full rate
    (``MMA_SYNC_FRACTION``: Hopper's 16-bit and TF32 peaks need ``wgmma``), there the
    whitepaper figure times that share, and no more than the roof."""
    value, src = roof(device, dtype, precision)
    k = kind(dtype, precision) or ""
    frac = MMA_SYNC_FRACTION.get(compute_capability(device) or (0, 0), {}).get(k, 1.0)
    if frac >= 1:
        return value, src
    sheet, sheet_src = _sheet(device, k)
    if sheet * frac < value:
        return sheet * frac, f"{sheet_src} x {frac:g} reachable by mma.sync"
    return value, src


def _sheet(device: DeviceSpec, k: str) -> tuple[float, str]:
    """The whitepaper's dense rate for kind ``k``, scaled by the device's FP32 FMA peak (same
    clock)."""
    cc = compute_capability(device) or (0, 0)
    per_clock = tensor_flop_per_clock(cc).get(k, 0)
    fp32_per_clock = 2 * lanes(cc)[0]  # FLOP per clock per SM of the FP32 FMA pipes
    value = device.fma_peak("float32") * per_clock / fp32_per_clock
    return value, f"estimate: {per_clock} FLOP/clock/SM on sm_{cc[0]}{cc[1]}"


def _pad_to(x: int, residue: int, modulus: int) -> int:
    """The smallest value >= x that is ``residue`` mod ``modulus``."""
    return x + (residue - x) % modulus


def padded_lds(k: str, bk: int, bn: int, fk: int, bvec: bool = False) -> tuple[int, int]:
    """Padded row lengths (elements) of the A (BM x BK) and B (BK x BN) stage tiles of
    ``mma.cl``, chosen so its fragment loads hit distinct banks (and rows stay 16-byte aligned):
    f64: 8-byte (g, t + 4q) / (t + 4q, g) loads in half-warp phases -> both 4 mod 16 doubles;
    f16/bf16: ldmatrix rows of 16 bytes -> an odd number of 16-byte chunks per row;
    tf32: 4-byte (g, t) / (t, g) loads, one wavefront per warp -> 4 and 8 mod 32 floats;
    ``bvec`` (TF32_BVEC): B rows unpadded, their 16-byte chunks XOR-swizzled instead. The one
    rule: the planner's shared-memory size and the kernel's defines
    (``tiledmm_backends.kernels.mma_spec``) both use it."""
    if k == "f64":
        return _pad_to(bk, 4, 16), _pad_to(bn, 4, 16)
    if k in ("f16", "bf16"):
        return _pad_to(bk, 8, 16), _pad_to(bn, 8, 16)
    return _pad_to(bk, 4, 32), bn if bvec else _pad_to(bn, 8, 32)


def accumulator_bytes(k: str) -> int:
    return 8 if k == "f64" else 4


def describe(k: str, fragment: tuple[int, int, int]) -> str:
    """The warp instruction in words."""
    fm, fn, fk = fragment
    what = {"f64": "DMMA f64 x f64 -> f64", "f16": "HMMA f16 x f16 -> f32",
            "bf16": "HMMA bf16 x bf16 -> f32", "tf32": "HMMA tf32 x tf32 -> f32 (inputs "
            "rounded to 10-bit mantissas)"}[k]  # fmt: skip
    return f"mma.sync {fm}x{fn}x{fk} ({what})"


def default_fragment(k: str, cc: tuple[int, int] | None) -> tuple[int, int, int]:
    """The fragment the kernel uses by default: f64 16x8x8 on sm_90 (8x8x4 before)."""
    if k == "f64":
        return (16, 8, 8) if cc and cc >= (9, 0) else (8, 8, 4)
    return (16, 8, 16) if k in ("f16", "bf16") else (16, 8, 8)


#: warps per SM that keep its tensor pipes busy: one per scheduler, each with many independent
#: MMAs in flight and its loads behind a cp.async pipeline (fewer: that share of the SM's rate)
WARPS_FULL = 4


def mma_levels(g: dict, k: str, s: int, out_s: int, device: DeviceSpec, precision: str | None,
               dtype: str, blocks_per_unit: int) -> list[Level]:  # fmt: skip
    """The levels of an mma plan: tensor cores (the busiest SM's blocks, ``blocks_per_unit`` at a
    time, at its share of the tensor peak, less when fewer than WARPS_FULL warps are resident),
    shared memory (stage writes plus each warp's fragment reads: K x (WM + WN) elements per warp
    tile), L2 (the block-tile formula) and DRAM (``tiledmm.model.dram``: panels re-read as the
    launch
    order evicts them). ``g`` needs m n k mp np kp bm bn gx gy wm wn warps fragment
    global_bytes resident (blocks at a time) group (group_m)."""
    mp, np_, kp = g["mp"], g["np"], g["kp"]
    flops = 2 * mp * np_ * kp
    rate, src = peak(device, dtype, precision)
    sms, blocks = max(1, device.compute_units), g["gx"] * g["gy"]
    on_sm = -(-blocks // sms)
    together = max(1, min(on_sm, blocks_per_unit))
    busy = min(1.0, together * g["warps"] / WARPS_FULL)
    block_flops = 2 * g["bm"] * g["bn"] * kp
    t = (-(-on_sm // together)) * together * block_flops / (rate / sms * busy) if rate else 0.0
    note = f"{describe(k, g['fragment'])}; {src}; {on_sm} block(s) on the busiest SM"
    out = [Level("tensor cores", flops, flops / t if t else rate, t, note, "FLOP")]
    tile = g["global_bytes"]
    reads = mp * np_ * kp * s * (1 / g["wm"] + 1 / g["wn"])
    shared = device.level("shared memory")
    if shared:
        out.append(Level("shared memory", tile + reads, shared, (tile + reads) / shared,
                         "cp.async stage writes + fragment loads"))  # fmt: skip
    l2 = device.level("L2")
    if l2:
        out.append(Level("L2", tile, l2, tile / l2, "block-tile formula"))
    read, written = dram_traffic(g, s, device, g["resident"], g["group"])
    if device.bandwidth:
        out.append(Level("DRAM", read + written, device.bandwidth,
                         (read + written) / device.bandwidth,
                         f"block panels through the L2 in launch order (group_m {g['group']})",
                         parts=(("read", read), ("written", written))))  # fmt: skip
    return out
