"""The one launch path for the shared GEMM sources: CuPy and OpenCL differ only in an adapter.

:func:`run` does the steps every launch takes, in this order: read each operand's layout
(buffer, byte offset, byte strides: no copy), check that the kernels' 32-bit indices reach
every element (before anything is allocated or copied), copy operands without unit column
stride into contiguous ones, pick a temporary for an ``out`` that is strided or overlaps an
input, copy odd leading dimensions into 16-byte-aligned rows where ``kernels.pad_pays``, look the
compiled launch up, enqueue it, and copy the temporary back into ``out``.

An adapter (:class:`Adapter`) supplies the array model: ``layout`` (no copy), ``contiguous``,
``empty``, ``aligned_copy``, ``copy``, ``device_id`` (hashable) and ``enqueue``. Compiled
launches live in :class:`Launches`, a bounded cache keyed by ``(plan.launch_key, device id,
aligned)`` whose misses call the backend's ``build(plan, aligned)`` (compile: the other half).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, NamedTuple, Protocol

from tiledmm.cache import LRUCache

from .. import kernels as K
from . import INT_MAX, aligned_ld, itemsize

__all__ = ["Layout", "Adapter", "Launches", "run", "leading_dim", "check_extent", "overlap"]


class Layout(NamedTuple):
    """Where a 2-D operand lives: ``handle`` is what the kernel takes (an array or a buffer),
    ``base`` identifies the allocation (for overlap), ``start`` is its first byte within that
    allocation (address or offset: its remainder mod 16 is the alignment), ``s0``/``s1`` are
    byte strides and ``offset`` the element offset the kernel adds to ``handle``. Adapters
    may return a plain tuple in this order (the per-call path indexes it)."""

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
                ob: int, ldb: int, c: Any, oc: int, ldc: int) -> None: ...  # fmt: skip


class Launches:
    """Compiled launches, at most ``maxsize``, keyed by ``(plan.launch_key, device, aligned)``.

    The last plan is also remembered by identity (holding it, so its id cannot be reused): a
    loop over one shape skips building the key."""

    def __init__(self, build: Callable[[Any, bool], Any], maxsize: int = 256) -> None:
        self._build = build
        self.cache: LRUCache[Any] = LRUCache(maxsize)
        self._last: tuple | None = None

    def get(self, plan: Any, device: Hashable, aligned: bool) -> Any:
        last = self._last
        if last is not None and last[0] is plan and last[1] == device and last[2] is aligned:
            return last[3]
        key = (plan.launch_key, device, aligned)
        call = self.cache.get_or_make(key, lambda: self._build(plan, aligned))
        self._last = (plan, device, aligned, call)
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
    aligned = not (lda % vw or ldb % vw or la[2] % 16 or lb[2] % 16)
    if not aligned and K.pad_pays(plan):
        return _prepare(ad, launches, plan, a, b, out)
    ad.enqueue(launches.get(plan, ad.device_id(), aligned), m, n, k,
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
    aligned = not (lda % vw or ldb % vw or la[2] % 16 or lb[2] % 16)
    if not aligned and K.pad_pays(plan):  # odd leading dimensions: copy to aligned rows
        if lda % vw or la[2] % 16:
            check_extent("A", m, k, 0, aligned_ld(k, vw))
            a = ad.aligned_copy(a, aligned_ld(k, vw), "a")
            la, lda = ad.layout(a), aligned_ld(k, vw)
        if ldb % vw or lb[2] % 16:
            check_extent("B", k, n, 0, aligned_ld(n, vw))
            b = ad.aligned_copy(b, aligned_ld(n, vw), "b")
            lb, ldb = ad.layout(b), aligned_ld(n, vw)
        aligned = True
    ad.enqueue(launches.get(plan, ad.device_id(), aligned), m, n, k,
               la[0], la[5], lda, lb[0], lb[5], ldb, lc[0], lc[5], ldc)  # fmt: skip
    if c is not out:
        ad.copy(c, out)
