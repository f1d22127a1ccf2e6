"""The OpenCL backend's pre-bound launch for the hot path (``Backend.bind``; issue 37).

The engine's hot path calls ``bound.arrays(a, b, c)`` for a product seen before. For
C-contiguous operands at offset 0 on one queue (2-D, or the 1-D vector of a vector product),
it launches ``plan``'s kernel as :func:`tiledmm_backends.kernels.launch.run` would (the same
compiled launch, from the state's cache), through kernel objects of its own whose scalar
arguments were set once: per call only the buffers are set and the commands enqueued (one
GEMM; with K slices a workspace from the queue's pool and the one-pass gemv's counters, or the
``splitk_reduce`` launch after it). The first command waits for the operands' pending events;
the last one becomes the result's. Anything else (views, offsets, another queue, odd leading
dimensions the plan pads, mma, empty products) returns False and takes ``Backend.run``.

pyopencl's launch with typed arguments packs the 20 scalars of a GEMM on every call (about
3.5 us more than three ``set_arg`` and the enqueue, PoCL, 2 cores); its untyped launch took
200-300 us.
"""

from __future__ import annotations

from typing import Any

from .. import kernels as K
from ..kernels import launch

__all__ = ["Bound", "bind"]


def bind(be: Any, plan: Any) -> Bound | None:
    """A :class:`Bound` for ``plan``, or None where only ``run`` applies."""
    m, n, k = plan.m, plan.n, plan.k
    if plan.kernel not in K.FAMILIES or not (m and n and k):
        return None
    if max(m * k, k * n, m * n * K.split_k(plan)) > K.INT_MAX:
        return None
    vw = 16 // K.itemsize(plan.dtype)
    aligned = not (k % vw or n % vw)
    if not aligned and K.pad_pays(plan, bool(k % vw), bool(n % vw)):
        return None
    return Bound(be, plan, aligned)


class _Prepared:
    """One state's kernels for a bound plan: (kernel, global, local) of the GEMM, and of the
    reduction (or None); their scalar arguments already set."""

    __slots__ = ("st", "gemm", "reduce", "counters")

    def __init__(self, st: Any, gemm: tuple, reduce: tuple | None, counters: int) -> None:
        self.st, self.gemm, self.reduce, self.counters = st, gemm, reduce, counters


class Bound:
    """``plan``'s launch for plain operands (see the module docstring)."""

    __slots__ = ("be", "plan", "aligned", "strides", "sk", "onepass", "wbytes", "per")

    def __init__(self, be: Any, plan: Any, aligned: bool) -> None:
        self.be, self.plan, self.aligned = be, plan, aligned
        m, n, k = plan.m, plan.n, plan.k
        s = K.itemsize(plan.dtype)
        self.strides = tuple({(cols * s, s), (s,)} for cols in (k, n, n))
        self.sk, self.onepass = K.split_k(plan), K.onepass(plan)
        self.wbytes = self.sk * m * n * s
        self.per: dict[int, _Prepared] = {}  # id(state) -> its kernels (each holds its state)

    def arrays(self, a: Any, b: Any, c: Any) -> bool:
        """Launch ``c = a @ b`` (True), or nothing (False: ``run`` takes it)."""
        q = c.queue
        if a.queue is not q or b.queue is not q or a.offset or b.offset or c.offset:
            return False
        sa, sb, sc = self.strides
        if a.strides not in sa or b.strides not in sb or c.strides not in sc or q is None:
            return False
        st = self.be.home(c)
        prep = self.per.get(id(st))
        if prep is None or prep.st is not st:
            prep = self._prepare(st)
        wait = [*a.events, *b.events, *c.events] if a.events or b.events or c.events else None
        kern, g, lsz = prep.gemm
        if self.sk == 1:
            kern.set_arg(3, a.base_data)
            kern.set_arg(6, b.base_data)
            kern.set_arg(9, c.base_data)
            last = _enqueue(st, kern, g, lsz, wait)
        else:
            w = st.pool(self.wbytes)  # back to the pool after the call: this queue is in order
            kern.set_arg(3, a.base_data)
            kern.set_arg(6, b.base_data)
            kern.set_arg(9, w)
            if self.onepass:
                kern.set_arg(20, c.base_data)
                kern.set_arg(25, st.counters(prep.counters))
                last = _enqueue(st, kern, g, lsz, wait)
            else:
                _enqueue(st, kern, g, lsz, wait)
                red, rg, rl = prep.reduce
                red.set_arg(3, w)
                red.set_arg(5, c.base_data)
                last = _enqueue(st, red, rg, rl, None)
        del c.events[:]
        c.events.append(last)
        return True

    def _prepare(self, st: Any) -> _Prepared:
        """Kernel objects of this plan's launch on ``st``'s context with every scalar set."""
        plan, sk = self.plan, self.sk
        m, n, k = plan.m, plan.n, plan.k
        kern, gsize, lsize, g3, l3 = st.launches.get(plan, st.device_id(), self.aligned, sk == 1)
        none = None
        if sk == 1:
            args = (m, n, k, none, 0, k, none, 0, n, none, 0, n, *launch.NOBATCH[1:])
            gemm = (kern.instance(args), gsize, lsize)
            if len(self.per) > 8:
                self.per.clear()
            prep = self.per[id(st)] = _Prepared(st, gemm, None, 0)
            return prep
        per = m * n
        wt = (1, 0, 0, 0, 0, per, per, per)  # launch._launch's for one product: nb1 .. sCk
        tail: tuple = ()
        counters = 0
        if self.onepass:
            (gx, gy), _ = K.launch_shape(plan)
            counters = gx * gy
            tail = (none, 0, n, 0, 0, none)
        args = (m, n, k, none, 0, k, none, 0, n, none, 0, n, *wt, *tail)
        gemm = (kern.instance(args), (g3[0], g3[1], sk), l3)
        reduce = None
        if not self.onepass:
            red = st.kernel("splitk_reduce", K.reduce_source(plan.dtype))
            t = K.REDUCE_THREADS
            rargs = (m, n, sk, none, per, none, 0, n, 1, 0, 0)
            reduce = (red.instance(rargs), (-(-per // t) * t, 1, 1), (t, 1, 1))
        if len(self.per) > 8:
            self.per.clear()
        prep = self.per[id(st)] = _Prepared(st, gemm, reduce, counters)
        return prep


def _enqueue(st: Any, kern: Any, g: tuple, lsz: tuple, wait: list | None) -> Any:
    """Enqueue ``kern`` on ``st``'s queue (recorded while ``timings`` records)."""
    event = st.enqueue_nd(st.queue, kern, g, lsz, wait_for=wait)
    if st.rec.events is not None:
        st.rec.events.append(event)
    return event
