"""The DeviceSpec of the Numba CUDA backend's device: the CUDA simulator's stand-in, or a real
GPU's description (``tiledmm.device.nvidia``) from numba.cuda's device attributes.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from tiledmm import DeviceSpec
from tiledmm.device import nvidia

__all__ = ["SIM_NAME", "current_spec", "device_spec_from"]

SIM_NAME = "CUDA simulator"


@cache
def current_spec() -> DeviceSpec:
    """The device the backend runs on: the simulator's stand-in, or the current CUDA GPU
    (once per process)."""
    from . import engine as nb

    if nb.SIMULATOR:
        return DeviceSpec(
            name=SIM_NAME, kind="gpu", vendor="NVIDIA (simulated)", compute_units=1,
            warp_size=32, max_shared_per_block=48 * 1024, shared_per_unit=48 * 1024,
            peak_flops=(("float32", 1e6), ("float64", 1e6)), bandwidth=1e6,
            launch_overhead=1e-3, ceilings_source="estimate: the simulator runs on the host",
        )  # fmt: skip
    return device_spec_from(nb.cuda.get_current_device())


# numba.cuda device attribute (CU_DEVICE_ATTRIBUTE_* without the prefix) for each of
# nvidia.device_spec's keys
_ATTRS = dict(
    sms="MULTIPROCESSOR_COUNT", clock_khz="CLOCK_RATE", mem_clock_khz="MEMORY_CLOCK_RATE",
    bus_bits="GLOBAL_MEMORY_BUS_WIDTH", warp="WARP_SIZE", threads_per_block="MAX_THREADS_PER_BLOCK",
    threads_per_sm="MAX_THREADS_PER_MULTIPROCESSOR", blocks_per_sm="MAX_BLOCKS_PER_MULTIPROCESSOR",
    shared_optin="MAX_SHARED_MEMORY_PER_BLOCK_OPTIN",
    shared_per_sm="MAX_SHARED_MEMORY_PER_MULTIPROCESSOR",
    regs_per_sm="MAX_REGISTERS_PER_MULTIPROCESSOR", l2="L2_CACHE_SIZE",
)  # fmt: skip


def device_spec_from(dev: Any) -> DeviceSpec:
    """A DeviceSpec from a numba.cuda device's attributes (missing ones take defaults)."""
    name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
    a = {}
    for key, attr in _ATTRS.items():
        try:
            a[key] = int(getattr(dev, attr))
        except (AttributeError, TypeError, ValueError):  # unknown to this driver/binding
            pass
    a.setdefault("sms", 1)
    a.setdefault("clock_khz", 1000000)
    a.setdefault("mem_clock_khz", 1000000)
    a.setdefault("bus_bits", 256)
    cc = tuple(dev.compute_capability)
    return nvidia.device_spec(name, cc, a, launch_overhead=27e-6)
