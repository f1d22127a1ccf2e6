"""The one description of NVIDIA GPUs that the CUDA and OpenCL backends share.

Every backend that reads an NVIDIA device (CuPy through the CUDA runtime, Numba through the
driver, OpenCL through ``cl_nv_device_attribute_query``) builds its :class:`DeviceSpec` here,
so the three agree on lanes per SM and on the peak-FLOP estimate. Every NVIDIA hardware fact
lives here (lanes, tensor-core rates, mma.sync fragment shapes and reach, opt-in shared memory,
the SM-side figures), and so do the readers of the facts a DeviceSpec carries in ``extra``
(:func:`compute_capability`, :func:`optin_shared`); the model reads them from here.
"""

from __future__ import annotations

from typing import Any

from .spec import DeviceSpec

__all__ = [
    "LANES",
    "lanes",
    "device_spec",
    "STATIC_SHARED",
    "MEMORY_BANDWIDTH",
    "known_bandwidth",
    "SCHEDULERS_PER_SM",
    "SHARED_BYTES_PER_CLOCK",
    "TRIP_CYCLES",
    "SUSTAINED_CLOCK",
    "FLOP_PER_CLOCK",
    "tensor_flop_per_clock",
    "FRAGMENTS",
    "MMA_SYNC_FRACTION",
    "OPTIN_SHARED_KIB",
    "compute_capability",
    "optin_shared",
    "H200_CC",
    "H200_MEASURED",
    "TENSOR_PEAKS",
    "reference_h200",
    "measured_from_record",
]

#: FP32 and FP64 FMA lanes per SM by compute capability (CUDA C Programming Guide, "Arithmetic
#: Instructions" throughput table). Datacenter parts have fast FP64; consumer parts 2 per SM.
LANES: dict[tuple[int, int], tuple[int, int]] = {
    (6, 0): (64, 32),  # P100
    (6, 1): (128, 4),  # Pascal consumer
    (7, 0): (64, 32),  # V100
    (7, 5): (64, 2),  # Turing (T4, RTX 20)
    (8, 0): (64, 32),  # A100
    (8, 6): (128, 2),  # Ampere consumer (RTX 30, A10, A40)
    (8, 9): (128, 2),  # Ada (RTX 40, L4, L40)
    (9, 0): (128, 64),  # H100, H200
    (10, 0): (128, 64),  # B200
    (12, 0): (128, 2),  # Blackwell consumer (RTX 50)
}
#: Dense tensor-core FLOP per clock per SM by compute capability and kind (NVIDIA's architecture
#: whitepapers, A100 and H100); a missing kind or part has no such path.
FLOP_PER_CLOCK: dict[tuple[int, int], dict[str, int]] = {
    (8, 0): {"f64": 128, "f16": 2048, "bf16": 2048, "tf32": 1024},  # A100
    (8, 6): {"f64": 4, "f16": 512, "bf16": 512, "tf32": 256},  # GA10x (f32 accumulate)
    (8, 9): {"f64": 4, "f16": 512, "bf16": 512, "tf32": 256},  # AD10x
    (9, 0): {"f64": 256, "f16": 4096, "bf16": 4096, "tf32": 2048},  # H100 / H200
}
#: mma.sync fragment shapes (M, N, K) per tensor-core kind and the compute capability each
#: needs (PTX ISA, "Matrix shape")
FRAGMENTS = {
    "f64": {(8, 8, 4): (8, 0), (16, 8, 4): (9, 0), (16, 8, 8): (9, 0), (16, 8, 16): (9, 0)},
    "f16": {(16, 8, 16): (8, 0)},
    "bf16": {(16, 8, 16): (8, 0)},
    "tf32": {(16, 8, 8): (8, 0)},
}
#: the share of the peak that warp-level mma.sync can issue (Hopper: 16-bit and TF32 peaks
#: need wgmma; DMMA runs at its full rate through mma.sync)
MMA_SYNC_FRACTION = {(9, 0): {"f16": 0.66, "bf16": 0.66, "tf32": 0.66}}
#: Dynamic shared memory one block may opt into by compute capability (CUDA C Programming
#: Guide, KiB): where a device does not report it (:func:`optin_shared`)
OPTIN_SHARED_KIB = {(8, 0): 163, (8, 6): 99, (8, 7): 163, (8, 9): 99, (9, 0): 227}
#: The H200's compute capability (the reference device, :func:`reference_h200`).
H200_CC = (9, 0)
#: Static ``__shared__`` arrays are capped at 48 KiB per block (the kernels use only those).
STATIC_SHARED = 48 * 1024
#: The SM-side figures of the hierarchical model, as :func:`reference_h200` holds them
#: for the H200 (the model the committed results are checked with): warp schedulers per SM
#: (each issues one instruction per clock, Volta and later), shared memory / L1 bytes per clock
#: per SM, the memory trip latency in SM clocks, and the clock sustained under full load as a
#: fraction of the boost clock (cuBLAS SGEMM: 51 of 67 TFLOP/s). Without them a real device
#: planned without the issue and latency bounds that modelcheck validates.
SCHEDULERS_PER_SM, SHARED_BYTES_PER_CLOCK, TRIP_CYCLES, SUSTAINED_CLOCK = 4, 128, 263, 0.77


#: Peak memory bandwidth (bytes/s, vendor data sheets) by a piece of the device name, for
#: APIs that do not report the memory clock (OpenCL): without it the OpenCL rows of one GPU
#: used a 3 TB/s guess where CUDA read 4.8 TB/s from the device (H200), so their DRAM
#: fractions disagreed by 1.6x. First match wins: longer names first.
MEMORY_BANDWIDTH: tuple[tuple[str, float], ...] = (
    ("H200", 4.8e12),
    ("H100 PCIe", 2.0e12),
    ("H100", 3.35e12),
    ("A100-SXM4-80GB", 2.039e12),
    ("A100 80GB PCIe", 1.935e12),
    ("A100", 1.555e12),
    ("V100", 9.0e11),
    ("L40S", 8.64e11),
    ("L4", 3.0e11),
    ("A10", 6.0e11),
    ("RTX 4090", 1.008e12),
    ("T4", 3.2e11),
)


def known_bandwidth(name: str) -> float | None:
    """The data-sheet memory bandwidth of a GPU named ``name`` (:data:`MEMORY_BANDWIDTH`)."""
    return next((bw for part, bw in MEMORY_BANDWIDTH if part in name), None)


def lanes(cc: tuple[int, int]) -> tuple[int, int]:
    """(FP32, FP64) lanes per SM for compute capability ``cc``; unknown parts get the figures
    of the nearest older listed one."""
    cc = (int(cc[0]), int(cc[1]))
    known = [k for k in sorted(LANES) if k <= cc]
    return LANES[known[-1]] if known else (64, 2)


def tensor_flop_per_clock(cc: tuple[int, int]) -> dict[str, int]:
    """Dense tensor-core FLOP per clock per SM by kind for compute capability ``cc``
    (:data:`FLOP_PER_CLOCK`): the nearest older listed part's, empty before sm_80."""
    known = [c for c in sorted(FLOP_PER_CLOCK) if c <= cc]
    return FLOP_PER_CLOCK[known[-1]] if known else {}


def compute_capability(device: DeviceSpec) -> tuple[int, int] | None:
    """The device's CUDA compute capability (the ``extra`` fact :func:`device_spec` writes), or
    None."""
    text = dict(device.extra).get("compute capability")
    if not text or device.vendor != "NVIDIA":
        return None
    try:
        major, minor = text.split(".")
        return int(major), int(minor)
    except ValueError:
        return None


def optin_shared(device: DeviceSpec) -> int:
    """Dynamic shared memory one block may opt into (bytes): the ``shared opt-in per block``
    fact NVIDIA backends report (:func:`device_spec`), else the compute capability's figure
    (:data:`OPTIN_SHARED_KIB`), else ``max_shared_per_block``."""
    text = dict(device.extra).get("shared opt-in per block", "")
    try:
        return int(text.split()[0]) * 1024
    except (IndexError, ValueError):
        pass
    cc = compute_capability(device)
    if cc in OPTIN_SHARED_KIB:
        return OPTIN_SHARED_KIB[cc] * 1024
    return device.max_shared_per_block


def device_spec(name: str, cc: tuple[int, int], a: dict[str, int], *, launch_overhead: float,
                extra: tuple[tuple[str, str], ...] = ()) -> DeviceSpec:  # fmt: skip
    """A DeviceSpec (estimated ceilings) from the device's attributes ``a``: ``sms`` and
    ``clock_khz``; memory as ``mem_clock_khz`` + ``bus_bits`` or a guessed ``bandwidth``
    (bytes/s; OpenCL does not report the memory); optionally ``warp``, ``threads_per_block``,
    ``threads_per_sm``, ``blocks_per_sm``, ``shared_optin``, ``shared_per_sm``,
    ``regs_per_sm`` and ``l2`` (bytes)."""
    sms = max(1, int(a["sms"]))
    l32, l64 = lanes(cc)
    clock = a["clock_khz"] * 1e3
    if "mem_clock_khz" in a:
        bw = 2 * a["mem_clock_khz"] * 1e3 * a["bus_bits"] / 8
        mem = f"{a['bus_bits']}-bit memory at {a['mem_clock_khz'] / 1e6:.2f} GHz DDR"
    elif (sheet := known_bandwidth(name)) is not None:
        bw, mem = float(sheet), "the data sheet's memory bandwidth"
    else:
        bw, mem = float(a["bandwidth"]), "a guessed bandwidth (not reported)"
    optin = int(a.get("shared_optin", STATIC_SHARED))
    facts = (
        ("compute capability", f"{cc[0]}.{cc[1]}"),
        ("shared opt-in per block", f"{optin // 1024} KiB (kernels use static)"),
    )
    fma = (("float32", sms * l32 * 2 * clock), ("float64", sms * l64 * 2 * clock))
    smem = sms * SHARED_BYTES_PER_CLOCK * clock
    return DeviceSpec(
        name=name,
        kind="gpu",
        vendor="NVIDIA",
        compute_units=sms,
        warp_size=int(a.get("warp", 32)),
        max_threads_per_block=int(a.get("threads_per_block", 1024)),
        max_threads_per_unit=int(a.get("threads_per_sm", 2048)),
        max_blocks_per_unit=int(a.get("blocks_per_sm", 32)),
        max_shared_per_block=min(STATIC_SHARED, optin),
        shared_per_unit=int(a.get("shared_per_sm", 228 * 1024)),
        registers_per_unit=int(a.get("regs_per_sm", 65536)),
        max_registers_per_thread=255,
        caches=(("L2", int(a.get("l2", 0))),),
        peak_flops=fma,
        bandwidth=bw,
        launch_overhead=launch_overhead,
        levels=(("shared memory", smem), ("L1", smem)),
        fma_peaks=fma,
        issue_rate=sms * SCHEDULERS_PER_SM * clock,
        sustained=SUSTAINED_CLOCK,
        latency=TRIP_CYCLES / clock,
        ceilings_source=(
            f"estimate from {sms} SMs x {l32} FP32 lanes x {clock / 1e9:.2f} GHz and {mem}; "
            "run `tiledmm calibrate` to measure"
        ),
        extra=facts + tuple(extra),
    )


#: The H200's measured ceilings, copied from `tiledmm calibrate --backend cupy` (its record's
#: "levels" and "fma_peaks"; probes.cl). Every entry replaces the datasheet estimate in
#: :func:`reference_h200` and counts as measured under load (not scaled by ``sustained``).
#: Updating the reference is this one edit (docs/model.md, "Calibrating the reference").
H200_MEASURED: dict[str, Any] = {
    "source": "tiledmm calibrate --backend cupy, 2026-11-30 (probes.cl); float16 GEMM 2026-12-02",
    "levels": {"DRAM": 4529500000000.0, "L2": 12335000000000.0, "shared memory": 32719000000000.0},
    "fma_peaks": {"float32": 58525000000000.0, "float64": 32768000000000.0},
    # the vendor float16 GEMM (cuBLAS HGEMM through cupy.matmul): the calibration of
    # 2026-12-02 that benches/results/h200-cupy.json records (calibrate timed float16 from then)
    "peak_flops": {"float16": 749850000000000.0},
}


def reference_h200(measured: dict[str, Any] | None = None) -> DeviceSpec:
    """The measured-reference NVIDIA H200 (GPU.md, 2026-11-29/30): what the offline model
    checker rebuilds committed GPU results against. The ceilings in :data:`H200_MEASURED` as
    measured; the others datasheet/derived SM-side ceilings at the 1.98 GHz boost clock,
    scaled by ``sustained`` = 0.77 (cuBLAS SGEMM sustains 51 of the 67 TFLOP/s datasheet FP32
    peak; the shared-memory-bound tiled kernels 0.77 of 128 B/clk), and an L2 of 6.6 TB/s,
    what the naive kernel moved through it (16.95 GB in 2.574 ms, Nsight Compute). Vendor-GEMM
    rates: cuBLAS SGEMM and DGEMM (GPU.md), and the calibrated float16 one (the tensor cores'
    16-bit roof, :func:`tiledmm.model.tensorcore.roof`).
    ``measured``: another set in H200_MEASURED's form (``python -m tiledmm.report.modelcheck
    --calibration FILE`` checks a new calibration this way before it is copied in)."""
    measured = H200_MEASURED if measured is None else measured
    sms, clock = 132, 1.98e9
    l32, l64 = lanes(H200_CC)
    estimates = {
        "shared memory": sms * SHARED_BYTES_PER_CLOCK * clock,
        "L1": sms * SHARED_BYTES_PER_CLOCK * clock,
        "L2": 6.6e12,
        "DRAM": 4.1e12,
    }
    fma = {"float32": sms * l32 * 2 * clock, "float64": sms * l64 * 2 * clock}
    levels = estimates | measured.get("levels", {})
    fma |= measured.get("fma_peaks", {})
    # the vendor GEMM's rate per dtype: cuBLAS SGEMM and DGEMM (GPU.md), and any the
    # calibration measured (the tensor cores' 16-bit roof: tensorcore.roof)
    peaks = {"float32": 50.8e12, "float64": 60.7e12} | measured.get("peak_flops", {})
    loaded = set(measured.get("levels", {})) | ({"compute"} if measured.get("fma_peaks") else set())
    return DeviceSpec(
        name="NVIDIA H200",
        kind="gpu",
        vendor="NVIDIA",
        compute_units=sms,
        warp_size=32,
        max_threads_per_block=1024,
        max_threads_per_unit=2048,
        max_blocks_per_unit=32,
        max_shared_per_block=STATIC_SHARED,
        shared_per_unit=228 * 1024,
        registers_per_unit=65536,
        max_registers_per_thread=255,
        caches=(("L2", 60 << 20),),
        peak_flops=tuple(sorted(peaks.items())),
        bandwidth=levels["DRAM"],
        launch_overhead=5e-6,
        levels=tuple(levels.items()),
        fma_peaks=tuple(sorted(fma.items())),
        issue_rate=sms * SCHEDULERS_PER_SM * clock,
        sustained=SUSTAINED_CLOCK,
        latency=TRIP_CYCLES / clock,
        loaded=tuple(sorted(loaded)),
        ceilings_source=(
            "measured reference (GPU.md, 2026-11-29/30; tiledmm.device.nvidia.reference_h200; "
            f"{measured.get('source', 'measured')})"
        ),
        extra=(("compute capability", f"{H200_CC[0]}.{H200_CC[1]}"),),
    )


#: the vendor-GEMM rates of a calibration the reference takes (the tensor cores' 16-bit roof);
#: its float32 and float64 figures stay GPU.md's (the register family's pad rule reads them)
TENSOR_PEAKS = ("float16",)


def measured_from_record(record: dict) -> dict[str, Any]:
    """A calibration record (``tiledmm calibrate``) in :data:`H200_MEASURED`'s form."""
    return {
        "source": f"tiledmm calibrate --backend {record.get('backend', '?')}, "
        f"{record.get('date', '?')} (probes.cl)",
        "levels": {k: float(f"{v:.5g}") for k, v in sorted(record.get("levels", {}).items())},
        "fma_peaks": {k: float(f"{v:.5g}") for k, v in sorted(record.get("fma_peaks", {}).items())},
        "peak_flops": {k: float(f"{v:.5g}") for k, v in sorted(record.get("peak_flops", {}).items())
                       if k in TENSOR_PEAKS},
    }
