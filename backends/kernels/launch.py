"""The one launch path for the shared GEMM sources: CuPy and OpenCL differ only in an adapter.

:func:`run` does the steps every launch takes, in this order: read each operand's layout
(buffer, byte offset, byte strides: no copy), check that the kernels' 32-bit indices reach
every element (before anything is allocated or copied), copy operands without unit column
stride into contiguous ones, pick a temporary for an ``out`` that is strided or overlaps an
input, copy odd leading dimensions into 16-byte-aligned rows where ``kernels.pad_pays``, look the
compiled launch up, enqueue it, and copy the temporary back into ``out``.

Batches (:func:`run_batched`): one launch walks the batch along the grid's third dimension,
with per-operand element strides (0 for a broadcast operand) over at most two coalesced batch
dimensions (more: one launch per outer index). Split-K (``plan.options["split_k"]`` = S > 1):
the S K-slices write partial products into a workspace, then ``splitk_reduce`` sums them into
``out`` (one more launch), or, for the gemv path's ``onepass`` option, by the last group of
each output block in the same launch.

An adapter (:class:`Adapter`) supplies the array model: ``layout`` (no copy), ``contiguous``,
``empty``, ``aligned_copy``, ``copy``, ``device_id`` (hashable), ``enqueue`` (a GEMM launch
with its batch descriptor, and ``tail``: the parameters a source appends, ints or buffers),
``reduce`` (the split-K reduction) and ``counters`` (at least ``size`` unsigned ints that are
zero whenever a launch starts: the one-pass gemv's, which every launch leaves zero, kept per
queue or stream so that concurrent launches never share them). Compiled
launches live in :class:`Launches`, a bounded cache keyed by ``(plan.launch_key, device id,
aligned)`` whose misses call the backend's ``build(plan, aligned)`` (compile: the other half).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Hashable
from typing import Any, NamedTuple, Protocol

from tiledmm.util.lru import LRUCache

from . import defs as K
from .defs import INT_MAX, aligned_ld, itemsize

__all__ = [
    "Layout", "Adapter", "Launches", "run", "run_batched", "leading_dim", "check_extent",
    "overlap", "batch_dims", "NOBATCH", "MAX_Z",
]  # fmt: skip

#: The batch descriptor of a single product: (grid z, nb1, sA0, sA1, sB0, sB1, sC0, sC1, sCk).
NOBATCH = (1, 1, 0, 0, 0, 0, 0, 0, 0)
MAX_Z = 65535  # CUDA's gridDim.z limit (OpenCL devices allow at least as many)


class Layout(NamedTuple):
    """Where a 2-D operand lives: ``handle`` is what the kernel takes (an array or a buffer),
    ``base`` identifies the allocation (for overlap), ``start`` is its first byte within that
    allocation (address or offset: its remainder mod 16 is the alignment), ``s0``/``s1`` are
    byte strides and ``offset`` the element offset the kernel adds to ``handle``. Adapters
    may return a plain tuple in this order (the per-call path indexes it). ``layout`` also
    takes an N-D array (a batch): then it describes the first matrix (strides of the last two
    dimensions, the address of the first element)."""

    handle: Any
    base: Hashable
    start: int
    s0: int
    s1: int
    offset: int


class Adapter(Protocol):
    """One backend's array model (see the module docstring)."""

    def layout(self, x: Any) -> Layout: ...
    def contiguous(self, x: Any) -> Any: ...
    def empty(self, shape: tuple[int, int], dtype: Any) -> Any: ...
    def aligned_copy(self, x: Any, ld: int, role: str) -> Any: ...
    def copy(self, src: Any, dst: Any) -> None: ...
    def device_id(self) -> Hashable: ...
    def enqueue(self, call: Any, m: int, n: int, k: int, a: Any, oa: int, lda: int, b: Any,
                ob: int, ldb: int, c: Any, oc: int, ldc: int,
                bt: tuple = NOBATCH, tail: tuple = ()) -> None: ...  # fmt: skip
    def counters(self, size: int) -> Any: ...
    def reduce(self, m: int, n: int, s: int, w: Any, sw: int, c: Any, oc: int, ldc: int,
               z: int, nb1: int, sc0: int, sc1: int) -> None: ...  # fmt: skip


class Launches:
    """Compiled launches, at most ``maxsize``, keyed by ``(plan.launch_key, device, aligned,
    single)``: ``single`` launches (one product, no K slices) are built with the batch prologue
    compiled out (``NO_BATCH``; the prologue cost the 128x128 register kernel 8% at 4096^3).

    The last plan is also remembered by identity (holding it, so its id cannot be reused): a
    loop over one shape skips building the key."""

    def __init__(self, build: Callable[[Any, bool, bool], Any], maxsize: int = 256) -> None:
        self._build = build
        self.cache: LRUCache[Any] = LRUCache(maxsize)
        self._last: tuple | None = None

    def get(self, plan: Any, device: Hashable, aligned: bool, single: bool = False) -> Any:
        last = self._last
        if (last is not None and last[0] is plan and last[1] == device and last[2] is aligned
                and last[3] is single):  # fmt: skip
            return last[4]
        key = (plan.launch_key, device, aligned, single)
        call = self.cache.get_or_make(key, lambda: self._build(plan, aligned, single))
        self._last = (plan, device, aligned, single, call)
        return call


def leading_dim(rows: int, cols: int, s0: int, s1: int, size: int) -> int | None:
    """The leading dimension in elements if an operand with byte strides ``s0``, ``s1`` is
    row-major with unit column stride (what the kernels read), else None."""
    if cols > 1 and s1 != size:
        return None
    if rows <= 1:
        return max(cols, 1)
    if s0 <= 0 or s0 % size or s0 // size < cols:
        return None
    return s0 // size


def check_extent(name: str, rows: int, cols: int, offset: int, ld: int) -> None:
    """Raise ValueError when element ``offset + (rows-1)*ld + cols-1`` is past 32-bit indexing."""
    if rows and cols and offset + (rows - 1) * ld + cols > INT_MAX:
        raise ValueError(
            f"operand {name} ({rows}x{cols}) is too large for the 32-bit indexing of the tiledmm "
            f"GEMM kernels (it spans more than 2**31-1 elements): use backend='numpy' (or the "
            "array library's own matmul), or split the product into blocks"
        )


def overlap(x: Layout, xs: tuple[int, int], y: Layout, ys: tuple[int, int], size: int) -> bool:
    """Whether two operands of shapes ``xs``, ``ys`` share bytes of one allocation."""
    if x[1] != y[1] or not (xs[0] and xs[1] and ys[0] and ys[1]):
        return False
    x1 = x[2] + (xs[0] - 1) * abs(x[3]) + (xs[1] - 1) * abs(x[4]) + size
    y1 = y[2] + (ys[0] - 1) * abs(y[3]) + (ys[1] - 1) * abs(y[4]) + size
    return x[2] < y1 and y[2] < x1


def run(ad: Adapter, launches: Launches, plan: Any, a: Any, b: Any, out: Any) -> None:
    """``out[...] = a @ b`` with ``plan``'s kernel: the steps of the module docstring.

    The common case (all three row-major, in range, no overlap) takes no copy and no extra
    call; everything else goes through :func:`_prepare`."""
    m, k = a.shape
    n = b.shape[1]
    s = 8 if plan.dtype == "float64" else 4
    if "split_k" in plan.options:
        return _prepare(ad, launches, plan, a, b, out)
    la, lb, lc = ad.layout(a), ad.layout(b), ad.layout(out)
    lda, ldb, ldc = leading_dim(m, k, la[3], la[4], s), leading_dim(k, n, lb[3], lb[4], s), \
        leading_dim(m, n, lc[3], lc[4], s)  # fmt: skip
    if lda is None or ldb is None or ldc is None:
        return _prepare(ad, launches, plan, a, b, out)
    c0 = lc[2]  # byte span of out, then: does A's or B's span cross it?
    c1 = c0 + ((m - 1) * ldc + n) * s
    if (
        la[5] + m * lda > INT_MAX
        or lb[5] + k * ldb > INT_MAX
        or lc[5] + m * ldc > INT_MAX
        or m
        and n
        and k
        and (
            lc[1] == la[1]
            and la[2] < c1
            and c0 < la[2] + ((m - 1) * lda + k) * s
            or lc[1] == lb[1]
            and lb[2] < c1
            and c0 < lb[2] + ((k - 1) * ldb + n) * s
        )
    ):
        return _prepare(ad, launches, plan, a, b, out)  # fmt: skip
    vw = 16 // s
    odd_a, odd_b = bool(lda % vw or la[2] % 16), bool(ldb % vw or lb[2] % 16)
    aligned = not (odd_a or odd_b)
    if not aligned and K.pad_pays(plan, odd_a, odd_b):
        return _prepare(ad, launches, plan, a, b, out)
    ad.enqueue(launches.get(plan, ad.device_id(), aligned, True), m, n, k,
               la[0], la[5], lda, lb[0], lb[5], ldb, lc[0], lc[5], ldc)  # fmt: skip


def _prepare(ad: Adapter, launches: Launches, plan: Any, a: Any, b: Any, out: Any) -> None:
    """The general case: size checks first, then copies, temporaries, aligned rows."""
    m, k = a.shape
    n = b.shape[1]
    s = itemsize(plan.dtype)
    vw = 16 // s
    la, lb, lc = ad.layout(a), ad.layout(b), ad.layout(out)
    lda, ldb, ldc = leading_dim(m, k, la[3], la[4], s), leading_dim(k, n, lb[3], lb[4], s), \
        leading_dim(m, n, lc[3], lc[4], s)  # fmt: skip
    # 32-bit indices: every extent the kernel will see, before any allocation or copy
    check_extent("A", m, k, la[5] if lda else 0, lda or max(k, 1))
    check_extent("B", k, n, lb[5] if ldb else 0, ldb or max(n, 1))
    check_extent("out", m, n, lc[5] if ldc else 0, ldc or max(n, 1))
    if lda is None:
        a = ad.contiguous(a)
        la, lda = ad.layout(a), max(k, 1)
    if ldb is None:
        b = ad.contiguous(b)
        lb, ldb = ad.layout(b), max(n, 1)
    c = out
    if ldc is None or overlap(lc, (m, n), la, (m, k), s) or overlap(lc, (m, n), lb, (k, n), s):
        c = ad.empty((m, n), plan.dtype)
        lc, ldc = ad.layout(c), max(n, 1)
    odd_a, odd_b = bool(lda % vw or la[2] % 16), bool(ldb % vw or lb[2] % 16)
    aligned = not (odd_a or odd_b)
    if not aligned and K.pad_pays(plan, odd_a, odd_b):  # odd leading dimensions: aligned rows
        if odd_a:
            check_extent("A", m, k, 0, aligned_ld(k, vw))
            a = ad.aligned_copy(a, aligned_ld(k, vw), "a")
            la, lda = ad.layout(a), aligned_ld(k, vw)
        if odd_b:
            check_extent("B", k, n, 0, aligned_ld(n, vw))
            b = ad.aligned_copy(b, aligned_ld(n, vw), "b")
            lb, ldb = ad.layout(b), aligned_ld(n, vw)
        aligned = True
    _launch(ad, launches, plan, aligned, (m, n, k), la, lda, lb, ldb, lc, ldc, NOBATCH)
    if c is not out:
        ad.copy(c, out)


def _launch(ad: Adapter, launches: Launches, plan: Any, aligned: bool, mnk: tuple,
            la: Any, lda: int, lb: Any, ldb: int, lc: Any, ldc: int,
            bt: tuple) -> None:  # fmt: skip
    """One GEMM launch over ``bt``'s batch; with split-K, into a workspace, then reduced."""
    m, n, k = mnk
    sk = K.split_k(plan)
    call = launches.get(plan, ad.device_id(), aligned, single=sk == 1 and bt is NOBATCH)
    if sk == 1 or not (k or K.onepass(plan)):  # (K = 0: the slices write zeros into out, sCk 0)
        bt = bt if sk == 1 else (bt[0] * sk,) + tuple(bt[1:])
        ad.enqueue(call, m, n, k, la[0], la[5], lda, lb[0], lb[5], ldb, lc[0], lc[5], ldc, bt)
        return
    z, nb1 = bt[0], bt[1]
    per = z * m * n  # one slice: z contiguous m x n partial products
    check_extent("split-K workspace", sk * z * m, n, 0, n)
    w = ad.empty((sk * z * m, n), plan.dtype)
    lw = ad.layout(w)
    wt = (z * sk, nb1, bt[2], bt[3], bt[4], bt[5], nb1 * m * n, m * n, per)
    if K.onepass(plan):  # the last group of each output block sums the slices into out
        (gx, gy), _ = K.launch_shape(plan)
        tail = (lc[0], lc[5], ldc, bt[6], bt[7], ad.counters(gx * gy * z))
        ad.enqueue(call, m, n, k, la[0], la[5], lda, lb[0], lb[5], ldb, lw[0], lw[5], n, wt,
                   tail)  # fmt: skip
        return
    ad.enqueue(call, m, n, k, la[0], la[5], lda, lb[0], lb[5], ldb, lw[0], lw[5], n, wt)
    ad.reduce(m, n, sk, w, per, lc[0], lc[5], ldc, z, nb1, bt[6], bt[7])


def batch_dims(shape: tuple[int, ...], strides: list[list[int]]) -> list[tuple[int, list[int]]]:
    """The batch dimensions of ``shape`` with one element stride per operand, size-1 dimensions
    dropped and neighbours merged wherever every operand allows (outer = inner x size)."""
    dims: list[tuple[int, list[int]]] = []
    for d, size in enumerate(shape):
        if size == 1:
            continue
        st = [s[d] for s in strides]
        if dims:
            osize, ost = dims[-1]
            if all(o == i * size for o, i in zip(ost, st, strict=True)):
                dims[-1] = (osize * size, st)
                continue
        dims.append((size, st))
    return dims


def _batch_strides(shape: tuple, strides: tuple, nd: int, size: int) -> list[int] | None:
    """Element strides of an operand's batch dimensions aligned to ``nd`` result batch
    dimensions (0 where it broadcasts); None when a stride is negative or not whole elements."""
    sh, st = shape[:-2], strides[:-2]
    out = [0] * (nd - len(sh)) + [0 if d == 1 else t for d, t in zip(sh, st, strict=True)]
    if any(t < 0 or t % size for t in out):
        return None
    return [t // size for t in out]


@functools.lru_cache(maxsize=512)
def _batch_layout(sa: tuple, ta: tuple, sb: tuple, tb: tuple, so: tuple, to: tuple, s: int,
                  sk: int) -> tuple | None:  # fmt: skip
    """What a batch's shapes and byte strides alone decide (cached: a loop over one batch
    shape pays for it once): (lda, ldb, ldc, element ends of A, B, out past their first
    element, whether leading dimensions and batch strides keep 16-byte rows, and the launches
    as (element offsets of A, B, out; batch descriptor)); None when only the per-matrix loop
    can run it."""
    m, k = sa[-2:]
    n = sb[-1]
    batch = so[:-2]
    lda, ldb, ldc = leading_dim(m, k, ta[-2], ta[-1], s), leading_dim(k, n, tb[-2], tb[-1], s), \
        leading_dim(m, n, to[-2], to[-1], s)  # fmt: skip
    if not k:  # nothing is read: any leading dimension will do
        lda, ldb = lda or 1, ldb or max(n, 1)
    strides = [_batch_strides(x, t, len(batch), s) for x, t in ((sa, ta), (sb, tb), (so, to))]
    if lda is None or ldb is None or ldc is None or None in strides:
        return None
    # spans (in elements past each operand's first element) for the extent and overlap checks
    span = [sum((d - 1) * t for d, t in zip(batch, st, strict=True)) for st in strides]
    ends = (span[0] + (m - 1) * lda + k, span[1] + (k - 1) * ldb + n, span[2] + (m - 1) * ldc + n)
    vw = 16 // s
    vec = not (lda % vw or ldb % vw) and not any(t % vw for st in strides[:2] for t in st)
    dims = batch_dims(batch, strides)
    inner, outer = dims[-2:], dims[:-2]
    if len(inner) < 2:
        inner = [(1, [0, 0, 0])] * (2 - len(inner)) + inner
    (n0, st0), (n1, st1) = inner
    if n1 * sk > MAX_Z:
        return None
    rows = max(1, MAX_Z // (n1 * sk))  # z0 rows per launch under the grid-z limit
    calls = []
    for idx in itertools.product(*(range(d) for d, _ in outer)):
        off = [sum(i * st[j] for i, (_, st) in zip(idx, outer, strict=True)) for j in range(3)]
        for r0 in range(0, n0, rows):
            o = tuple(off[j] + r0 * st0[j] for j in range(3))
            nz = min(rows, n0 - r0) * n1
            calls.append((o, (nz, n1, st0[0], st1[0], st0[1], st1[1], st0[2], st1[2], 0)))
    return lda, ldb, ldc, ends, vec, tuple(calls)


def run_batched(ad: Adapter, launches: Launches, plan: Any, a: Any, b: Any, out: Any) -> bool:
    """``out[...] = a @ b`` over NumPy's broadcast batch dimensions (``out`` has the full batch
    shape) in one launch per two coalesced batch dimensions; False when the operands are laid
    out in a way only the per-matrix loop handles (matrices not row-major, negative or
    fractional batch strides, out overlapping an input, 32-bit extents exceeded)."""
    m, k = a.shape[-2:]
    n = b.shape[-1]
    if not m or not n or 0 in out.shape[:-2]:
        return True
    s = itemsize(plan.dtype)
    meta = _batch_layout(tuple(a.shape), tuple(a.strides), tuple(b.shape), tuple(b.strides),
                         tuple(out.shape), tuple(out.strides), s, K.split_k(plan))  # fmt: skip
    if meta is None:
        return False
    lda, ldb, ldc, ends, vec, calls = meta
    # layouts of the whole arrays: their first element is the first matrix's (no indexing,
    # which costs a CuPy call per operand: host time that CUDA events around a call include)
    la, lb, lc = ad.layout(a), ad.layout(b), ad.layout(out)
    if la[5] + ends[0] > INT_MAX or lb[5] + ends[1] > INT_MAX or lc[5] + ends[2] > INT_MAX:
        return False
    for lx, e in ((la, ends[0]), (lb, ends[1])):
        if k and lx[1] == lc[1] and lx[2] < lc[2] + ends[2] * s and lc[2] < lx[2] + e * s:
            return False
    aligned = vec and not (la[2] % 16 or lb[2] % 16)
    for o, bt in calls:
        if any(o):
            xa, xb, xc = ((lx[0], lx[1], lx[2], lx[3], lx[4], lx[5] + oj)
                          for lx, oj in zip((la, lb, lc), o, strict=True))  # fmt: skip
        else:
            xa, xb, xc = la, lb, lc
        _launch(ad, launches, plan, aligned, (m, n, k), xa, lda, xb, ldb, xc, ldc, bt)
    return True
