"""Where the OpenCL backend runs a call: on the queue of the caller's arrays (issue 37).

A product of ``pyopencl.array.Array`` operands runs on its result's queue, which is the first
operand's queue (``Backend.empty(like=a)``): the caller's own context and queue, not the
backend's. Its commands follow whatever the caller queued before (in-order queue), its result
is a queued array on that queue, the first command waits for the operands' pending events
(``Array.events``; a marker of another queue of the same context where an operand lives
there), and the call's last event becomes the result's ``events``, so ``result.finish()`` and
pyopencl's own operations order after it. Nothing waits on the host, except for operands of
two contexts, which OpenCL cannot share: those run in the context of the largest operand, the
others copied through the host (documented, and rare: NumPy operands go to the backend's own
context, ``TILEDMM_OPENCL_DEVICE``'s).

:class:`Queues` keeps one state per queue (``OpenCLState``: scratch, counters and buffer pool
are per queue, so a block freed by one call is reused by a later command of the same in-order
queue only), sharing compiled programs and launches per context; at most :data:`MAX_QUEUES`
(the oldest half goes when full).
"""

from __future__ import annotations

from typing import Any

from .state import OpenCLState, Recorder, cl_modules

__all__ = ["Queues", "MAX_QUEUES", "prepare", "largest"]

MAX_QUEUES = 64


class Queues:
    """The states of the queues a backend has run on (see the module docstring)."""

    def __init__(self) -> None:
        self.rec = Recorder()
        self.by_queue: dict[int, OpenCLState] = {}  # id(queue): each state holds its queue
        self.by_context: dict[int, OpenCLState] = {}  # context int_ptr: a state to share with

    def add(self, st: OpenCLState) -> OpenCLState:
        if len(self.by_queue) >= MAX_QUEUES:
            for key in list(self.by_queue)[: MAX_QUEUES // 2]:
                old = self.by_queue.pop(key)
                if self.by_context.get(old.ctx.int_ptr) is old:
                    del self.by_context[old.ctx.int_ptr]
        self.by_queue[id(st.queue)] = st
        self.by_context.setdefault(st.ctx.int_ptr, st)
        return st

    def of(self, x: Any) -> OpenCLState:
        """The state of array ``x``'s queue (made on first sight); a queue-less array: a
        state of its context."""
        st = self.by_queue.get(id(x.queue))
        if st is not None and st.queue is x.queue:
            return st
        q = x.queue
        if q is None:
            peer = self.by_context.get(x.context.int_ptr)
            if peer is not None:
                return peer
            cl, _ = cl_modules()
            q = cl.CommandQueue(x.context)
        peer = self.by_context.get(q.context.int_ptr)
        return self.add(OpenCLState(q.device, q, peer, self.rec))

    def all(self) -> list[OpenCLState]:
        return list(self.by_queue.values())


def prepare(st: OpenCLState, a: Any, b: Any, out: Any) -> tuple:
    """(a, b, events to wait for) for a call on ``st`` (``out``'s queue): operands of another
    queue of this context contribute a marker of theirs, of another context a copy on ``st``
    (through the host); pending events of all three are waited for."""
    q = st.queue
    if a.queue is q and b.queue is q:  # the common case: one queue
        if a.events or b.events or out.events:
            return a, b, [*a.events, *b.events, *out.events]
        return a, b, None
    cl, cla = cl_modules()
    wait: list = [*out.events]
    moved = []
    for x in (a, b):
        if x.queue is not q and x.context != st.ctx:
            x = cla.to_device(q, x.get())  # two contexts: through the host
        elif x.queue is not q and x.queue is not None:
            wait.append(cl.enqueue_marker(x.queue))  # after what x's queue holds
        wait += x.events
        moved.append(x)
    return moved[0], moved[1], wait or None


def largest(*xs: Any) -> Any:
    """The operand with the most elements (the one a mixed-context call does not move)."""
    return max(xs, key=lambda x: x.size)
