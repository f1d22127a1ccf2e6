"""The one geometry database (``geometry.json``): its entries, read once per file, and the
writer ``tiledmm tune --commit`` uses. Below the kernels' face and :mod:`.shapes` alike."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

__all__ = ["DATABASE", "read_entries", "geometry_entries", "write_geometry"]

DATABASE = Path(__file__).resolve().parent / "geometry.json"


@cache
def read_entries(path: str) -> tuple[dict, ...]:
    """The entries of the database at ``path``, read once (until :func:`write_geometry`)."""
    return tuple(json.loads(Path(path).read_text())["entries"])


def geometry_entries(path: Path | None = None) -> list[dict]:
    """Copies of the geometry database's entries (``path``: another database file)."""
    return [dict(e) for e in read_entries(str(path or DATABASE))]


def write_geometry(path: Path, entries: list[dict]) -> None:
    """Rewrite the geometry database at ``path`` with ``entries`` (its format and ``about``
    kept), one entry per line as the shipped file is written, so a change reads as a diff of
    the entries it touches."""
    db = json.loads(Path(path).read_text())
    head = f' "format": {json.dumps(db["format"])},\n "about": {json.dumps(db["about"])},\n'
    body = ",\n".join("  " + json.dumps(e) for e in entries)
    Path(path).write_text("{\n" + head + ' "entries": [\n' + body + "\n ]\n}\n")
    read_entries.cache_clear()
