"""What the registry does about a plugin's exceptions: which ones it isolates, and how a
third-party backend's failing ``run`` is made to name the backend and its plugin.

Every exception a plugin raises while it loads, registers, reports its availability or
describes its device is isolated (the plugin is broken, or the backend unavailable, with the
reason), ``SystemExit`` and other ``BaseException``s included; only ``KeyboardInterrupt`` goes
through: the user asked to stop. What a third-party backend's ``run``/``run_batched`` raises
keeps its type, and names the backend: ``backend 'name' (plugin 'ep', dist) failed in run:``
goes in front of the message, except for ``ValueError`` and ``TypeError``, numpy's errors for
the caller's arguments (``output array is read-only``), whose words stay numpy's and which get
that line as a note (shown under the traceback), as does an exception whose type cannot be
rebuilt from a message. A ``SystemExit`` from a kernel becomes a ``RuntimeError`` (a library
call must not end the caller's program). A leaf of the core: it imports nothing of tiledmm.
"""

from __future__ import annotations

import functools
from typing import Any

__all__ = ["PluginFailure", "isolated", "describe", "name_errors"]


class PluginFailure(RuntimeError):
    """A third-party backend raised something that is not an ``Exception`` (``SystemExit``)
    in ``run``; ``__cause__`` holds it."""


def isolated(exc: BaseException) -> bool:
    """Whether the registry isolates ``exc`` (everything but ``KeyboardInterrupt``)."""
    return not isinstance(exc, KeyboardInterrupt)


def describe(exc: BaseException) -> str:
    """``Type: message`` of an exception (``SystemExit: 3`` for ``sys.exit(3)``)."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _renamed(exc: Exception, prefix: str) -> Exception:
    """``exc`` as the same type with ``prefix`` in front of its message, else ``exc`` with
    the prefix as a note (ValueError and TypeError; a type that needs more than a message)."""
    text = str(exc)
    new = None
    if not isinstance(exc, ValueError | TypeError):  # numpy's words for the caller's mistakes
        try:
            new = type(exc)(f"{prefix}: {text}" if text else prefix)
        except Exception:  # noqa: BLE001 - a constructor of its own: keep the original
            new = None
    if new is None or prefix not in str(new):
        exc.add_note(prefix)
        return exc
    return new


def name_errors(backend: Any, who: str) -> None:
    """Wrap ``backend``'s ``run`` and ``run_batched`` (on the instance) so what they raise
    names the backend and ``who`` (its plugin)."""
    prefix = f"backend {backend.name!r} ({who})"
    for meth in ("run", "run_batched"):
        bound = getattr(backend, meth)

        @functools.wraps(bound)
        def guarded(*args: Any, _bound: Any = bound, _meth: str = meth, **kwargs: Any) -> Any:
            try:
                return _bound(*args, **kwargs)
            except Exception as exc:
                if prefix in str(exc) or prefix in " ".join(getattr(exc, "__notes__", ())):
                    raise
                new = _renamed(exc, f"{prefix} failed in {_meth}")
                if new is exc:
                    raise
                raise new.with_traceback(exc.__traceback__) from exc
            except BaseException as exc:
                if not isolated(exc):
                    raise
                raise PluginFailure(f"{prefix} raised {describe(exc)} in {_meth}") from exc

        setattr(backend, meth, guarded)
