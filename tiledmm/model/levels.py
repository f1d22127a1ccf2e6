"""One level of the traffic model (``tiledmm.model.hierarchy`` for GPUs, ``tiledmm.model.cpu`` for
CPUs): what crosses it, at what ceiling, in how many seconds."""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["Level"]


@dataclass(frozen=True)
class Level:
    """One level's traffic: ``amount`` crosses it (bytes; FLOPs for "compute"; instructions
    for "issue"; dependent round trips for "latency") at ``ceiling`` per second."""

    name: str
    amount: float
    ceiling: float
    seconds: float
    note: str = ""
    unit: str = "B"
    parts: tuple[tuple[str, float], ...] = ()  # the amount's parts (DRAM: read, written)
    serial: float = 0.0  # seconds of ``seconds`` spent in phases no level overlaps

    def intensity(self, flops: float) -> float:
        """FLOPs per unit crossing this level (FLOP/B for memory levels)."""
        return flops / self.amount if self.amount else math.inf

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "amount": self.amount,
            "unit": self.unit,
            "ceiling": self.ceiling,
            "seconds": self.seconds,
            "note": self.note,
            **({"parts": dict(self.parts)} if self.parts else {}),
            **({"serial": self.serial} if self.serial else {}),
        }
