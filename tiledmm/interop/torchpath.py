"""The fast path for PyTorch tensors (its stream helpers: :mod:`tiledmm.interop.streams`).

A repeated 2-D product of torch tensors should cost what the same call on CuPy (or NumPy)
arrays costs. The general bridge (:func:`tiledmm.interop.bridge.matmul_foreign`) works out kinds,
views, streams and the result's conversion on every call; this module remembers, per
``(backend, kernel, shapes, dtypes, devices)``, what the first general call decided (the
backend and the plan) and afterwards does only what each call must:

- the checks that can change between calls with the same key: both tensors contiguous, no
  negative bit, no autograd (``requires_grad`` under grad mode), the registry's generation and
  the backend's current device;
- CUDA: the output is allocated by torch (``a.new_empty_strided``: ``a``'s device and dtype,
  from the caching allocator of the current stream; the cheapest of torch's allocation calls,
  whose Python argument parsing is most of their host cost), so it already is the caller's
  kind. A backend with a pre-bound launch (``bind(plan)``: the CuPy backend's ``Bound``, which
  the CuPy-input hot path of :mod:`tiledmm.api` uses too) gets the three raw pointers and
  torch's current stream, and launches there (nothing else is enqueued, so no stream switch
  and no events, on any torch stream); otherwise the backend writes through CuPy views.
  Views of the three tensors are built over ``data_ptr()`` (``cupy.cuda.UnownedMemory``, no
  owner) and kept per pointer: a view is a pure function of (pointer, shape, dtype, device),
  all fixed by the key but the pointer, so a loop over the same tensors, or over results the
  caching allocator hands out again, builds none;
- without a bound launch (or for ``out=``, which may overlap an operand: the backend's run
  checks), the launch goes to torch's current stream: when CuPy's current stream is another one, a
  cached CuPy stream over torch's handle (``streams.external_stream``) is made current around it. A
  backend that does not declare ``launch_stream = "cupy"`` (it launches on CuPy's current
  stream) is, on a non-default torch stream, also ordered with two reused CUDA events (legacy
  default stream waits for the torch stream before, the torch stream for it after);
- CPU tensors: NumPy views (``Tensor.numpy()``) through the backend's array hooks, the result
  wrapped by ``torch.from_numpy`` (zero-copy).

``out=`` takes the fast path on CUDA when it is a contiguous tensor of the result's shape, dtype
and device. Anything else (other ``out=``, batched or 1-D operands, non-contiguous or mixed
operands, dtypes other than float32/float64, tensor subclasses, grad) takes the general path.
Entries are made by :func:`learn` after a general call succeeded with the same arguments, so
every error and every delegation stays the general path's.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from ..core import registry
from ..core.dispatch import choose_backend, plan_for
from ..core.engine import bound
from .kinds import RUN_DTYPES, optional_module, torch_dtype
from .streams import Handle, events, external_stream, raw_stream_getter

__all__ = ["TYPES", "matmul", "learn", "enable", "entries", "entry"]

#: Operand types the API offers to :func:`matmul` first (``torch.Tensor`` once learnt).
TYPES: set[type] = set()
MAX_ENTRIES = 1024
VIEWS_PER_ROLE = 8  # cached CuPy views per operand role and entry (pointers seen lately)
_entries: dict[tuple, Any] = {}
_on = [True]


def enable(on: bool = True) -> None:
    """Switch the fast path on or off (benchmarks compare both); either way it starts empty."""
    _on[0] = on
    TYPES.clear()
    _entries.clear()


def entries() -> int:
    """How many (backend, kernel, shapes, dtypes, devices) keys are remembered (``Skip``
    entries, for keys the fast path does not handle, included)."""
    return len(_entries)


def entry(a: Any, b: Any, backend: str, kernel: str) -> Any:
    """The remembered entry for these operands (a ``CudaEntry``, ``HostEntry`` or ``Skip``),
    or None."""
    if type(b) is not type(a):
        return None
    e = _entries.get((backend, kernel, a.shape, b.shape, a.dtype, b.dtype, a.device, b.device))
    return e if e is not None and e.token == registry.generation() else None


def matmul(a: Any, b: Any, backend: str, kernel: str, out: Any = None) -> Any:
    """``a @ b`` for two torch tensors seen before with this key (into ``out``, a CUDA tensor
    of the result's shape, dtype and device, when given), or ``None`` (then the caller takes
    the general path)."""
    if type(b) is not type(a) or (out is not None and type(out) is not type(a)):
        return None
    e = _entries.get((backend, kernel, a.shape, b.shape, a.dtype, b.dtype, a.device, b.device))
    if e is None or e.token != registry.generation():
        return None
    if not (a.is_contiguous() and b.is_contiguous()) or a.is_neg() or b.is_neg():
        return None
    return e(a, b, out)


def learn(a: Any, b: Any, backend: str, kernel: str) -> None:
    """Remember what a successful general call on torch tensors ``a``, ``b`` (no ``out=``)
    decided, so the next call with the same key takes :func:`matmul` (None: not handled)."""
    torch = sys.modules.get("torch")
    if not _on[0] or torch is None or type(a) is not torch.Tensor or type(b) is not type(a):
        return
    key = (backend, kernel, a.shape, b.shape, a.dtype, b.dtype, a.device, b.device)
    token = registry.generation()
    e = _entries.get(key)
    if e is not None and e.token == token:
        return
    if len(_entries) >= MAX_ENTRIES:
        for old in list(_entries)[: MAX_ENTRIES // 2]:
            _entries.pop(old, None)
    _entries[key] = _make(torch, a, b, backend, kernel) or Skip(token)
    TYPES.add(torch.Tensor)


class Skip:
    """The entry of a key the fast path does not handle (until the registry changes)."""

    __slots__ = ("token",)

    def __init__(self, token: int) -> None:
        self.token = token

    def __call__(self, a: Any, b: Any, out: Any = None) -> None:
        return None


def _make(torch: Any, a: Any, b: Any, backend: str, kernel: str) -> Any:
    if a.dim() != 2 or b.dim() != 2 or a.dtype != b.dtype:
        return None
    dt = torch_dtype(torch, a.dtype)
    (m, k), n = a.shape, b.shape[1]
    if dt not in RUN_DTYPES or not (m and n and k) or b.shape[0] != k:
        return None
    try:
        if a.is_cuda and b.is_cuda and a.get_device() == b.get_device():
            return cuda_entry(torch, a, b, dt, backend, kernel)
        if a.is_cpu and b.is_cpu:
            return _host_entry(torch, dt, m, n, k, backend, kernel)
    except (ValueError, RuntimeError, TypeError):  # the general path decides (and says why)
        return None
    return None


# ------------------------------------------------------------------------------- CUDA


def view(cp: Any, ptr: int, shape: tuple[int, ...], dt: Any, nbytes: int, index: int,
         owner: Any = None) -> Any:  # fmt: skip
    """A C-contiguous CuPy array over ``nbytes`` at ``ptr`` on device ``index``; ``owner`` is
    kept alive by it (None: the caller keeps the memory alive while the view is used)."""
    mem = cp.cuda.UnownedMemory(ptr, nbytes, owner, index)
    return cp.ndarray(shape, dt, cp.cuda.MemoryPointer(mem, 0))


def cuda_entry(torch: Any, a: Any, b: Any, dt: Any, backend: str, kernel: str) -> Any:
    """The entry for CUDA tensors ``a``, ``b`` of NumPy dtype ``dt`` (None: not handled): the
    backend and plan the general path chooses for CuPy views of them (tests use stand-ins)."""
    cp = optional_module("cupy")
    if cp is None:
        return None
    idx = a.get_device()
    (m, k), n = a.shape, b.shape[1]
    s = dt.itemsize
    va = view(cp, a.data_ptr(), (m, k), dt, m * k * s, idx)
    vb = view(cp, b.data_ptr(), (k, n), dt, k * n * s, idx)
    token = registry.generation()
    be = choose_backend(backend, va, vb, m, n, k, dt.name, kernel)
    if dt.name not in be.dtypes or not be.accepts(va) or be.device_key() != idx:
        return None
    plan = plan_for(be, m, n, k, dt.name, kernel)
    shapes = (((m, k), m * k * s), ((k, n), k * n * s), ((m, n), m * n * s))
    return CudaEntry(cp, torch, be, plan, token, a.dtype, a.device, dt, shapes)


class CudaEntry:
    """One remembered CUDA product: ``entry(a, b)`` is the result tensor, or None when this
    call cannot take the fast path after all (another current device)."""

    __slots__ = ("cp", "be", "plan", "token", "tdt", "dev", "dt", "shapes", "idx", "views",
                 "raw", "grad", "current", "on_cupy", "go", "ptr", "shape", "strides",
                 "stream")  # fmt: skip

    def __init__(self, cp, torch, be, plan, token, tdt, dev, dt, shapes) -> None:
        self.cp, self.be, self.plan, self.token = cp, be, plan, token
        self.tdt, self.dev, self.dt, self.shapes, self.idx = tdt, dev, dt, shapes, dev.index
        self.views: tuple[dict, dict, dict] = ({}, {}, {})
        self.raw = raw_stream_getter(torch)
        self.grad = torch.is_grad_enabled
        self.current = cp.cuda.get_current_stream
        self.on_cupy = getattr(be, "launch_stream", "") == "cupy"
        self.go = bound(be, plan)  # the pre-bound launch, as the engine's hot path holds it
        self.ptr = getattr(self.go, "pointer", None)  # its kernel argument over an address
        self.shape = shapes[2][0]
        self.strides = (self.shape[1], 1)
        self.stream = Handle(-1)  # torch's last current stream, for the bound launch

    def view(self, role: int, ptr: int) -> Any:
        d = self.views[role]
        v = d.get(ptr)
        if v is None:
            if len(d) >= VIEWS_PER_ROLE:
                d.clear()
            shape, nbytes = self.shapes[role]
            v = d[ptr] = view(self.cp, ptr, shape, self.dt, nbytes, self.idx)
        return v

    def __call__(self, a: Any, b: Any, out: Any = None) -> Any:
        if (a.requires_grad or b.requires_grad) and self.grad():
            return None
        be, idx = self.be, self.idx
        if be.device_key() != idx:
            return None
        if out is None:
            r = a.new_empty_strided(self.shape, self.strides)  # (a's dtype and device)
        elif self.takes(out):
            r = out
        else:
            return None
        h = self.raw(idx)
        pa, pb, pr = a.data_ptr(), b.data_ptr(), r.data_ptr()
        go = self.go
        if go is not None and out is None:  # (a fresh result overlaps neither operand)
            s = self.stream  # the launch goes to torch's stream itself: no switch, no events
            if s.ptr != h:
                s = self.stream = Handle(h)
            p = self.ptr
            if go(p(pa), p(pb), p(pr), pa, pb, s):
                return r
        here = self.current().ptr == h and (not h or self.on_cupy)  # no switch, no events
        da, db, dr = self.views
        va, vb, vr = da.get(pa), db.get(pb), dr.get(pr)  # (misses: built below)
        if va is None:
            va = self.view(0, pa)
        if vb is None:
            vb = self.view(1, pb)
        if vr is None:
            vr = self.view(2, pr)
        if here:
            be.run(self.plan, va, vb, vr)
        else:
            self.ordered(h, va, vb, vr)
        return r

    def takes(self, out: Any) -> bool:
        """Whether ``out=`` is written as it is: the result's shape, dtype and device,
        contiguous, no negative bit, no autograd (else the general path's rules apply)."""
        return (
            out.shape == self.shapes[2][0]
            and out.dtype == self.tdt
            and out.device == self.dev
            and out.is_contiguous()
            and not out.is_neg()
            and not (out.requires_grad and self.grad())
        )

    def ordered(self, h: int, va: Any, vb: Any, vr: Any) -> None:
        """The launch with torch's stream ``h`` made CuPy's current one, and (on a side stream,
        for a backend that may launch on the legacy default stream) events both ways."""
        ext = external_stream(self.cp, h, self.idx)
        if h and not self.on_cupy:
            legacy = external_stream(self.cp, 0, self.idx)
            before, after = events(self.cp, self.idx)
            before.record(ext)
            legacy.wait_event(before)
            with ext:
                self.be.run(self.plan, va, vb, vr)
            after.record(legacy)
            ext.wait_event(after)
            return
        with ext:
            self.be.run(self.plan, va, vb, vr)


# ------------------------------------------------------------------------------- host


def _host_entry(torch: Any, dt: Any, m: int, n: int, k: int, backend: str, kernel: str) -> Any:
    token = registry.generation()
    sample = np.empty((1, 1), dt)  # (the operands' NumPy views: this call's may be unreadable)
    be = choose_backend(backend, sample, sample, m, n, k, dt.name, kernel)
    if dt.name not in be.dtypes:
        return None
    plan = plan_for(be, m, n, k, dt.name, kernel)
    return HostEntry(torch, be, plan, token, dt, be.device_key())


class HostEntry:
    """One remembered product of CPU tensors (NumPy views in, ``torch.from_numpy`` out)."""

    __slots__ = ("be", "plan", "token", "dt", "dkey", "wrap")

    def __init__(self, torch, be, plan, token, dt, dkey) -> None:
        self.be, self.plan, self.token, self.dt, self.dkey = be, plan, token, dt, dkey
        self.wrap = torch.from_numpy

    def __call__(self, a: Any, b: Any, out: Any = None) -> Any:
        be, dt = self.be, self.dt
        if out is not None or a.requires_grad or b.requires_grad or be.device_key() != self.dkey:
            return None
        A, B = be.asarray(a.numpy(), dt), be.asarray(b.numpy(), dt)
        R = be.empty((self.plan.m, self.plan.n), dt, like=A)
        be.run(self.plan, A, B, R)
        return self.wrap(be.to_numpy(R))
