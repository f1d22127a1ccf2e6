"""Device model: the limits the planner fits tiles to, and the ceilings the roofline uses.

A :class:`DeviceSpec` describes one device in GPU terms. On a CPU the same words apply to the
OpenCL/PoCL picture of it: a "compute unit" is a core, "shared memory per block" is the cache a
block's tiles must stay in (L2 per core), and a "block" runs on one core.

Ceilings (peak FLOP/s per dtype, memory bandwidth) are either measured (``tiledmm calibrate``,
cached with platformdirs) or estimated from the hardware description; ``ceilings_source`` says
which, and the plan repeats it. So is each backend's per-call host cost: measured per backend
(``host_costs``, from the calibration record), else the estimate ``launch_overhead``;
:meth:`DeviceSpec.host_cost` gives the one a plan adds, and the plan says which.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from .calibration import has_ceilings, load_calibration

__all__ = ["DeviceSpec"]


@dataclass(frozen=True)
class DeviceSpec:
    """Limits and ceilings of one device. Sizes in bytes, rates per second."""

    name: str
    kind: str = "cpu"  # "cpu" or "gpu"
    vendor: str = ""
    compute_units: int = 1  # SMs on a GPU, cores on a CPU
    warp_size: int = 1  # SIMT width (32 on NVIDIA); 1 on a CPU
    max_threads_per_block: int = 1024
    max_threads_per_unit: int = 2048
    max_blocks_per_unit: int = 32
    max_shared_per_block: int = 48 * 1024  # opt-in maximum where the backend opts in
    shared_per_unit: int = 228 * 1024
    registers_per_unit: int = 65536
    max_registers_per_thread: int = 255
    simd_bytes: int = 16  # native vector width: 32 with AVX2, 64 with AVX-512 (CPU kernels)
    caches: tuple[tuple[str, int], ...] = ()  # (("L1", bytes), ("L2", bytes), ...)
    peak_flops: tuple[tuple[str, float], ...] = ()  # (("float32", 6.7e13), ...)
    bandwidth: float = 0.0  # bytes/s between global memory and the chip
    launch_overhead: float = 0.0  # seconds per call on the host, as seen from Python: estimated
    ceilings_source: str = "estimate"  # "measured <date> ..." or "estimate from ..."
    extra: tuple[tuple[str, str], ...] = field(default=())  # free-form facts for `tiledmm info`
    # The memory hierarchy (docs/model.md). ``levels``: bandwidth ceilings in bytes/s by level,
    # nearest the registers first: GPU ("shared memory", "L1", "L2", "DRAM"); CPU ("L1", "L2",
    # "L3", "DRAM"). ``fma_peaks``: FMA-pipe peak FLOP/s per dtype (not the vendor GEMM, which
    # may use tensor cores). ``issue_rate``: warp instructions per second, whole GPU (CPU:
    # instructions per second). ``sustained``: the SM clock under full load as a fraction of
    # the clock the estimated SM-side ceilings assume (1.0 when those were measured under load).
    # ``latency``: seconds per dependent trip to the level behind L1 (GPU: L2 hit; CPU: DRAM).
    # ``loaded``: SM-clocked ceilings measured under load ("shared memory", "L1", "compute" for
    # ``fma_peaks``), which ``sustained`` does not scale (see :meth:`clocked`).
    levels: tuple[tuple[str, float], ...] = ()
    fma_peaks: tuple[tuple[str, float], ...] = ()
    issue_rate: float = 0.0
    sustained: float = 1.0
    latency: float = 0.0
    loaded: tuple[str, ...] = ()
    # CPU: independent vector FMA chains that keep a core's FMA pipes full (latency x pipes),
    # measured by `tiledmm calibrate`'s accumulator probe; 0: the model's ISA default
    fma_accumulators: int = 0
    # ``host_costs``: (backend, seconds) per backend whose per-call host cost `tiledmm calibrate`
    # measured on this device (launch path, argument packing, enqueue, allocation, dispatcher);
    # a backend not listed costs ``launch_overhead`` (the estimate).
    host_costs: tuple[tuple[str, float], ...] = ()
    # ``loop_costs``: (backend, (step, column)) where `tiledmm calibrate` timed the backend's
    # register loop on one core (``register_block`` probe): seconds per K step of a micro-tile
    # beyond its columns, and per column of it (numba-cpu: its 4 x TN micro-tile's loop)
    loop_costs: tuple[tuple[str, tuple[float, float]], ...] = ()

    def peak(self, dtype: str) -> float:
        """Peak FLOP/s for ``dtype`` (falls back to half the float32 figure for float64)."""
        table = dict(self.peak_flops)
        if dtype in table:
            return table[dtype]
        if dtype == "float64" and "float32" in table:
            return table["float32"] / 2
        return next(iter(table.values()), 1e9)

    def cache(self, level: str) -> int:
        return dict(self.caches).get(level, 0)

    def level(self, name: str) -> float:
        """Bandwidth ceiling of memory level ``name`` (bytes/s); 0.0 when unknown. No level is
        slower than ``bandwidth`` (DRAM), so a spec derived with a new ``bandwidth`` stays
        consistent."""
        table = dict(self.levels)
        if name not in table and name != "DRAM":
            return 0.0
        return max(table.get(name, 0.0), self.bandwidth)

    def fma_peak(self, dtype: str) -> float:
        """FMA-pipe FLOP/s for ``dtype`` (``fma_peaks``, else :meth:`peak`)."""
        table = dict(self.fma_peaks)
        if dtype in table:
            value = table[dtype]
        elif dtype == "float64" and "float32" in table:
            value = table["float32"] / 2
        else:
            return self.peak(dtype)
        # on a CPU the measured GEMM rate is a floor of the FMA peak; GPU vendor GEMMs may use
        # tensor cores (DMMA), which the FMA pipes do not have
        return value if self.is_gpu else max(value, self.peak(dtype))

    def clocked(self, name: str, value: float) -> float:
        """An SM-clocked ceiling ``value`` of level ``name`` at the clock the SMs sustain
        under load: as given where it was measured under load (``loaded``), else scaled by
        ``sustained`` (an estimate at the boost clock)."""
        return value if name in self.loaded else value * (self.sustained or 1.0)

    def host_cost(self, backend: str = "") -> float:
        """Seconds one call of ``backend`` costs on the host beyond its kernel: measured
        (``host_costs``) where `tiledmm calibrate` or first use measured it, else
        ``launch_overhead`` (an estimate). What a plan adds to the kernel's time."""
        return dict(self.host_costs).get(backend, self.launch_overhead)

    def loop_cost(self, backend: str) -> tuple[float, float] | None:
        """(seconds per K step, seconds per column) of ``backend``'s register micro-tile loop
        on one core, where `tiledmm calibrate` measured it (``loop_costs``); else None."""
        return dict(self.loop_costs).get(backend)

    def host_cost_source(self, backend: str = "") -> str:
        """Where :meth:`host_cost` comes from, in words."""
        if backend in dict(self.host_costs):
            return "measured by `tiledmm calibrate`"
        return "estimate; `tiledmm calibrate` measures it"

    @property
    def is_gpu(self) -> bool:
        return self.kind == "gpu"

    @property
    def ceilings_measured(self) -> bool:
        return self.ceilings_source.startswith("measured")

    def to_dict(self) -> dict:
        d = asdict(self)
        for key in ("caches", "peak_flops", "extra", "levels", "fma_peaks", "host_costs",
                    "loop_costs"):  # fmt: skip
            d[key] = dict(d[key])
        d["loaded"] = list(d["loaded"])
        return d

    def with_calibration(self) -> DeviceSpec:
        """This spec with ceilings and host costs replaced by cached measurements, if valid
        ones exist (a record of host costs alone leaves the ceilings estimated)."""
        cal = load_calibration().get(self.name)
        if not cal:
            return self
        costs = {k: float(v["seconds"]) for k, v in cal.get("host_cost", {}).items()}
        costs = tuple(sorted((dict(self.host_costs) | costs).items()))
        loops = {k: (float(v["step"]), float(v["column"]))
                 for k, v in cal.get("loop_costs", {}).items()}  # fmt: skip
        loops = tuple(sorted((dict(self.loop_costs) | loops).items()))
        if not has_ceilings(cal):
            return replace(self, host_costs=costs, loop_costs=loops)
        levels = dict(self.levels) | {k: float(v) for k, v in cal.get("levels", {}).items()}
        fma = dict(self.fma_peaks) | {k: float(v) for k, v in cal.get("fma_peaks", {}).items()}
        probe = float(cal.get("fma_probe", 0.0))  # the accumulator probe's float32 FLOP/s
        for dt, per in (("float32", 1), ("float64", 2)):  # the pipes' rate, not the library's
            if probe and dt in fma:
                fma[dt] = max(fma[dt], probe / per)
        loaded = set(self.loaded) | set(cal.get("levels", {}))
        loaded |= {"compute"} if cal.get("fma_peaks") else set()
        return replace(
            self,
            peak_flops=tuple(sorted((k, float(v)) for k, v in cal["peak_flops"].items())),
            bandwidth=float(cal["bandwidth"]),
            levels=tuple(levels.items()),
            fma_peaks=tuple(sorted(fma.items())),
            sustained=float(cal.get("sustained", self.sustained)),
            fma_accumulators=int(cal.get("fma_accumulators", self.fma_accumulators)),
            loaded=tuple(sorted(loaded)),
            host_costs=costs,
            loop_costs=loops,
            ceilings_source=f"measured {cal.get('date', '')} ({cal.get('method', 'calibrate')})",
        )
