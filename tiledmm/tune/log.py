"""The tuner's log: one JSON record per line and candidate, per device and backend, beside the
user tuning database; appended as each candidate is measured (``atomicfile.append_line``),
read back to resume an interrupted run."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

from ..core import tuning

__all__ = ["log_path", "read_log"]


def log_path(device_name: str, backend: str) -> Path:
    """The resumable log of one device and backend, beside the user tuning database."""
    slug = re.sub(r"[^A-Za-z0-9]+", "-", f"{device_name}--{backend}").strip("-").lower()
    return tuning.database_path().parent / "tune" / f"{slug}.jsonl"


def read_log(path: Path) -> dict[tuple[str, str], dict]:
    """The log's records by (task, geometry), read line by line: a line that is not UTF-8,
    not JSON (a torn last line of an interrupted run) or not a record is skipped, and counted
    in one :class:`~tiledmm.core.tuning.TuningWarning` naming the file."""
    out: dict[tuple[str, str], dict] = {}
    bad = 0
    try:
        f = path.open("rb")
    except FileNotFoundError:
        return out
    except OSError as exc:
        warnings.warn(f"tune log {path} cannot be read ({exc.strerror or exc}); starting "
                      "without it", tuning.TuningWarning, stacklevel=4)  # fmt: skip
        return out
    with f:
        for raw in f:
            if not raw.strip():
                continue
            try:
                r = json.loads(raw.decode("utf-8"))
                if r["status"] == "ok" and not all(
                    isinstance(r[x], int | float) and r[x] > 0 for x in ("gflops", "seconds")
                ):
                    raise ValueError("an ok record without its times")
                out[(str(r["task"]), str(r["geometry"]))] = r
            except (ValueError, KeyError, TypeError, RecursionError):
                bad += 1
    if bad:
        warnings.warn(f"tune log {path}: {bad} unreadable line(s) skipped (not UTF-8, torn or "
                      "not a record); their candidates are measured again", tuning.TuningWarning,
                      stacklevel=4)  # fmt: skip
    return out
