"""The DeviceSpec of an OpenCL device: PoCL's CPU device is the host (its caches and ceilings),
an NVIDIA GPU gets the CUDA backends' description (``tiledmm.device.nvidia``) from what
OpenCL reports, other GPUs an estimate that ``tiledmm calibrate`` replaces."""

from __future__ import annotations

from dataclasses import replace
from functools import cache

from tiledmm import DeviceSpec, host_cpu
from tiledmm.device import nvidia

__all__ = ["device_spec"]


def device_spec(dev) -> DeviceSpec:
    """The description of OpenCL device ``dev`` (a ``pyopencl.Device``), with the calibration
    cache as it is now (ceilings and this backend's measured host cost)."""
    facts = _facts(dev)
    if facts is not None:  # PoCL's CPU device is this host: reuse its caches and ceilings
        h = host_cpu()
        name, cu, wg, simd, via = facts
        return replace(h, name=name, compute_units=cu, max_threads_per_block=wg,
                       max_threads_per_unit=wg, simd_bytes=simd, extra=h.extra + via)  # fmt: skip
    return _gpu_estimate(dev).with_calibration()


@cache
def _facts(dev) -> tuple | None:
    """What a CPU device reports (name, units, group size, vector bytes, platform); None on a
    GPU. Read once per device."""
    import pyopencl as cl

    if dev.type & cl.device_type.GPU:
        return None
    via = (("opencl", f"{dev.platform.name} / {dev.version}"),)
    simd = 4 * max(1, dev.native_vector_width_float)
    return dev.name.strip(), dev.max_compute_units, dev.max_work_group_size, simd, via


@cache
def _gpu_estimate(dev) -> DeviceSpec:
    """A GPU's description, estimated (once per device)."""
    name = dev.name.strip()
    cu, wg, lmem = dev.max_compute_units, dev.max_work_group_size, dev.local_mem_size
    via = (("opencl", f"{dev.platform.name} / {dev.version}"),)
    clock_khz = dev.max_clock_frequency * 1e3
    if "NVIDIA" in dev.vendor.upper():  # the CUDA backends' description, as OpenCL reports it
        cc = _nv_compute_capability(dev)
        a = dict(sms=cu, clock_khz=clock_khz, bandwidth=3e12, threads_per_block=wg,
                 shared_optin=lmem, l2=dev.global_mem_cache_size)  # fmt: skip
        return nvidia.device_spec(name, cc, a, launch_overhead=8e-6, extra=via)
    peak32 = cu * 64 * 2 * clock_khz * 1e3  # 64 FP32 lanes per compute unit: a guess
    return DeviceSpec(
        name=name,
        kind="gpu",
        vendor=dev.vendor,
        compute_units=cu,
        warp_size=64,
        max_threads_per_block=wg,
        max_threads_per_unit=2048,
        max_shared_per_block=lmem,
        shared_per_unit=lmem,
        caches=(("L2", dev.global_mem_cache_size),),
        peak_flops=(("float32", peak32), ("float64", peak32 / 16)),
        bandwidth=5e11,
        launch_overhead=8e-6,
        ceilings_source=(
            f"estimate from {cu} units x 64 lanes x {clock_khz / 1e6:.2f} GHz; bandwidth a "
            "guess (OpenCL does not report it); run `tiledmm calibrate` to measure"
        ),
        extra=via,
    )


def _nv_compute_capability(dev) -> tuple[int, int]:
    """From ``cl_nv_device_attribute_query``; (9, 0) (the H200's) where it is missing."""
    try:
        return int(dev.compute_capability_major_nv), int(dev.compute_capability_minor_nv)
    except Exception:  # noqa: BLE001 - extension absent or unknown to this pyopencl
        return (9, 0)
