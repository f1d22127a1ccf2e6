"""The planner: tile geometry, padding, arithmetic intensity, occupancy and roofline time.

Pure Python. Given a problem (M, N, K, dtype), a kernel family and a DeviceSpec, it returns a
:class:`Plan`. ``global_bytes``/``intensity`` are DESIGN.md's tiling formulas: naive reads a row
of A and a column of B per output (2K elements); a BM x BN block tile reads its A row-panel and
B column-panel once, so global intensity is 2*BM*BN / ((BM+BN) * itemsize). The prediction is
the hierarchical roofline of :mod:`tiledmm.model.hierarchy` (``plan.levels``: bytes and time at
every
level; the slowest binds) on devices that describe their levels, else the single DRAM roofline.
"""

from __future__ import annotations

import math

from ..device.spec import DeviceSpec
from ..model.cpu import cpu_levels
from ..model.hierarchy import engine_of, gpu_levels
from ..model.levels import Level
from .geometry import KERNEL_FAMILIES, Geometry
from .mma import default_mma_geometry, plan_mma
from .plans import ITEMSIZE, NAIVE_REGISTERS, Plan, PlanError, kib, occupancy

__all__ = ["make_plan", "plan_product", "batch_plan", "default_geometry"]


def default_geometry(kernel: str, dtype: str, device: DeviceSpec) -> Geometry:
    """Textbook tiles for a device class; backends override with tuned ones."""
    if kernel == "mma":
        return default_mma_geometry(dtype, device)
    s = ITEMSIZE.get(dtype, 4)
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
    if kernel == "naive":
        return NAIVE_REGISTERS  # what ptxas allocates, whatever the dtype (docs/model.md)
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
    return plan_product(m, n, k, dtype=dtype, kernel=kernel, device=device, geometry=geometry,
                        backend=backend)  # fmt: skip


def plan_product(m: int, n: int, k: int, *, dtype: str, kernel: str, device: DeviceSpec,
                 geometry: Geometry | None = None, backend: str = "") -> Plan:  # fmt: skip
    """:func:`make_plan` of arguments checked before: dispatch's route (sizes from numpy's
    shapes, a family validated once by the call and resolved against the backend)."""
    if kernel == "mma":
        return plan_mma(m, n, k, dtype, device, geometry, backend)
    if dtype not in ITEMSIZE:
        raise PlanError(f"the planner models float16/float32/float64, not {dtype!r}")
    s = ITEMSIZE[dtype]
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
    # the register kernel's shared rows are BM + PAD and BN + PAD long (register.cl)
    pad = int(opts.get("pad", 0)) if kernel == "register" else 0
    shared = 0 if kernel == "naive" else (bk * (bm + pad) + bk * (bn + pad)) * s * stages
    if shared > device.max_shared_per_block:
        where = "shared memory" if device.is_gpu else "the per-core cache (L2)"
        raise PlanError(
            f"block tile {bm}x{bn}x{bk} ({dtype}) needs {kib(shared)} of {where} per block, "
            f"but {device.name} has {kib(device.max_shared_per_block)}; use a smaller block_tile"
            + (f" or pad=0 (its rows are {pad} elements longer)" if pad else "")
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

    occ = occupancy(device, kernel, threads, shared, regs, gx * gy)
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
        predicted = device.host_cost(backend) + top.seconds
    else:  # the single DRAM roofline for devices that do not describe their levels
        peak = device.peak(dtype) * occ.wave_efficiency
        t_compute = executed / peak if peak else 0.0
        t_memory = global_bytes / device.bandwidth if device.bandwidth else 0.0
        bound = "memory" if t_memory > t_compute else "compute"
        predicted = device.host_cost(backend) + max(t_compute, t_memory)
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


def batch_plan(plan: Plan, batch: int) -> Plan:
    """The model's view of ``batch`` products of ``plan`` in one launch (the batched kernels put
    the batch in the grid's z): the products stacked along M, each padded to the block tile as
    its own blocks are, with the same tiles and options, so waves, padding and the work at each
    level count the whole launch. For prediction only: its grid is not a launch. The stack
    shares one B where a batch reads one per product; the DRAM level undercounts that (B is 1
    of the 3 operands, and batched products of this size are rarely DRAM bound). The GPU
    families' levels also count a batch given as ``options["batch"]`` (``hierarchy.gpu_levels``;
    the same ratios on every batched row of h200-shapes.json); the mma and CPU models do not,
    which is why the batch is stacked here: teaching those two a batch and setting the option
    would leave one mechanism."""
    if batch <= 1 or not plan.m:
        return plan
    bm = plan.block_tile[0]
    geo = Geometry(plan.block_tile, plan.thread_tile, tuple(sorted(plan.options.items())),
                   plan.registers_per_thread, plan.geometry_source)  # fmt: skip
    m = batch * (-(-plan.m // bm) * bm)
    return make_plan(m, plan.n, plan.k, dtype=plan.dtype, kernel=plan.kernel, device=plan.device,
                     geometry=geo, backend=plan.backend)  # fmt: skip
