"""TF32 on the Hopper kernel (``kernels/hopper_gemm.cu``, DTYPE 3): the host side of the B^T pack.

TF32 ``wgmma`` (m64nNk8) has no transpose bit, so both of its shared-memory operands are
K-major: B is packed once per call by the kernel's ``hopper_tf32_pack_bt`` into B^T (N x Kp
floats, Kp = K rounded up to 4 so rows start 16-byte aligned, rounded to TF32 with
``cvt.rna``), which TMA then loads like A. The pack reads B with any strides (so B is never
copied first), one matrix or a stack one stride apart; a B shared by a batch is packed once.
It runs on the current stream, before the GEMM that reads it (same stream: ordered).

The packed B^T lives in a scratch buffer kept per (device, stream, matrices, N, Kp)
(:data:`SCRATCH`, a few entries): a product seen before reuses it, and its address, so the
tensor map made over it (cached by address) is found again. A (float32, read in place by TMA
and rounded in registers by the kernel) and C (float32, from registers) need nothing here.
On by default on 9.x (``tiledmm.planner.hopper.runs``): ``TILEDMM_HOPPER_TF32=0`` or a plan's
option ``hopper`` 0 keeps the earlier route.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tiledmm.model.hopper import packed_k
from tiledmm.util.lru import LRUCache

__all__ = ["PACK", "BLOCK", "SCRATCH", "pack_grid", "pack_args", "scratch", "pack"]

#: the pack kernel's entry in ``hopper_gemm.cu`` (built with DTYPE 3)
PACK = "hopper_tf32_pack_bt"
#: its block: 32 x 8 threads move a 32 (K) x 64 (N) tile
BLOCK = (32, 8, 1)
#: packed B^T buffers by (device, stream, matrices, N, Kp)
SCRATCH: LRUCache[Any] = LRUCache(4)


def pack_grid(n: int, kp: int, batch: int = 1) -> tuple[int, int, int]:
    """Grid of the pack: 64 rows of B^T x 32 K-columns per block, one z per matrix."""
    return -(-n // 64), -(-kp // 32), batch


def pack_args(b: Any, bt: Any, k: int, n: int, kp: int) -> tuple:
    """The pack's arguments (b, bt, k, n, ldb, sb, b_bs, kp, bt_bs): ``b`` (K x N, or a stack
    of them one stride apart: 3-D with a non-zero first stride) at its own strides in elements,
    into ``bt`` (matrices x N x Kp, C-contiguous)."""
    s = b.itemsize
    stacked = b.ndim == 3 and b.strides[0] != 0
    return (b, bt, np.int32(k), np.int32(n), np.int64(b.strides[-2] // s),
            np.int64(b.strides[-1] // s), np.int64(b.strides[0] // s if stacked else 0),
            np.int32(kp), np.int64(n * kp))  # fmt: skip


def scratch(cp: Any, dev: int, batch: int, n: int, kp: int) -> Any:
    """The (batch, N, Kp) float32 buffer of B^T for the current stream of device ``dev``."""
    stream = getattr(cp.cuda.get_current_stream(), "ptr", 0)
    key = (dev, stream, batch, n, kp)
    return SCRATCH.get_or_make(key, lambda: cp.empty((batch, n, kp), np.float32))


def pack(cp: Any, kern: Any, b: Any, dev: int) -> Any:
    """B^T of ``b`` (K x N float32, 2-D or a 3-D stack; a zero first stride: one matrix
    shared by the batch) packed by ``kern.pack`` on the current stream: an (N x K) view, or
    (matrices x N x K), of the scratch buffer, rows Kp floats apart (TMA-ready)."""
    if b.ndim == 3 and b.strides[0] == 0:
        b = b[0]
    k, n = b.shape[-2:]
    kp = packed_k(k)
    nb = b.shape[0] if b.ndim == 3 else 1
    bt = scratch(cp, dev, nb, n, kp)
    kern.pack(pack_grid(n, kp, nb), BLOCK, pack_args(b, bt, k, n, kp))
    return bt[:, :, :k] if b.ndim == 3 else bt[0, :, :k]
