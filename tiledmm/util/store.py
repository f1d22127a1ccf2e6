"""The files tiledmm keeps in the user cache directory (measured ceilings, tuned tiles): where
they live, and one reader that re-reads a file only when it changes, keeps what validates, and
warns once per state of the file about what it ignored."""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["cache_dir", "CachedFile"]


def cache_dir() -> Path:
    """``TILEDMM_CACHE_DIR``, else the platformdirs user cache directory for tiledmm."""
    root = os.environ.get("TILEDMM_CACHE_DIR")
    if not root:
        import platformdirs

        root = platformdirs.user_cache_dir("tiledmm")
    return Path(root)


class CachedFile:
    """One file in :func:`cache_dir`, read through ``read(path) -> (valid data, problems)``.

    ``load()`` never raises: a missing file gives ``empty``; problems give one warning of
    ``category`` per state of the file (``ignored, because ...`` when the whole file is bad,
    else the list), ending with ``repair`` (what rewrites the file)."""

    def __init__(self, name: str, read: Callable[[Path], tuple[Any, list[str]]], *,
                 what: str, category: type[Warning], repair: str, empty: Any) -> None:  # fmt: skip
        self.name, self.read, self.what = name, read, what
        self.category, self.repair, self.empty = category, repair, empty
        self._state: tuple[Any, Any] = (None, empty)
        self._lock = threading.Lock()

    def path(self) -> Path:
        return cache_dir() / self.name

    def load(self) -> Any:
        path = self.path()
        try:
            st = path.stat()
        except OSError:
            return self.empty
        stamp = (str(path), st.st_mtime_ns, st.st_size)
        if self._state[0] == stamp:
            return self._state[1]
        data, problems = self.read(path)
        with self._lock:
            fresh = self._state[0] != stamp
            self._state = (stamp, data)
        if problems and fresh:
            whole = (
                not data
                and len(problems) == 1
                and not problems[0].startswith(("the record", "entry"))
            )
            what = "ignored, because " + problems[0] if whole else "; ".join(problems)
            warnings.warn(f"{self.what} {path}: {what}; {self.repair}", self.category, stacklevel=3)
        return data
