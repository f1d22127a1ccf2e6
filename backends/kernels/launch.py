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
    byte strides and ``offset`` the element offset the kernel adds to ``handle``."""

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
    def enqueue(self, call: Any, m: int, n: int, k: int, a: tuple, b: tuple, c: tuple) -> None: ...


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


def leading_dim(rows: int, cols: int, lay: Layout, size: int) -> int | None:
    """The leading dimension in elements if the operand is row-major with unit column stride
    (what the kernels read), else None."""
    if cols > 1 and lay.s1 != size:
        return None
    if rows <= 1:
        return max(cols, 1)
    if lay.s0 <= 0 or lay.s0 % size or lay.s0 // size < cols:
        return None
    return lay.s0 // size


def check_extent(name: str, rows: int, cols: int, offset: int, ld: int) -> None:
    """Raise ValueError when element ``offset + (rows-1)*ld + cols-1`` is past 32-bit indexing."""
    if rows and cols and offset + (rows - 1) * ld + cols > INT_MAX:
        raise ValueError(
            f"operand {name} ({rows}x{cols}) is too large for the 32-bit indexing of the tiledmm "
            f"GEMM kernels (it spans more than 2**31-1 elements): use backend='numpy' (or the "
            "array library's own matmul), or split the product into blocks"
        )


def _span(lay: Layout, rows: int, cols: int, size: int) -> tuple[int, int]:
    return lay.start, lay.start + (rows - 1) * abs(lay.s0) + (cols - 1) * abs(lay.s1) + size


def overlap(x: Layout, xs: tuple[int, int], y: Layout, ys: tuple[int, int], size: int) -> bool:
    """Whether two operands of shapes ``xs``, ``ys`` share bytes of one allocation."""
    if x.base != y.base or not (xs[0] and xs[1] and ys[0] and ys[1]):
        return False
    x0, x1 = _span(x, *xs, size)
    y0, y1 = _span(y, *ys, size)
    return x0 < y1 and y0 < x1


def run(ad: Adapter, launches: Launches, plan: Any, a: Any, b: Any, out: Any) -> None:
    """``out[...] = a @ b`` with ``plan``'s kernel: the steps of the module docstring."""
    m, k = a.shape
    n = b.shape[1]
    s = itemsize(plan.dtype)
    vw = 16 // s
    la, lb, lc = ad.layout(a), ad.layout(b), ad.layout(out)
    lda, ldb, ldc = leading_dim(m, k, la, s), leading_dim(k, n, lb, s), leading_dim(m, n, lc, s)
    # 32-bit indices: every extent the kernel will see, before any allocation or copy
    check_extent("A", m, k, la.offset if lda else 0, lda or max(k, 1))
    check_extent("B", k, n, lb.offset if ldb else 0, ldb or max(n, 1))
    check_extent("out", m, n, lc.offset if ldc else 0, ldc or max(n, 1))
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
    aligned = not (lda % vw or ldb % vw or la.start % 16 or lb.start % 16)
    if not aligned and K.pad_pays(plan):  # odd leading dimensions: copy to aligned rows
        if lda % vw or la.start % 16:
            check_extent("A", m, k, 0, aligned_ld(k, vw))
            a = ad.aligned_copy(a, aligned_ld(k, vw), "a")
            la, lda = ad.layout(a), aligned_ld(k, vw)
        if ldb % vw or lb.start % 16:
            check_extent("B", k, n, 0, aligned_ld(n, vw))
            b = ad.aligned_copy(b, aligned_ld(n, vw), "b")
            lb, ldb = ad.layout(b), aligned_ld(n, vw)
        aligned = True
    call = launches.get(plan, ad.device_id(), aligned)
    ad.enqueue(call, m, n, k, (la.handle, la.offset, lda), (lb.handle, lb.offset, ldb),
               (lc.handle, lc.offset, ldc))  # fmt: skip
    if c is not out:
        ad.copy(c, out)
