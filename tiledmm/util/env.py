"""Settings read from environment variables, one rule for all of them: a switch is off for
``0``, ``false``, ``no`` or ``off`` (any case), and a duration is seconds (``2``, ``2s``) or
milliseconds (``500ms``); an unreadable value falls back to the default. A leaf.
"""

from __future__ import annotations

import os

__all__ = ["switch", "seconds"]

_OFF = ("0", "false", "no", "off")


def switch(name: str, default: bool = True) -> bool:
    """Whether the environment turns ``name`` on (unset or empty: ``default``)."""
    text = os.environ.get(name, "").strip().lower()
    return default if not text else text not in _OFF


def seconds(name: str, default: float) -> float:
    """The duration ``name`` gives, in seconds (unset, empty or unreadable: ``default``)."""
    t = os.environ.get(name, "").strip().lower()
    try:
        return float(t[:-2]) / 1e3 if t.endswith("ms") else float(t.rstrip("s")) if t else default
    except ValueError:
        return default
