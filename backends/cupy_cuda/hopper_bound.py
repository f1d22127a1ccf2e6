"""The Hopper 16-bit kernel's pre-bound launch (issue 38): what the hot paths (``tiledmm.matmul``
seen before, the torch path) call for a plan of the ``mma`` family that :mod:`.hopper` runs.

A decode product (8 x 14336 x 4096 in float16) runs in about 25 us on the GPU; the general path
(:func:`.hopper.run`: the plan's configuration and build looked up, both operands checked for
TMA, the output checked against both inputs, three maps found, sixteen ctypes arguments made)
spends more than that on the host per call. :class:`Bound` does that work once per plan: the
build, the grid, the argument block for ``cuLaunchKernel`` with its scalars in place; a call
finds the operands' tensor maps by address (made once per address) and launches. It takes the
plain case only: C-contiguous operands whose rows and bases are 16-byte aligned and a fresh
C-contiguous result; anything else returns False and the caller runs the general path.
Operands whose rows are not a multiple of 16 bytes (K or N not a multiple of 8) are copied
into a scratch of aligned rows by one 2-D memcpy on the call's stream (TMA reads rows at
16-byte strides), one scratch per stream, so their maps are made once too: the general path's
per-call padded copy and planning cost 1000x3000x777 about 120 us of host time on the H100.
TF32 plans (float32) are not bound (:func:`bind` gives None): they take the general
path, which packs B^T before the GEMM (``hopper_tf32``).
"""

from __future__ import annotations

import ctypes as C
from typing import Any

from . import hopper

__all__ = ["Bound", "bind", "MAPS_PER_ROLE"]

#: tensor maps a bound launch keeps per operand (by address; the oldest go first)
MAPS_PER_ROLE = 8


def bind(cp: Any, plan: Any) -> Bound | None:
    """The bound launch of a Hopper plan on the current device, or None (an empty product, a
    device or plan the Hopper kernel does not take: ``hopper.takes``; a TF32 plan: the general
    path runs it)."""
    if not (plan.m and plan.n and plan.k) or plan.dtype not in hopper.DTYPES:
        return None
    dev, cc, sms = hopper.device_info(cp)
    if not hopper.takes(plan, cc):
        return None
    return Bound(cp, plan, dev, sms)


class Bound:
    """``bound(a, b, c, pa, pb, stream)``: ``c = a @ b`` for row-major ``a`` (m x k) at address
    ``pa``, ``b`` (k x n) at ``pb`` and a fresh row-major ``c`` (m x n) overlapping neither;
    ``a``, ``b``, ``c`` are addresses here too (:attr:`pointer` is ``int``); ``stream`` an object
    whose ``.ptr`` is the raw handle (None: CuPy's current stream). False, launching nothing,
    where a row or a base is not 16-byte aligned (TMA's rule)."""

    __slots__ = ("cp", "kern", "dev", "pad", "scratch", "store", "grid", "argv", "cptr", "maps",
                 "keep")  # fmt: skip

    pointer = int

    def __init__(self, cp: Any, plan: Any, dev: int, sms: int) -> None:
        m, n, k = plan.m, plan.n, plan.k
        cfg = hopper.config(plan)
        kern = hopper.kernel(cp, plan.dtype, cfg, dev, sms)
        self.cp, self.kern, self.dev = cp, kern, dev
        # TMA: row strides of 16 bytes' multiples (a single row has none): A's and B's other
        # rows go through a scratch of aligned rows (_aligned)
        self.pad = (m > 1 and k % 8 != 0, k > 1 and n % 8 != 0)
        self.scratch: dict[int, tuple] = {}
        self.store = kern.epi and (m == 1 or n % 8 == 0)
        tm, tn = hopper.tile_counts(m, n, kern.bm, kern.bn, kern.cluster)
        self.grid = hopper.grid_size(tm, tn, kern.cluster, kern.slots)
        self.cptr = C.c_void_p(0)
        scalars = [self.cptr, C.c_int(m), C.c_int(n), C.c_int(k), C.c_longlong(n), C.c_int(tm),
                   C.c_int(tn), C.c_int(cfg["group_m"]), C.c_int(int(self.store)), C.c_int(1),
                   C.c_int(0), C.c_int(0), C.c_longlong(0)]  # fmt: skip
        self.argv = (C.c_void_p * (3 + len(scalars)))(0, 0, 0, *(C.addressof(s) for s in scalars))
        self.keep = scalars  # the argument block points into these
        # (rows, columns, row elements, box rows) of A, B, C: a map per address
        pad_a, pad_b = self.pad
        lda, ldb = hopper.padded_ld(k) if pad_a else k, hopper.padded_ld(n) if pad_b else n
        self.maps = tuple(({}, shape) for shape in ((m, k, lda, kern.bm), (k, n, ldb, 64),
                                                    (m, n, n, 64)))  # fmt: skip

    def _map(self, role: int, ptr: int) -> int:
        cache, (rows, cols, ld, box) = self.maps[role]
        got = cache.get(ptr)
        if got is None:
            if len(cache) >= MAPS_PER_ROLE:
                cache.pop(next(iter(cache)))
            got = cache[ptr] = self.kern.drv.tensor_map(ptr, rows, cols, ld * 2, box)
        return got[1]

    def _aligned(self, h: int, pa: int, pb: int) -> tuple[int, int]:
        """(A, B addresses) to read: the operands, or for those with unaligned rows this
        stream's scratch copy of them (one ``cudaMemcpy2DAsync`` each, ordered before the
        launch on the same stream)."""
        bufs = self.scratch.get(h)
        if bufs is None:
            if len(self.scratch) >= MAPS_PER_ROLE:
                self.scratch.pop(next(iter(self.scratch)))
            bufs = self.scratch[h] = tuple(
                self.cp.empty((rows, ld), "uint16") if pad else None
                for pad, (_, (rows, _, ld, _)) in zip(self.pad, self.maps[:2], strict=True)
            )
        rt = self.cp.cuda.runtime
        got = []
        for pad, p, buf, (_, (rows, cols, ld, _)) in zip(
            self.pad, (pa, pb), bufs, self.maps[:2], strict=True
        ):
            if pad:
                rt.memcpy2DAsync(buf.data.ptr, 2 * ld, p, 2 * cols, 2 * cols, rows,
                                 rt.memcpyDeviceToDevice, h)  # fmt: skip
                p = buf.data.ptr
            got.append(p)
        return got[0], got[1]

    def __call__(self, a: int, b: int, c: int, pa: int, pb: int, stream: Any = None) -> bool:
        pad_a, pad_b = self.pad
        if ((0 if pad_a else pa) | (0 if pad_b else pb) | c) % 16:
            return False
        h = (stream or self.cp.cuda.get_current_stream()).ptr
        if pad_a or pad_b:
            pa, pb = self._aligned(h, pa, pb)
        argv = self.argv
        argv[0] = self._map(0, pa)
        argv[1] = self._map(1, pb)
        argv[2] = self._map(2, c) if self.store else argv[0]
        self.cptr.value = c
        kern = self.kern
        kern.drv.launch_argv(kern.fn.ptr, self.grid, kern.threads, kern.smem, h, argv)
        return True

    def arrays(self, a: Any, b: Any, c: Any) -> bool:
        """``self(...)`` for CuPy arrays: False (nothing launched) unless ``a`` and ``b`` are
        C-contiguous (``c``, a fresh array, is)."""
        if not (a._c_contiguous and b._c_contiguous):
            return False
        pa, pb, pc = a.data.ptr, b.data.ptr, c.data.ptr
        return self(pa, pb, pc, pa, pb)
