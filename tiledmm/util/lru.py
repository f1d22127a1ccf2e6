"""A small bounded, thread-safe LRU mapping for the caches on hot paths (plans, launches); fork
safe (a forked child gets fresh locks)."""

from __future__ import annotations

import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["LRUCache"]

V = TypeVar("V")


class LRUCache(Generic[V]):
    """At most ``maxsize`` entries; the least recently used one goes first.

    ``get`` is a plain dict lookup plus a move to the end; ``get_or_make`` builds a missing
    value outside the lock (two threads may both build it; the first stored wins).
    """

    def __init__(self, maxsize: int = 1024) -> None:
        if maxsize < 1:
            raise ValueError(f"maxsize must be positive, got {maxsize}")
        self.maxsize = maxsize
        self._data: OrderedDict[Hashable, V] = OrderedDict()
        self._lock = threading.Lock()
        _ALL.add(self)

    def get(self, key: Hashable, default: V | None = None) -> V | None:
        with self._lock:
            try:
                self._data.move_to_end(key)
            except KeyError:
                return default
            return self._data[key]

    def put(self, key: Hashable, value: V) -> V:
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.maxsize:
                self._data.popitem(last=False)
        return value

    def get_or_make(self, key: Hashable, make: Callable[[], V]) -> V:
        hit = self.get(key)
        if hit is not None:
            return hit
        value = make()
        with self._lock:
            if key in self._data:
                return self._data[key]
        return self.put(key, value)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._data


_ALL: weakref.WeakSet[LRUCache] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """A forked child gets fresh locks: a thread of the parent may have held one at the fork
    (the child has no such thread to release it)."""
    for c in list(_ALL):
        c._lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)
