"""Numba CPU kernels for the three families (imported lazily: compiling happens here).

All kernels take ``(A, B, C, BM, BN, BK, TN)`` with A (M, K), B (K, N), C (M, N) of any layout,
write every element of C, and use ``parallel=True`` with ``prange`` over the plan's grid of
BM x BN blocks (a block runs on one core, as the planner models a CPU). ``fastmath`` stays off:
results are IEEE (no reassociation, no FMA contraction), so NaN and Inf propagate as in NumPy.

- naive:    each output is a dot product of a row of A and a column of B read straight from
            the operands (no packing, no reuse between outputs).
- tiled:    cache blocking: A (BM x BK) and B (BK x BN) tiles are packed, zero-padded, into
            contiguous buffers; a BM x BN accumulator tile takes rank-1 updates whose inner
            loop over N is contiguous and vectorized. Every multiply-add loads and stores C.
- register: the same blocking plus a 4 x TN micro-tile: 4 rows of A times 4 K-steps (16
            values held in registers) update 4 rows of the C tile per pass, so each C element
            is loaded and stored once per 4 K-steps and each B value feeds 4 rows.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange, types

from . import MICRO_ROWS  # TM of the register family (the unrolled micro-tile height)

__all__ = ["kernel", "MICRO_ROWS"]

_OPTS = dict(parallel=True, fastmath=False, cache=True, nogil=True)


def _naive(A, B, C, BM, BN, BK, TN):
    M, K = A.shape
    N = B.shape[1]
    gx = (N + BN - 1) // BN
    for blk in prange(gx * ((M + BM - 1) // BM)):
        i0, j0 = _origin_j(blk, gx, BM, BN)
        for i in range(i0, min(i0 + BM, M)):
            for j in range(j0, min(j0 + BN, N)):
                s = A.dtype.type(0)
                for p in range(K):
                    s += A[i, p] * B[p, j]
                C[i, j] = s


def _origin(blk, gx, BM, BN):
    """Top-left element (row, column) of block ``blk`` in a grid ``gx`` blocks wide."""
    return (blk // gx) * BM, (blk % gx) * BN


def _pack(A, B, i0, j0, k0, Ap, Bp):
    """Copy A[i0:, k0:] and B[k0:, j0:] into the tile buffers, zero-filling past the edges."""
    M, K = A.shape
    N = B.shape[1]
    bm, bk = Ap.shape
    bn = Bp.shape[1]
    h, kc, w = min(bm, M - i0), min(bk, K - k0), min(bn, N - j0)
    for i in range(bm):
        for p in range(bk):
            Ap[i, p] = A[i0 + i, k0 + p] if (i < h and p < kc) else 0
    for p in range(bk):
        for j in range(bn):
            Bp[p, j] = B[k0 + p, j0 + j] if (p < kc and j < w) else 0


def _store(C, Cb, i0, j0):
    M, N = C.shape
    for i in range(min(Cb.shape[0], M - i0)):
        for j in range(min(Cb.shape[1], N - j0)):
            C[i0 + i, j0 + j] = Cb[i, j]


def _tiled(A, B, C, BM, BN, BK, TN):
    M, K = A.shape
    N = B.shape[1]
    gx = (N + BN - 1) // BN
    for blk in prange(gx * ((M + BM - 1) // BM)):
        i0, j0 = _origin_j(blk, gx, BM, BN)
        Ap = np.empty((BM, BK), A.dtype)
        Bp = np.empty((BK, BN), A.dtype)
        Cb = np.zeros((BM, BN), A.dtype)
        for k0 in range(0, K, BK):
            _pack_j(A, B, i0, j0, k0, Ap, Bp)
            for i in range(BM):
                c = Cb[i]
                for p in range(BK):
                    a = Ap[i, p]
                    b = Bp[p]
                    for j in range(BN):
                        c[j] += a * b[j]
        _store_j(C, Cb, i0, j0)


def _packing(A, B, C, BM, BN, BK, TN):
    """The tiled and register kernels' packing phase alone, over the same blocks and K steps
    (C untouched): ``benches/studies/numba_cpu_split.py`` times it to split a kernel's time into
    packing and loop (docs/model.md, ``NUMBA_PACK_CLOCKS``)."""
    M, K = A.shape
    N = B.shape[1]
    gx = (N + BN - 1) // BN
    for blk in prange(gx * ((M + BM - 1) // BM)):
        i0, j0 = _origin_j(blk, gx, BM, BN)
        Ap = np.empty((BM, BK), A.dtype)
        Bp = np.empty((BK, BN), A.dtype)
        for k0 in range(0, K, BK):
            _pack_j(A, B, i0, j0, k0, Ap, Bp)


def _register(A, B, C, BM, BN, BK, TN):
    M, K = A.shape
    N = B.shape[1]
    gx = (N + BN - 1) // BN
    kq = (BK + 3) // 4 * 4  # K tile rounded up to the 4-step unroll (extra steps are zeros)
    for blk in prange(gx * ((M + BM - 1) // BM)):
        i0, j0 = _origin_j(blk, gx, BM, BN)
        Ap = np.zeros((BM, kq), A.dtype)
        Bp = np.zeros((kq, BN), A.dtype)
        Cb = np.zeros((BM, BN), A.dtype)
        for k0 in range(0, K, BK):
            _pack_j(A, B, i0, j0, k0, Ap[:, :BK], Bp[:BK])
            for i in range(0, BM, 4):
                for jj in range(0, BN, TN):
                    c0 = Cb[i, jj : jj + TN]
                    c1 = Cb[i + 1, jj : jj + TN]
                    c2 = Cb[i + 2, jj : jj + TN]
                    c3 = Cb[i + 3, jj : jj + TN]
                    for p in range(0, kq, 4):
                        a00, a01, a02, a03 = Ap[i, p], Ap[i, p + 1], Ap[i, p + 2], Ap[i, p + 3]
                        a10, a11, a12, a13 = (
                            Ap[i + 1, p],
                            Ap[i + 1, p + 1],
                            Ap[i + 1, p + 2],
                            Ap[i + 1, p + 3],
                        )
                        a20, a21, a22, a23 = (
                            Ap[i + 2, p],
                            Ap[i + 2, p + 1],
                            Ap[i + 2, p + 2],
                            Ap[i + 2, p + 3],
                        )
                        a30, a31, a32, a33 = (
                            Ap[i + 3, p],
                            Ap[i + 3, p + 1],
                            Ap[i + 3, p + 2],
                            Ap[i + 3, p + 3],
                        )
                        b0 = Bp[p, jj : jj + TN]
                        b1 = Bp[p + 1, jj : jj + TN]
                        b2 = Bp[p + 2, jj : jj + TN]
                        b3 = Bp[p + 3, jj : jj + TN]
                        for j in range(TN):
                            x0, x1, x2, x3 = b0[j], b1[j], b2[j], b3[j]
                            c0[j] += a00 * x0 + a01 * x1 + a02 * x2 + a03 * x3
                            c1[j] += a10 * x0 + a11 * x1 + a12 * x2 + a13 * x3
                            c2[j] += a20 * x0 + a21 * x1 + a22 * x2 + a23 * x3
                            c3[j] += a30 * x0 + a31 * x1 + a32 * x2 + a33 * x3
        _store_j(C, Cb, i0, j0)


_origin_j = njit(cache=True, nogil=True)(_origin)
_pack_j = njit(cache=True, nogil=True)(_pack)
_store_j = njit(cache=True, nogil=True)(_store)
_FUNCS = {"naive": _naive, "tiled": _tiled, "register": _register, "packing": _packing}
_compiled: dict = {}


def kernel(family: str, dtype: np.dtype):
    """The compiled kernel for a family (or ``"packing"``, the packing phase alone) and dtype:
    one layout-generic signature each, whose A
    and B are read-only arrays, so writable, read-only (``setflags(write=False)``, read-only
    memmaps) and broadcast operands all convert to it (Numba: writable -> read-only is safe)."""
    key = (family, np.dtype(dtype).name)
    fn = _compiled.get(key)
    if fn is None:
        t = {"float32": types.float32, "float64": types.float64}[key[1]]
        ab = types.Array(t, 2, "A", readonly=True)
        sig = types.void(ab, ab, types.Array(t, 2, "A"), *(types.intp,) * 4)
        fn = _compiled[key] = njit(sig, **_OPTS)(_FUNCS[family])
    return fn
