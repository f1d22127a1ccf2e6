"""Streams: a tiledmm call ordered within the caller's CUDA stream (PyTorch's current stream).

CuPy, Numba and torch's default streams are one legacy CUDA stream, so on it nothing extra
happens. On a non-default torch stream the general path (the array bridge and the 16-bit path)
runs inside :class:`TorchStream`, and the torch fast path (:mod:`tiledmm.interop.torchpath`)
launches on the stream itself or switches to it: both through the helpers here, a CuPy stream
object over a raw ``cudaStream_t`` (:func:`external_stream`, cached), torch's current raw stream
(:func:`raw_stream_getter`, :func:`stream_for`) and reused per-thread events (:func:`events`).
Nothing here imports torch or cupy: they come from ``sys.modules`` or the caller.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from .kinds import Kind, optional_module

__all__ = ["Handle", "external_stream", "events", "raw_stream_getter", "stream_for",
           "TorchStream"]  # fmt: skip

_external: dict[tuple[Any, int, int], Any] = {}


class Handle:
    """A raw ``cudaStream_t`` speaking the CUDA stream protocol (``__cuda_stream__``)."""

    __slots__ = ("ptr",)

    def __init__(self, ptr: int) -> None:
        self.ptr = ptr

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.ptr)


def external_stream(cp: Any, handle: int, index: int) -> Any:
    """A cached CuPy stream object for a raw stream handle on device ``index`` (CuPy 14's
    ``Stream.from_external``; ``ExternalStream``, deprecated there, on older CuPy)."""
    ext = _external.get((cp, handle, index))
    if ext is None:
        if len(_external) > 64:
            _external.clear()
        wrap = getattr(cp.cuda.Stream, "from_external", None)
        ext = wrap(Handle(handle)) if wrap else cp.cuda.ExternalStream(handle, index)
        _external[(cp, handle, index)] = ext
    return ext


_local = threading.local()  # events are per thread: another thread's record would move them


def events(cp: Any, index: int) -> tuple[Any, Any]:
    """Two reused CUDA events of this thread on device ``index`` (the torch fast path's
    ordering around a launch on the legacy default stream)."""
    cache = getattr(_local, "events", None)
    if cache is None:
        cache = _local.events = {}
    ev = cache.get((cp, index))
    if ev is None:
        ev = cache[(cp, index)] = (
            cp.cuda.Event(disable_timing=True),
            cp.cuda.Event(disable_timing=True),
        )
    return ev


def raw_stream_getter(torch: Any) -> Any:
    """``f(device_index) -> cudaStream_t`` of torch's current stream (0: the legacy default)."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return raw if raw is not None else (lambda i: torch.cuda.current_stream(i).cuda_stream)


def stream_for(kind: Kind, x: Any = None) -> int | None:
    """The raw ``cudaStream_t`` the caller's library is using on ``kind``'s device, for a
    backend to launch on (:func:`external_stream`); None where the library does
    its own stream ordering (DLPack consumers pass their stream) or for host kinds."""
    if kind.lib == "torch" and kind.device == "cuda":
        return raw_stream_getter(sys.modules["torch"])(kind.index)
    return None


class TorchStream:
    """Orders a general-path tiledmm call inside PyTorch's current (non-default) stream ``s``.

    On entry the legacy default stream waits for ``s`` (events, no host sync), so a backend
    launching on the default stream (Numba) starts after the producer; CuPy's current stream
    becomes ``s`` itself (:func:`external_stream`), so CuPy launches and pool allocations are on
    it.
    On exit ``s`` waits for the default stream, so a torch consumer sees the finished result.
    """

    __slots__ = ("torch", "index", "handle", "ext")

    def __init__(self, index: int, handle: int) -> None:
        self.torch, self.index, self.handle, self.ext = sys.modules["torch"], index, handle, None

    def __enter__(self) -> TorchStream:
        cuda = self.torch.cuda
        cuda.default_stream(self.index).wait_stream(cuda.current_stream(self.index))
        cp = optional_module("cupy")
        if cp is not None:
            self.ext = external_stream(cp, self.handle, self.index)
            self.ext.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.ext is not None:
            self.ext.__exit__(*exc)
        cuda = self.torch.cuda
        cuda.current_stream(self.index).wait_stream(cuda.default_stream(self.index))
