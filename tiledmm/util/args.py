"""Argument types of the CLI: every numeric and list argument is checked when it is parsed, so
a bad value is one line naming the argument (``tiledmm plan: error: argument --workers: must
be a positive integer, not '0'``) and exit status 2, before anything runs; no zero or empty
value silently becomes a default. Each is an ``argparse`` ``type=`` function raising
``argparse.ArgumentTypeError``. A leaf: it imports nothing of tiledmm at import time.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable

__all__ = ["positive_int", "non_negative_int", "positive_float", "size_list", "size_text",
           "results_name", "checked", "parse_shapes", "parse_size"]  # fmt: skip


def _int(text: str) -> int:
    try:
        return int(str(text).strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, not {text!r}") from None


def positive_int(text: str) -> int:
    """An integer >= 1 (worker counts, repeats, sizes)."""
    v = _int(text)
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, not {text!r}")
    return v


def non_negative_int(text: str) -> int:
    """An integer >= 0 (matrix dimensions, seeds)."""
    v = _int(text)
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be a non-negative integer, not {text!r}")
    return v


def positive_float(text: str) -> float:
    """A finite number > 0 (bandwidths, memory sizes in bytes)."""
    try:
        v = float(str(text).strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, not {text!r}") from None
    if not math.isfinite(v) or v <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, not {text!r}")
    return v


def size_list(text: str) -> str:
    """``--sizes``: a non-empty comma list of N or MxNxK with positive integers (kept as text;
    ``parse_shapes`` below reads it the same way)."""
    return checked(parse_shapes)(text) and text


def size_text(text: str) -> str:
    """``--worker-memory 80GiB``, ``--link-bandwidth 25GB/s``: a positive size (kept as text;
    ``parse_size`` below reads it the same way)."""
    v = checked(parse_size)(text)
    if not (isinstance(v, float) and math.isfinite(v) and v > 0):
        raise argparse.ArgumentTypeError(f"must be a positive size (80GiB, 25GB/s), not {text!r}")
    return text


def results_name(text: str) -> str:
    """``--name``: a file name inside the output folder (``NAME.json``): no folder part, not
    ``.`` or ``..``, not empty (``../escaped`` or ``/some/dir/victim`` wrote outside ``-o``)."""
    name = str(text)
    bad = [s for s in (os.sep, os.altsep, "\0") if s and s in name]
    if not name.strip() or bad or name in (".", "..") or name.startswith("."):
        raise argparse.ArgumentTypeError(
            f"must be a file name inside the output folder (letters, digits, - _ .; no "
            f"folder part, not starting with a dot), not {text!r}"
        )
    return name.removesuffix(".json")


def checked(parse: Callable[[str], object]) -> Callable[[str], object]:
    """``parse`` as an argparse type: its ``ValueError`` becomes the argument's error line."""

    def run(text: str) -> object:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    run.__name__ = getattr(parse, "__name__", "value")
    return run


def parse_shapes(text: str) -> list[tuple[int, int, int]]:
    """``"1024,4095,1000x3000x777"`` -> [(1024,)*3, (4095,)*3, (1000, 3000, 777)]."""
    shapes = []
    for item in filter(None, (s.strip().lower() for s in text.split(","))):
        try:
            parts = [int(p) for p in item.split("x")]
        except ValueError:
            parts = []
        if len(parts) == 1:
            parts *= 3
        if len(parts) != 3 or min(parts) < 1:
            raise ValueError(f"a size is N or MxNxK with positive integers, not {item!r}")
        shapes.append(tuple(parts))
    if not shapes:
        raise ValueError(f"no sizes in {text!r}: give N or MxNxK, comma separated")
    return shapes


_UNITS = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "KI": 2**10, "MI": 2**20, "GI": 2**30,
          "TI": 2**40}  # fmt: skip


def parse_size(text: str | float | None) -> float | None:
    """``"80GiB"``, ``"25GB/s"``, ``"1.5e9"`` -> a number (bytes or bytes/s); None stays None."""
    if text is None or isinstance(text, int | float):
        return text
    t = str(text).strip().upper().replace(" ", "").removesuffix("/S").removesuffix("B")
    num = t.rstrip("KMGTI")
    unit = t[len(num) :]
    try:
        return float(num) * _UNITS[unit]
    except (KeyError, ValueError):
        raise ValueError(f"expected a size like 80GiB, 25GB/s or 1.5e9, not {text!r}") from None
