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
call must not end the caller's program). :func:`validate` refuses what no backend may be. It
imports the Backend contract only.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

from ..planner.geometry import KERNEL_FAMILIES
from .backend import Backend

__all__ = ["PluginFailure", "isolated", "describe", "name_errors", "validate"]


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


def validate(backend: Any, plugin: str) -> None:
    """Refuse (raise) what no backend may be: not a Backend, no name, unknown kernels, no
    ``run``; adapt an old plugin's ``empty`` (no ``like=``)."""
    where = f"plugin {plugin!r} registered {backend!r}"
    if not isinstance(backend, Backend):
        raise TypeError(f"{where}, which is not a tiledmm.Backend instance (subclass it)")
    if not isinstance(backend.name, str) or not backend.name:
        raise ValueError(f"{where} without a name; set the class attribute `name`")
    bad = [k for k in backend.kernels if k not in KERNEL_FAMILIES]
    if not backend.kernels or bad:
        raise ValueError(
            f"{where} with kernels {tuple(backend.kernels)}; use a non-empty subset of "
            f"{KERNEL_FAMILIES}"
        )
    if type(backend).run is Backend.run:
        raise TypeError(f"{where}, which does not implement run(plan, a, b, out)")
    _adapt_empty(backend)


def _adapt_empty(backend: Any) -> None:
    """A plugin written before ``empty`` took ``like=`` keeps working: its method is wrapped
    once, here, so the API can always pass ``like``."""
    own = type(backend).empty
    if own is Backend.empty or "like" in inspect.signature(own).parameters:
        return
    bound = backend.empty
    backend.empty = lambda shape, dtype, like=None: bound(shape, dtype)  # type: ignore[method-assign]
