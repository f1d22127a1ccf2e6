"""Hopper float16 / bfloat16 and TF32 GEMM (issue 38): ``kernels/hopper_gemm.cu`` on CuPy.

The fifth rung of the ``mma`` family on compute capability 9.x: TMA copies into an
mbarrier-guarded stage ring, a producer warpgroup and two consumer warpgroups issuing
``wgmma.mma_async`` from 128-byte-swizzled shared memory (B read N-major, as NumPy stores it),
``setmaxnreg``, and a persistent grid walking the tiles in a grouped order. A 16-bit mma plan
on such a device runs here (:func:`takes`: the planner's decision, ``tiledmm.planner.hopper``,
which also gives the plan this kernel's geometry and model); :func:`config` reads the
configuration off the plan's options. So does a TF32 plan (DTYPE 3) that the planner gave
option ``hopper`` 1 (the default on 9.x; ``TILEDMM_HOPPER_TF32=0`` keeps the earlier route);
its B^T pack before the GEMM is :mod:`.hopper_tf32`'s.

Host side:

- operands whose rows do not start 16-byte aligned (TMA needs 16-byte aligned row strides and
  base) or whose columns are not unit-stride are copied into padded rows first
  (:func:`tma_ready`); everything else is read in place; M, N, K edges are TMA's zero fill;
- tensor maps (``cuTensorMapEncodeTiled``) and the launch with two 128-byte by-value maps go
  through ctypes and the CUDA driver, as :mod:`.wgmma` does (CuPy offers neither); maps are
  cached per (address, shape, stride);
- the grid is at most one block per multiprocessor (two-block clusters: as many clusters as
  the driver says fit at once, ``cuOccupancyMaxActiveClusters``).

NVRTC compiles for ``sm_90a`` directly (wgmma and setmaxnreg exist only on the "a" target).
"""

from __future__ import annotations

import ctypes as C
from pathlib import Path
from typing import Any

from tiledmm.device.nvidia import OPTIN_SHARED_KIB
from tiledmm.planner import hopper as hplan
from tiledmm.util.lru import LRUCache

from . import hopper_tf32

__all__ = [
    "DTYPES", "KERNEL_DTYPES", "MAP_UINT16", "MAP_FLOAT32", "SMEM_LIMIT", "takes", "config",
    "defines", "smem_bytes", "tma_ready", "padded_ld", "map_args", "tile_counts", "grid_size",
    "tile_order", "Driver", "HopperKernel", "device_info", "kernel", "run", "stores_in_place",
    "launch_into", "tma_operand", "source", "SYNC",
]  # fmt: skip

SRC = Path(__file__).resolve().parents[1] / "kernels" / "hopper_gemm.cu"
#: what the Hopper kernels share (mbarriers, the tensor map), put before each kernel's text
SYNC = SRC.with_name("sm90_sync.cuh")
#: 16-bit plan dtype -> the kernel's DTYPE define
DTYPES = {"float16": 1, "bfloat16": 2}
#: every dtype the kernel takes: float32 is TF32 (DTYPE 3), for plans with precision "tf32"
#: that the planner gave this kernel (:func:`takes`)
KERNEL_DTYPES = {**DTYPES, hplan.TF32: 3}
#: CUtensorMapDataType: 16-bit words moved as they are; float32 (TF32 A, B^T, as they are)
MAP_UINT16, MAP_FLOAT32 = 1, 7
#: dynamic shared memory a block may opt into on sm_90 (the NVIDIA fact, device/nvidia)
SMEM_LIMIT = OPTIN_SHARED_KIB[(9, 0)] * 1024

_KERNELS: LRUCache[Any] = LRUCache(16)
_MAPS: LRUCache[Any] = LRUCache(64)
_DEVICES: dict[int, tuple[str, int]] = {}


def takes(plan: Any, cc: str) -> bool:
    """Whether a plan runs here (``tiledmm.planner.hopper.runs``, the planner's own decision:
    a 16-bit mma plan on compute capability 9.x where its option ``hopper``, else
    ``TILEDMM_HOPPER16``, else ``DEFAULT_ON`` for more than ``DECODE_M`` rows says so); ``cc``
    as CuPy gives it ("90"). A TF32 plan only where the planner recorded option ``hopper`` 1
    (on by default: ``tiledmm.planner.hopper.DEFAULT_ON_TF32``)."""
    if plan.dtype == hplan.TF32 and not int(plan.options.get("hopper", 0)):
        return False
    text = str(cc)
    major = int(text[:-1]) if text[:-1].isdigit() else None
    return hplan.runs(plan.dtype, (major, 0) if major is not None else None, plan.options,
                      plan.m)  # fmt: skip


def config(plan: Any) -> dict[str, int]:
    """This kernel's configuration for a plan (``tiledmm.planner.hopper.config``: the
    "decode" or "large" configuration, single fields overridden by options ``hopper_<key>``;
    a Hopper plan carries them all)."""
    return hplan.config(plan.m, plan.options, plan.dtype)


def smem_bytes(d: dict[str, int]) -> int:
    """Dynamic shared memory of one block of defines ``d`` (``tiledmm.planner.hopper``'s
    rule)."""
    return hplan.smem_bytes(dict(bm=d["BM"], bn=d["BN"], stages=d["STAGES"], epi=d.get("EPI", 0)))


def defines(dtype: str, cfg: dict[str, int]) -> dict[str, int]:
    """``hopper_gemm.cu``'s defines for ``dtype`` and a configuration (ValueError for one it
    cannot run: ``tiledmm.planner.hopper.problems``); ``cfg["wait1"]`` 0 waits for each
    stage's MMAs before the next (default 1: one group in flight); ``cfg["epi"]`` 1 stores C
    through shared memory and TMA. float32: TF32 (DTYPE 3, A from registers: AREG 1)."""
    bad = hplan.problems(dtype, dict(cfg), SMEM_LIMIT)
    if bad:
        raise ValueError(f"hopper tiles {cfg['bm']}x{cfg['bn']}: " + "; ".join(bad))
    two = cfg["cm"] * cfg["cn"] == 2
    areg = dict(AREG=1) if dtype == hplan.TF32 else {}
    return dict(DTYPE=KERNEL_DTYPES[dtype], BM=cfg["bm"], BN=cfg["bn"], CM=cfg["cm"], CN=cfg["cn"],
                STAGES=cfg["stages"], CLUSTER=cfg["cluster"], WAIT1=int(cfg.get("wait1", 1)),
                PRODUCER_REGS=40 if two else 0, CONSUMER_REGS=232 if two else 0,
                EPI=int(cfg.get("epi", 0)), **areg)  # fmt: skip


# ------------------------------------------------------------------ host logic (CPU-testable)


def tma_ready(shape: tuple[int, int], strides: tuple[int, int], ptr: int,
              itemsize: int = 2) -> bool:  # fmt: skip
    """Whether a 2-D operand can be read by TMA in place: unit column stride (or one column),
    a 16-byte aligned base and row stride (or one row), rows that do not overlap."""
    rows, cols = shape
    s0, s1 = strides
    if ptr % 16 or not (s1 == itemsize or cols == 1):
        return False
    return rows == 1 or (s0 > 0 and s0 % 16 == 0 and s0 >= cols * itemsize)


def padded_ld(cols: int, itemsize: int = 2) -> int:
    """Row length (elements) of a copy whose rows start 16-byte aligned."""
    per = 16 // itemsize
    return max(per, -(-cols // per) * per)


def map_args(rows: int, cols: int, row_bytes: int, box_rows: int, itemsize: int = 2,
             batch: int = 1, batch_bytes: int = 0) -> tuple[tuple, tuple, tuple]:  # fmt: skip
    """(global dims, strides in bytes, box; inner first) of the 3-D tensor map of ``batch``
    row-major ``rows`` x ``cols`` matrices ``batch_bytes`` apart, read in boxes of 64 columns
    (128 bytes, the swizzle span) x ``box_rows`` rows x one matrix; one row, or one matrix:
    any valid stride there."""
    stride = row_bytes if rows > 1 else -(-cols * itemsize // 16) * 16
    between = batch_bytes if batch > 1 else stride * rows
    for what, x in (("row", stride), ("batch", between)):
        if x % 16 or x >= 1 << 40:
            raise ValueError(f"TMA {what} stride {x} bytes: must be a multiple of 16 under 2^40")
    if not 1 <= box_rows <= 256:
        raise ValueError(f"TMA box of {box_rows} rows: 1..256")
    return (cols, rows, batch), (stride, between), (128 // itemsize, box_rows, 1)


def tile_counts(m: int, n: int, bm: int, bn: int, cluster: int) -> tuple[int, int]:
    """(tiles along M rounded up to whole clusters, tiles along N)."""
    tm = -(-m // bm)
    return -(-tm // cluster) * cluster, -(-n // bn)


def grid_size(tiles_m: int, tiles_n: int, cluster: int, slots: int) -> int:
    """Blocks of the persistent grid: one per cluster tile, at most ``slots`` clusters (those
    resident at once), in whole clusters."""
    return max(1, min(tiles_m // cluster * tiles_n, slots)) * cluster


def tile_order(t: int, tiles_m: int, tiles_n: int, group_m: int) -> tuple[int, int]:
    """Tile ``t`` of the grouped order (``hopper_gemm.cu``'s ``tile_of``): ``group_m`` rows of
    tiles at a time, down each column of the group before the next column."""
    per_group = group_m * tiles_n
    first = (t // per_group) * group_m
    size = min(tiles_m - first, group_m)
    r = t % per_group
    return first + r % size, r // size


# ------------------------------------------------------------------ the CUDA side


def source(defs: dict[str, int], kernel: Path = SRC) -> str:
    """The text NVRTC compiles: the defines, then ``sm90_sync.cuh``, then ``kernel``'s own."""
    head = "".join(f"#define {k} {v}\n" for k, v in defs.items())
    return head + SYNC.read_text() + kernel.read_text()


def sm90a_cubin(src: str, name: str = "hopper_gemm.cu", options: tuple = ()) -> bytes:
    """``src`` compiled by NVRTC for ``sm_90a`` (wgmma and setmaxnreg exist only there), with
    ``options`` added; a failure raises with NVRTC's log."""
    from cupy_backends.cuda.libs import nvrtc

    prog = nvrtc.createProgram(src, name, (), ())
    try:
        try:
            nvrtc.compileProgram(prog, ("-arch=sm_90a", "-std=c++17", *options))
        except Exception as exc:
            raise RuntimeError(f"{name}: {exc}: {nvrtc.getProgramLog(prog)}") from exc
        return nvrtc.getCUBIN(prog)
    finally:
        nvrtc.destroyProgram(prog)


class _LaunchConfig(C.Structure):
    _fields_ = [("gx", C.c_uint), ("gy", C.c_uint), ("gz", C.c_uint), ("bx", C.c_uint),
                ("by", C.c_uint), ("bz", C.c_uint), ("smem", C.c_uint), ("stream", C.c_void_p),
                ("attrs", C.c_void_p), ("nattrs", C.c_uint)]  # fmt: skip


class Driver:
    """cuTensorMapEncodeTiled, cuLaunchKernel and cuOccupancyMaxActiveClusters from libcuda."""

    kernel_name = "hopper_gemm"  # (for the error a failed launch raises)

    def __init__(self) -> None:
        lib = C.CDLL("libcuda.so.1")
        self.encode = lib.cuTensorMapEncodeTiled
        u64p, u32p = C.POINTER(C.c_uint64), C.POINTER(C.c_uint32)
        self.encode.argtypes = [C.c_void_p, C.c_int, C.c_uint32, C.c_void_p, u64p, u64p, u32p,
                                u32p, C.c_int, C.c_int, C.c_int, C.c_int]  # fmt: skip
        self.launch = lib.cuLaunchKernel
        self.launch.argtypes = [C.c_void_p] + [C.c_uint] * 7 + [C.c_void_p] * 3
        self.occupancy = getattr(lib, "cuOccupancyMaxActiveClusters", None)

    def tensor_map(self, ptr: int, rows: int, cols: int, row_bytes: int, box_rows: int,
                   batch: int = 1, batch_bytes: int = 0, itemsize: int = 2,
                   data_type: int = MAP_UINT16) -> Any:  # fmt: skip
        """A 64-byte aligned buffer holding the 3-D map of ``batch`` row-major matrices of
        ``itemsize``-byte elements (16-bit: ``MAP_UINT16``; TF32's float32: ``MAP_FLOAT32``)
        (:func:`map_args`: boxes of 128 bytes x ``box_rows`` x 1, 128-byte swizzle, zero fill
        outside)."""
        dims, strides, box = map_args(rows, cols, row_bytes, box_rows, itemsize, batch,
                                      batch_bytes)  # fmt: skip
        raw = C.create_string_buffer(192)
        addr = (C.addressof(raw) + 63) & ~63
        # data_type (the bits move as they are), rank 3, no interleave 0, swizzle 128B 3,
        # L2 promotion 256B 3, out-of-bounds fill zeros 0
        rc = self.encode(addr, data_type, 3, ptr, (C.c_uint64 * 3)(*dims),
                         (C.c_uint64 * 2)(*strides), (C.c_uint32 * 3)(*box),
                         (C.c_uint32 * 3)(1, 1, 1), 0, 3, 3, 0)  # fmt: skip
        if rc:
            raise RuntimeError(f"cuTensorMapEncodeTiled: CUresult {rc} (dims {dims}, strides "
                               f"{strides}, box {box})")  # fmt: skip
        return raw, addr

    def max_clusters(self, fn: int, cluster: int, threads: int, smem: int, sms: int) -> int:
        """Clusters of the kernel resident at once (0: unknown)."""
        if self.occupancy is None:
            return 0
        cfg = _LaunchConfig(cluster * sms, 1, 1, threads, 1, 1, smem, None, None, 0)
        out = C.c_int(0)
        try:
            rc = self.occupancy(C.byref(out), C.c_void_p(fn), C.byref(cfg))
        except Exception:  # noqa: BLE001 - an older driver's signature: fall back
            return 0
        return out.value if rc == 0 else 0

    def call(self, fn: int, grid: int, block: int, smem: int, stream: int, args: list) -> None:
        """Launch with ``args``: ctypes scalars, or (buffer, address) tensor maps."""
        ptrs = [a[1] if isinstance(a, tuple) else C.addressof(a) for a in args]
        self.launch_argv(fn, grid, block, smem, stream, (C.c_void_p * len(ptrs))(*ptrs))

    def launch_argv(self, fn: int, grid: int, block: int, smem: int, stream: int,
                    argv: Any) -> None:  # fmt: skip
        """Launch with a ready argument block (``argv``: the arguments' addresses)."""
        rc = self.launch(fn, grid, 1, 1, block, 1, 1, smem, stream, argv, None)
        if rc:
            raise RuntimeError(f"cuLaunchKernel ({self.kernel_name}): CUresult {rc}")


_DRIVER: list[Driver] = []


def _driver() -> Driver:
    if not _DRIVER:
        _DRIVER.append(Driver())
    return _DRIVER[0]


class HopperKernel:
    """One compiled ``hopper_gemm.cu`` build; ``kern(a, b, c)`` is ``c[...] = a @ b`` for
    2-D 16-bit CuPy arrays (``a`` and ``b`` TMA-ready, ``c`` with unit column stride). TF32
    (DTYPE 3): float32 ``a``, ``b`` the packed B^T (N x K, :mod:`.hopper_tf32`), float32 ``c``;
    ``pack`` is the B^T pack kernel."""

    def __init__(self, cp: Any, defs: dict[str, int], sms: int, group_m: int = 16) -> None:
        from cupy.cuda import driver, function

        self.cp, self.defs, self.sms, self.group_m = cp, defs, sms, group_m
        self.bm, self.bn, self.cluster = defs["BM"], defs["BN"], defs["CLUSTER"]
        self.epi = bool(defs.get("EPI"))
        self.tf32 = defs["DTYPE"] == KERNEL_DTYPES[hplan.TF32]
        self.itemsize = 4 if self.tf32 else 2
        self.data_type = MAP_FLOAT32 if self.tf32 else MAP_UINT16
        self.threads = 128 * (defs["CM"] * defs["CN"] + 1)
        self.smem = smem_bytes(defs)
        src = source(defs)
        self.mod = function.Module()
        self.mod.load(sm90a_cubin(src))
        self.fn = self.mod.get_function("hopper_gemm")
        self.pack = self.mod.get_function(hopper_tf32.PACK) if self.tf32 else None
        attr = getattr(driver, "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES", 8)
        driver.funcSetAttribute(self.fn.ptr, attr, self.smem)
        self.drv = _driver()
        slots = sms
        if self.cluster > 1:
            got = self.drv.max_clusters(self.fn.ptr, self.cluster, self.threads, self.smem, sms)
            slots = got or sms // self.cluster
        self.slots = slots

    def _map(self, x: Any, ld: int, box_rows: int) -> Any:
        """The map of a 2-D operand, or of a 3-D stack of matrices (stride of the first axis:
        the matrices' distance; one matrix where it is 0)."""
        rows, cols = x.shape[-2:]
        nb, bs = (x.shape[0], x.strides[0]) if x.ndim == 3 and x.strides[0] else (1, 0)
        s = self.itemsize
        key = (x.data.ptr, rows, cols, ld, box_rows, nb, bs, s)
        make = lambda: self.drv.tensor_map(x.data.ptr, rows, cols, ld * s, box_rows, nb, bs, s,  # noqa: E731
                                           self.data_type)  # fmt: skip
        return _MAPS.get_or_make(key, make)

    def __call__(self, a: Any, b: Any, c: Any, group_m: int | None = None,
                 stream: int | None = None) -> None:  # fmt: skip
        """``c[...] = a @ b``: 2-D operands, or a batch (``c`` 3-D; ``a`` or ``b`` 3-D with the
        same number of matrices, or 2-D, or 3-D with a zero first stride: shared)."""
        (m, k), n, s = a.shape[-2:], c.shape[-1], self.itemsize
        nb = c.shape[0] if c.ndim == 3 else 1
        ma = self._map(a, a.strides[-2] // s, self.bm)
        mb = self._map(b, b.strides[-2] // s, 64)
        tm, tn = tile_counts(m, n, self.bm, self.bn, self.cluster)
        grid = grid_size(tm, tn * nb, self.cluster, self.slots)
        ldc = c.strides[-2] // s if m > 1 else n
        store = self.epi and tma_ready(c.shape[-2:], c.strides[-2:], c.data.ptr, s)
        store = store and (nb == 1 or c.strides[0] % 16 == 0)
        mc = self._map(c, ldc, 64) if store else ma  # unused without TMA stores
        batched = [int(x.ndim == 3 and x.strides[0] != 0) for x in (a, b)]
        args = [ma, mb, mc, C.c_void_p(c.data.ptr), C.c_int(m), C.c_int(n), C.c_int(k),
                C.c_longlong(ldc), C.c_int(tm), C.c_int(tn),
                C.c_int(group_m or self.group_m), C.c_int(int(store)), C.c_int(nb),
                C.c_int(batched[0]), C.c_int(batched[1]),
                C.c_longlong(c.strides[0] // s if nb > 1 else 0)]  # fmt: skip
        if stream is None:
            stream = self.cp.cuda.get_current_stream().ptr
        self.drv.call(self.fn.ptr, grid, self.threads, self.smem, stream, args)


def device_info(cp: Any) -> tuple[int, str, int]:
    """(device id, compute capability, multiprocessors) of the current device, looked up once."""
    dev = cp.cuda.runtime.getDevice()
    if dev not in _DEVICES:
        d = cp.cuda.Device(dev)
        _DEVICES[dev] = (d.compute_capability, int(d.attributes["MultiProcessorCount"]))
    return (dev, *_DEVICES[dev])


def kernel(cp: Any, dtype: str, cfg: dict[str, int], dev: int, sms: int) -> HopperKernel:
    """The build for ``dtype`` and ``cfg`` on device ``dev`` (one per set of defines)."""
    defs = defines(dtype, cfg)
    key = (tuple(sorted(defs.items())), dev)
    kern = _KERNELS.get_or_make(key, lambda: HopperKernel(cp, defs, sms, cfg["group_m"]))
    return kern


def tma_operand(cp: Any, x: Any) -> Any:
    """``x`` itself when TMA can read it in place, else a copy into 16-byte aligned rows."""
    if tma_ready(x.shape, x.strides, x.data.ptr, x.itemsize):
        return x
    rows, cols = x.shape
    y = cp.empty((rows, padded_ld(cols, x.itemsize)), x.dtype)[:, :cols]
    y[...] = x
    return y


def run(cp: Any, plan: Any, a: Any, b: Any, out: Any, cfg: dict[str, int] | None = None,
        cc: str | None = None) -> None:  # fmt: skip
    """``out[...] = a @ b`` for 2-D 16-bit CuPy arrays (bfloat16 as uint16 words), or float32
    ones of a TF32 plan, any strides, with the Hopper kernel (``cfg``: :func:`config` of the
    plan unless given)."""
    dcc = device_info(cp)[1]
    if not str(cc or dcc).startswith("9"):
        raise ValueError(f"hopper_gemm is sm_90a code: compute capability 9.x, not {dcc}")
    (m, k), n = a.shape, b.shape[1]
    if not m or not n:
        return
    if not k:
        out.fill(0)
        return
    plain = stores_in_place(m, n, *out.strides, out.itemsize)
    b_in = b if plan.dtype == hplan.TF32 else tma_operand(cp, b)  # TF32: the pack reads any
    launch_into(cp, plan, tma_operand(cp, a), b_in, out, plain, (a, b), cfg)


def stores_in_place(m: int, n: int, row: int, col: int, s: int) -> bool:
    """Whether an m x n result of ``s``-byte elements is stored straight into an array of these
    row and column strides (bytes): unit columns, rows of whole elements that do not overlap."""
    return (col == s or n == 1) and (m == 1 or (row % s == 0 and row >= s * n))


def launch_into(cp: Any, plan: Any, a: Any, b: Any, out: Any, plain: bool, inputs: tuple,
                cfg: dict[str, int] | None = None) -> None:  # fmt: skip
    """One launch of the plan's build: ``out[...] = a @ b`` (``a``, ``b`` TMA-ready, 2-D or
    stacks; TF32: ``b`` as the caller has it, packed to B^T first on the same stream), into
    ``out`` itself where ``plain`` (its layout the kernel stores) and it overlaps none of
    ``inputs`` (the caller's operands), else into a fresh array copied to it."""
    dev, _, sms = device_info(cp)
    cfg = cfg or config(plan)
    kern = kernel(cp, plan.dtype, cfg, dev, sms)
    plain = plain and not any(cp.may_share_memory(out, x) for x in inputs)
    c = out if plain else cp.empty(out.shape, out.dtype)
    if plan.dtype == hplan.TF32:
        b = hopper_tf32.pack(cp, kern, b, dev)
    kern(a, b, c, group_m=cfg["group_m"])
    if c is not out:
        out[...] = c
