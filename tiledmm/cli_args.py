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
           "results_name", "checked"]  # fmt: skip


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
    ``bench.parse_shapes`` reads it the same way)."""
    from .bench import parse_shapes

    return checked(parse_shapes)(text) and text


def size_text(text: str) -> str:
    """``--worker-memory 80GiB``, ``--link-bandwidth 25GB/s``: a positive size (kept as text;
    ``cluster_text.parse_size`` reads it the same way)."""
    from .cluster_text import parse_size

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
