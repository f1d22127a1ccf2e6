"""The host CPU as a :class:`~tiledmm.device.spec.DeviceSpec`: its model name, cores, caches
and SIMD width read from /proc and /sys, estimated ceilings until ``tiledmm calibrate`` has
measured them.
"""

from __future__ import annotations

import os
import platform
import re
from functools import cache
from pathlib import Path

from .spec import DeviceSpec

__all__ = ["host_cpu", "cpu_cores", "cpu_model", "cpu_levels", "CPU_DRAM_LATENCY"]


def cpu_model() -> str:
    """The host CPU's model name (/proc/cpuinfo, else the platform's processor)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def _cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _cpu_mhz() -> float:
    try:
        text = Path("/proc/cpuinfo").read_text()
        m = re.search(r"cpu MHz\s*:\s*([\d.]+)", text)
        if m:
            return float(m.group(1))
    except OSError:
        pass
    return 2500.0


def _size(text: str) -> int:
    text = text.strip().upper()
    unit = {"K": 1024, "M": 1024**2, "G": 1024**3}.get(text[-1:], 1)
    return int(text.rstrip("KMG") or 0) * unit


def _cpu_caches() -> tuple[tuple[str, int], ...]:
    out: dict[str, int] = {}
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    for index in sorted(base.glob("index*")):
        try:
            kind = (index / "type").read_text().strip()
            if kind == "Instruction":
                continue
            out[f"L{(index / 'level').read_text().strip()}"] = _size((index / "size").read_text())
        except (OSError, ValueError):
            continue
    out.setdefault("L1", 32 * 1024)
    out.setdefault("L2", 1024 * 1024)
    return tuple(sorted(out.items()))


def cpu_cores() -> int:
    """CPU cores this process may run on (its affinity mask)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


@cache
def _host_cpu_estimate() -> DeviceSpec:
    flags = _cpu_flags()
    lanes32 = 16 if "avx512f" in flags else 8 if "avx2" in flags else 4
    cores, ghz = cpu_cores(), _cpu_mhz() / 1000
    peak32 = cores * ghz * 1e9 * lanes32 * 2 * 2  # two FMA pipes, 2 FLOPs per FMA
    caches = _cpu_caches()
    levels, issue = cpu_levels(cores, ghz * 1e9, 4 * lanes32, 10e9 * cores)
    return DeviceSpec(
        name=cpu_model(),
        kind="cpu",
        vendor="",
        compute_units=cores,
        warp_size=1,
        max_threads_per_block=4096,
        max_threads_per_unit=4096,
        max_blocks_per_unit=1,
        max_shared_per_block=dict(caches).get("L2", 1 << 20),
        shared_per_unit=dict(caches).get("L2", 1 << 20),
        registers_per_unit=32 * lanes32,  # vector registers x lanes, for the micro-tile check
        max_registers_per_thread=32 * lanes32,
        simd_bytes=4 * lanes32,
        caches=caches,
        peak_flops=(("float32", peak32), ("float64", peak32 / 2)),
        bandwidth=10e9 * cores,
        launch_overhead=2e-6,
        levels=levels,
        fma_peaks=(("float32", peak32), ("float64", peak32 / 2)),
        issue_rate=issue,
        latency=CPU_DRAM_LATENCY,
        ceilings_source=(
            f"estimate from {cores} cores x {ghz:.2f} GHz x {lanes32} fp32 lanes x 2 FMA pipes; "
            "run `tiledmm calibrate` to measure"
        ),
        extra=(("simd", "avx512" if lanes32 == 16 else "avx2" if lanes32 == 8 else "sse"),),
    )


def host_cpu() -> DeviceSpec:
    """The host CPU, with measured ceilings when `tiledmm calibrate` has run."""
    return _host_cpu_estimate().with_calibration()


#: A typical DDR4/DDR5 load-to-use latency behind a missed hardware prefetch (docs/model.md).
CPU_DRAM_LATENCY = 90e-9


def cpu_levels(
    cores: int, clock_hz: float, simd_bytes: int, dram: float
) -> tuple[tuple[tuple[str, float], ...], float]:
    """Estimated CPU level ceilings (bytes/s, all cores) and instruction rate: two SIMD loads
    per clock from L1, 32 bytes per clock from L2 and from L3 (Zen's L2-to-L1 width; the 2-core
    Xeon's calibrated L2 copy gives 30.5 B per clock per core), ``dram`` measured or guessed;
    4 instructions per clock per core."""
    c = cores * clock_hz
    levels = (("L1", 2 * simd_bytes * c), ("L2", 32 * c), ("L3", 32 * c), ("DRAM", dram))
    return levels, 4 * c
