"""The kernel families and a backend's tile choice for one of them (:class:`Geometry`): the
planner's input vocabulary, below the Backend contract and the planner alike."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Geometry", "KERNEL_FAMILIES"]

KERNEL_FAMILIES = ("naive", "tiled", "register", "mma")


@dataclass(frozen=True)
class Geometry:
    """A backend's choice of tiles for one kernel family (the planner validates it).

    ``options`` carries backend-specific compile-time knobs (vector width, warp tile, ...);
    they reach the kernel through ``plan.options``. ``registers`` is the per-thread register
    count when known (from a compile report); otherwise the planner estimates it.

    Its forms: :meth:`to_dict`/:meth:`from_dict` (the JSON tables' entries), :meth:`key`/
    :meth:`from_key` (the string ``tiledmm tune``'s logs store) and ``str()`` (the text the
    tuner prints, ``128x128x16/8x8 stages=2,...``).
    """

    block_tile: tuple[int, int, int]
    thread_tile: tuple[int, int] = (1, 1)
    options: tuple[tuple[str, Any], ...] = field(default=())
    registers: int | None = None
    source: str = "default"  # where these numbers come from ("tuned on NVIDIA H200", ...)

    @classmethod
    def from_dict(cls, entry: dict, source: str = "default") -> Geometry:
        """A Geometry from a JSON table entry: ``{"block_tile": [...], "thread_tile": [...],
        "options": {...}, "registers": n, "source": "..."}`` (all but block_tile optional)."""
        return cls(
            tuple(entry["block_tile"]),
            tuple(entry.get("thread_tile", (1, 1))),
            tuple(sorted(entry.get("options", {}).items())),
            entry.get("registers"),
            entry.get("source", source),
        )

    def to_dict(self) -> dict:
        """The JSON table form :meth:`from_dict` reads: ``block_tile``, ``thread_tile`` and
        ``options`` (``registers`` too when known; not ``source``)."""
        d = {"block_tile": list(self.block_tile), "thread_tile": list(self.thread_tile),
             "options": dict(self.options)}  # fmt: skip
        if self.registers is not None:
            d["registers"] = self.registers
        return d

    def key(self) -> str:
        """The string ``tiledmm tune``'s logs store (tiles and sorted options; committed logs
        resume by it, so its spelling never changes): :meth:`from_key` reads it back."""
        return json.dumps([list(self.block_tile), list(self.thread_tile),
                           sorted(map(list, self.options))])  # fmt: skip

    @classmethod
    def from_key(cls, key: str, source: str = "tiledmm tune") -> Geometry:
        """The Geometry of a :meth:`key` string."""
        bt, tt, opts = json.loads(key)
        return cls(tuple(bt), tuple(tt), tuple(tuple(o) for o in opts), source=source)

    def __str__(self) -> str:
        bm, bn, bk = self.block_tile
        opts = ",".join(f"{k}={v}" for k, v in self.options)
        return f"{bm}x{bn}x{bk}/{self.thread_tile[0]}x{self.thread_tile[1]}" + (
            f" {opts}" if opts else ""
        )
