"""Safe writes of the files tiledmm keeps in its cache directory (the tuning database, the
calibration cache, the tuner's logs), for several processes at once.

- :func:`locked`: a cross-process lock on a sibling lock file (``.NAME.lock``, ``fcntl.flock``)
  held while a writer reads, merges and replaces the file, so two processes saving at the same
  time both keep their entries. Where ``fcntl`` is missing (Windows) or the filesystem refuses
  locks (some network mounts), the lock degrades to a lock between this process's threads: the
  write stays atomic, but a concurrent save in another process can then lose entries.
- :func:`atomic_write`: a temporary file in the same folder, flushed and fsynced, then
  ``os.replace``: a reader sees the old file or the new one, never a torn one.
- :func:`append_line`: one line appended under the lock, flushed and fsynced.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - not on Linux or macOS
    fcntl = None  # type: ignore[assignment]

__all__ = ["locked", "atomic_write", "append_line", "LOCK_TIMEOUT"]

#: seconds a writer waits for another process's lock before giving up with an error
LOCK_TIMEOUT = 60.0
_THREADS = threading.RLock()


def _after_fork_in_child() -> None:
    global _THREADS
    _THREADS = threading.RLock()  # a thread of the parent may have held it at the fork


os.register_at_fork(after_in_child=_after_fork_in_child)


def lock_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.lock")


@contextlib.contextmanager
def locked(path: Path, timeout: float = LOCK_TIMEOUT) -> Iterator[None]:
    """Hold the write lock of ``path`` (see the module docstring)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with _THREADS:
        fd = None
        if fcntl is not None:
            try:
                fd = os.open(lock_path(path), os.O_RDWR | os.O_CREAT, 0o644)
            except OSError:
                fd = None  # a folder we cannot create files in: the write itself will say so
        try:
            if fd is not None:
                _acquire(fd, path, timeout)
            yield
        finally:
            if fd is not None:
                with contextlib.suppress(OSError):
                    fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)


def _acquire(fd: int, path: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    delay = 0.005
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{path}: another process has held its lock ({lock_path(path)}) for over "
                    f"{timeout:.0f} s; try again when it is done"
                ) from None
            time.sleep(delay)
            delay = min(0.1, delay * 2)
        except OSError:  # no locks on this filesystem: atomic writes without the lock
            return


def atomic_write(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` atomically (temporary file, fsync, ``os.replace``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError, AttributeError):  # the rename itself, on disk
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def append_line(path: Path, line: str) -> None:
    """Append ``line`` (a newline is added) to ``path`` under its lock, flushed and fsynced."""
    with locked(path), open(path, "a", encoding="utf-8") as f:
        f.write(line.rstrip("\n") + "\n")
        f.flush()
        os.fsync(f.fileno())
