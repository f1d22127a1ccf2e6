"""The kernel families and a backend's tile choice for one of them (:class:`Geometry`): the
planner's input vocabulary, below the Backend contract and the planner alike."""

from __future__ import annotations

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
