"""Hopper warpgroup-MMA GEMMs for the mma family on CuPy (``kernels/wgmma.cu``): TF32, and
float16 / bfloat16 with float32 sums.

A float32 mma plan (precision "tf32") runs here when its options ask for it: ``wgmma`` 1 (stage
tiles by cp.async from every thread) or 2 (TMA copies by a producer warpgroup; ``cluster`` 2:
two blocks along M share B by multicast), on a compute capability 9.0 device (``sm_90a`` code
runs there only). Other options: ``stages``, ``group_m``, ``wg_m``, ``swizzle``, ``wait1``,
``tf32_round`` (see ``mma_spec.wgmma_defines``); ``block_tile`` is (BM, BN, 32).
``wgmma_fit`` 1: where the plan's tiles would leave more than half the SMs idle, narrower
tiles (BN halved, then BM, down to 64 x 64) until they do not (:func:`fit_tiles`).
float16 / bfloat16 plans with option ``wgmma`` 1 run ``wgmma_gemm_h`` (``block_tile``
(BM, 128 or 256, 64)): no packs (16-bit wgmma reads B N-major), operands copied only where
their rows are not 16-byte aligned (or A's K is not a multiple of 8: zero-padded).

One product is three launches: two pack kernels round A and B^T to TF32 into zero-padded
K-major buffers (TF32 wgmma reads both operands K-major), then the GEMM, which loads without
bounds checks and guards its stores. NVRTC compiles for ``sm_90a`` directly (CuPy's RawModule
adds its own ``-arch``); the TMA kernel's two driver calls CuPy lacks (tensor-map encoding, a
launch with 128-byte by-value parameters) go through ctypes.
"""

from __future__ import annotations

import ctypes as C
from pathlib import Path
from typing import Any

from tiledmm.util.lru import LRUCache

from ..kernels import mma_spec
from . import hopper

__all__ = ["wants", "defines", "fit_tiles", "run", "WgmmaKernel", "HALF"]

SRC = Path(__file__).resolve().parents[1] / "kernels" / "wgmma.cu"
_KERNELS: LRUCache[Any] = LRUCache(16)
#: a plan's build by (plan.launch_key, device): its defines computed once, not per call
_BY_PLAN: LRUCache[Any] = LRUCache(256)


#: 16-bit input dtypes and their ``HALF`` define
HALF = {"float16": 1, "bfloat16": 2}


def wants(plan: Any) -> bool:
    """Whether ``plan`` asks for the wgmma kernel."""
    ok = plan.dtype == "float32" or plan.dtype in HALF
    return ok and int(plan.options.get("wgmma", 0)) > 0


def fit_tiles(bm: int, bn: int, m: int, n: int, sms: int, wg_m: int = 1,
              min_bn: int = 64) -> tuple[int, int]:  # fmt: skip
    """(BM, BN) for an M x N product: the plan's, or narrower (BN halved first, then BM; not
    below 64 x ``min_bn``, BM a multiple of 64 ``wg_m``) while fewer than half of ``sms``
    blocks."""

    def blocks(t: tuple[int, int]) -> int:
        return -(-m // t[0]) * -(-n // t[1])

    t = (bm, bn)
    while 2 * blocks(t) < sms:
        if t[1] > min_bn and t[1] >= t[0]:
            t = (t[0], t[1] // 2)
        elif t[0] > 64 * wg_m and t[0] % (128 * wg_m) == 0:
            t = (t[0] // 2, t[1])
        elif t[1] > min_bn:
            t = (t[0], t[1] // 2)
        else:
            break
    return t


def defines(plan: Any, sms: int = 0) -> dict[str, int]:
    """``wgmma.cu``'s defines for ``plan`` (ValueError for what it can't run); ``sms``: the
    device's multiprocessors, for ``wgmma_fit``."""
    (bm, bn, bk), o = plan.block_tile, plan.options
    half = HALF.get(plan.dtype, 0)
    if not half and o.get("precision") != "tf32":
        raise ValueError("float32 runs on the tensor cores only with precision='tf32'")
    if int(o.get("wgmma_fit", 0)) and sms:
        wg_m = int(o.get("wg_m", 1))
        bm, bn = fit_tiles(bm, bn, plan.m, plan.n, sms, wg_m, 128 if half else 64)
    return mma_spec.wgmma_defines(
        bm, bn, bk, stages=int(o.get("stages", 4)), group_m=int(o.get("group_m", 8)),
        wg_m=int(o.get("wg_m", 1)), tma=int(o["wgmma"]) == 2, cluster=int(o.get("cluster", 1)),
        swizzle=bool(int(o.get("swizzle", 1))), wait1=bool(int(o.get("wait1", 1))),
        tf32_round=int(o.get("tf32_round", 3)), half=half,
    )  # fmt: skip


class _Driver(hopper.Driver):
    """The driver entry points (:class:`.hopper.Driver`), with this kernel's float32 maps."""

    kernel_name = "wgmma_gemm_tma"

    def tensor_map(self, ptr: int, rows: int, cols: int, box_rows: int) -> tuple[Any, int]:
        """(buffer, 64-byte aligned address) of a map of a row-major float32 [rows x cols]:
        boxes of 32 columns x ``box_rows`` rows, 128-byte swizzle."""
        raw = C.create_string_buffer(192)
        addr = (C.addressof(raw) + 63) & ~63
        dim, stride = (C.c_uint64 * 2)(cols, rows), (C.c_uint64 * 1)(cols * 4)
        box, one = (C.c_uint32 * 2)(32, box_rows), (C.c_uint32 * 2)(1, 1)
        # FLOAT32 7, no interleave 0, swizzle 128B 3, L2 promotion 256B 3, OOB fill zeros 0
        rc = self.encode(addr, 7, 2, ptr, dim, stride, box, one, 0, 3, 3, 0)
        if rc:
            raise RuntimeError(f"cuTensorMapEncodeTiled: CUresult {rc}")
        return raw, addr



class WgmmaKernel:
    """One compiled ``wgmma.cu`` build: ``kern(a, b, c)`` is ``c[...] = a @ b`` (TF32)."""

    def __init__(self, cp: Any, defs: dict[str, int]) -> None:
        from cupy.cuda import driver, function

        self.cp, self.defs = cp, defs
        self.bm, self.bn = 64 * defs["WG_M"] * defs["NWG"], defs["BN"]
        self.tma, self.cluster = bool(defs["TMA"]), defs["CLUSTER"]
        self.threads = 128 * (defs["NWG"] + defs["TMA"])
        self.smem = mma_spec.wgmma_smem_bytes(defs)
        src = hopper.source(defs, SRC)
        self.mod = function.Module()
        self.mod.load(hopper.sm90a_cubin(src, "wgmma.cu", ("-ftz=true",)))
        self.half = bool(defs["HALF"])
        name = "wgmma_gemm_h" if self.half else "wgmma_gemm_tma" if self.tma else "wgmma_gemm"
        self.gemm = self.mod.get_function(name)
        if not self.half:
            self.pack_a = self.mod.get_function("tf32_pack_a2")
            self.pack_bt = self.mod.get_function("tf32_pack_bt2")
        attr = getattr(driver, "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES", 8)
        driver.funcSetAttribute(self.gemm.ptr, attr, self.smem)
        self.drv = _Driver() if self.tma else None

    def __call__(self, a: Any, b: Any, c: Any) -> None:
        cp, i32, i64 = self.cp, self.cp.int32, self.cp.int64
        (m, k), n = a.shape, b.shape[1]
        if self.half:
            (a2, lda), (b2, ldb) = _rows8(cp, a, True), _rows8(cp, b, False)
            tm, tn, ldc = -(-m // self.bm), -(-n // self.bn), c.strides[0] // 2
            self.gemm((tm * tn,), (self.threads,), (a2, b2, c, i32(m), i32(n), i32(k), i64(lda),
                      i64(ldb), i64(ldc), i32(tm), i32(tn)), shared_mem=self.smem)  # fmt: skip
            return
        bm = self.bm * self.cluster
        mp, np_, kp = -(-m // bm) * bm, -(-n // self.bn) * self.bn, -(-k // 32) * 32
        ap, bt = cp.empty((mp, kp), cp.float32), cp.empty((np_, kp), cp.float32)
        sa = (i64(a.strides[0] // 4), i64(a.strides[1] // 4))
        sb = (i64(b.strides[0] // 4), i64(b.strides[1] // 4))
        vec = int(a.strides[1] == 4 and a.strides[0] % 16 == 0 and a.data.ptr % 16 == 0)
        self.pack_a((-(-kp // 512), min(mp, 65535)), (128,),
                    (a, ap, i32(m), i32(k), *sa, i32(mp), i32(kp), i32(vec)))  # fmt: skip
        self.pack_bt((np_ // 64, kp // 32), (32, 8), (b, bt, i32(k), i32(n), *sb, i32(np_),
                                                      i32(kp)))  # fmt: skip
        tm, tn, ldc = mp // self.bm, np_ // self.bn, c.strides[0] // 4
        if not self.tma:
            self.gemm((tm * tn,), (self.threads,), (ap, bt, c, i32(m), i32(n), i32(kp), i64(ldc),
                      i32(tm), i32(tn)), shared_mem=self.smem)  # fmt: skip
            return
        d = self.drv
        ma = d.tensor_map(ap.data.ptr, mp, kp, self.bm)
        mb = d.tensor_map(bt.data.ptr, np_, kp, self.bn // self.cluster)
        args = [ma, mb, C.c_void_p(c.data.ptr), C.c_int(m), C.c_int(n), C.c_int(kp),
                C.c_longlong(ldc), C.c_int(tm), C.c_int(tn)]  # fmt: skip
        stream = cp.cuda.get_current_stream().ptr
        d.call(self.gemm.ptr, tm * tn, self.threads, self.smem, stream, args)


def _rows8(cp: Any, x: Any, whole: bool) -> tuple[Any, int]:
    """A 16-bit operand and its row stride (elements) as ``wgmma_gemm_h`` reads it: rows that
    start 16-byte aligned, unit column stride (``whole``: and a multiple of 8 columns, A's K),
    else a zero-padded copy."""
    rows, cols = x.shape
    s0, s1 = x.strides
    if ((s1 == 2 or cols == 1) and s0 > 0 and s0 % 16 == 0 and x.data.ptr % 16 == 0
            and not (whole and cols % 8)):  # fmt: skip
        return x, s0 // 2
    ld = -(-cols // 8) * 8
    y = cp.zeros((rows, ld), x.dtype)
    y[:, :cols] = x
    return y, ld


def _kernel(cp: Any, plan: Any, dev: int, sms: int) -> WgmmaKernel:
    """The build for ``plan`` on device ``dev``: one per distinct set of defines (plans of
    other shapes share it)."""
    defs = defines(plan, sms)
    key = (tuple(sorted(defs.items())), dev)
    return _KERNELS.get_or_make(key, lambda: WgmmaKernel(cp, defs))


def run(cp: Any, plan: Any, a: Any, b: Any, out: Any) -> None:
    """``out[...] = a @ b`` (2-D float32, float16 or bfloat16, any strides) with a wgmma
    plan."""
    dev, cc, sms = hopper.device_info(cp)
    if cc != "90":
        raise ValueError(f"the wgmma kernel is sm_90a code: compute capability 9.0, not {cc}")
    (m, k), n = a.shape, b.shape[1]
    if not m or not n:
        return
    if not k:
        out.fill(0)
        return
    kern = _BY_PLAN.get_or_make((plan.launch_key, dev), lambda: _kernel(cp, plan, dev, sms))
    s0, s1 = out.strides
    es = out.dtype.itemsize
    plain = (s1 == es or n == 1) and (m == 1 or (s0 % es == 0 and s0 >= es * n))
    if kern.half:  # 16-bit: the GEMM reads a and b themselves
        plain = plain and not (cp.may_share_memory(out, a) or cp.may_share_memory(out, b))
    c = out if plain else cp.empty((m, n), out.dtype)  # TF32 reads only packed copies
    kern(a, b, c)
    if c is not out:
        out[...] = c
