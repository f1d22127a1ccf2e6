"""Backend registry: pluggy plugins found through the ``tiledmm`` entry-point group.

Built-in backends register through the same group as third-party plugins. A plugin that fails
to import, to validate or to register is recorded as broken and skipped with a warning, whatever
it raises (``SystemExit`` included; ``KeyboardInterrupt`` goes through); a backend whose
``unavailable_reason()`` or ``device()`` raises is listed as unavailable, because of that; a
third-party backend's failing ``run`` names the backend and its plugin (``plugin_guard``).
Caches elsewhere key on :func:`generation`, which changes whenever the set of backends does, and
on :func:`expire` (``dispatch.clear_caches``: the tuning database changed).

Trust policy: the built-in backends' names and aliases, and ``"auto"``, are reserved. A
third-party backend may not take a reserved name (it is refused, with a warning, and listed as
a conflict in ``tiledmm plugins``); it may share a built-in alias ("cpu", "cuda", "cl"), but
ranks after every built-in on it, and ``backend="auto"`` considers it only if no built-in takes
the arrays, unless the user trusts it (``TILEDMM_TRUST_PLUGINS``). A backend registered in code
with :func:`register_backend` is trusted: the caller chose it.

Environment variables (booleans: 1/true/yes/on or 0/false/no/off):
  TILEDMM_PLUGINS=a,b                 load only these third-party plugins (built-ins always load)
  TILEDMM_DISABLE_PLUGIN_AUTOLOAD=1   load no third-party plugin
  TILEDMM_STRICT_PLUGINS=1            raise on a broken plugin instead of warning
  TILEDMM_TRUST_PLUGINS=a,b | all     let these plugins rank with the built-ins (aliases, auto)
"""

from __future__ import annotations

import os
import threading
import warnings
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

import pluggy

from . import hookspecs
from .backend import Backend
from .plugin_guard import describe, isolated, name_errors, validate

__all__ = ["PluginInfo", "BackendEntry", "PluginWarning", "get_backend", "registered",
           "candidates", "backends", "plugins", "reload", "register_backend", "generation",
           "expire", "is_trusted", "alias_target"]  # fmt: skip

GROUP = "tiledmm"
BUILTIN_DIST = "tiledmm"
# Names and aliases no third-party backend may take (the built-ins' own, declared in
# pyproject.toml's entry points and their classes; "auto" is the API's).
RESERVED = frozenset(
    {"auto", "numpy", "cupy", "numba-cuda", "opencl", "cpu", "reference", "cuda", "cl"}
)


class PluginWarning(UserWarning):
    """A plugin could not be loaded, or was refused; tiledmm carries on without it."""


@dataclass
class PluginInfo:
    name: str  # entry-point name
    value: str  # module it points to
    distribution: str
    version: str
    status: str = "ok"  # "ok" | "broken" | "disabled"
    error: str = ""
    backends: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class BackendEntry:
    """One row of :func:`tiledmm.backends`."""

    name: str
    aliases: tuple[str, ...]
    available: bool
    reason: str
    kernels: tuple[str, ...]
    dtypes: tuple[str, ...]
    device: str
    plugin: str
    trusted: bool = True


def env_flag(name: str) -> bool:
    """A boolean environment variable; an unreadable value warns and counts as off."""
    raw = os.environ.get(name, "").strip().lower()
    if raw in ("", "0", "false", "no", "off"):
        return False
    if raw in ("1", "true", "yes", "on"):
        return True
    warnings.warn(
        f"{name}={raw!r} is not a boolean (use 1 or 0); treated as 0", PluginWarning, stacklevel=3
    )
    return False


def _env_list(name: str) -> set[str]:
    return {s.strip() for s in os.environ.get(name, "").split(",") if s.strip()}


class _Registry:
    """One loaded state: plugins, backends, their owners. Built whole, then published."""

    def __init__(self) -> None:
        self.pm = pluggy.PluginManager(GROUP)
        self.pm.add_hookspecs(hookspecs)
        self.backends: dict[str, Backend] = {}
        self.owner: dict[str, str] = {}
        self.trusted: set[str] = set()  # backend names
        self.plugins: list[PluginInfo] = []
        self.reasons: dict[str, str | None] = {}
        self.disabled_by: dict[str, str] = {}  # entry-point name -> the variable that did it

    def load(self) -> None:
        strict = env_flag("TILEDMM_STRICT_PLUGINS")
        only = _env_list("TILEDMM_PLUGINS")
        no_auto = env_flag("TILEDMM_DISABLE_PLUGIN_AUTOLOAD")
        trust = _env_list("TILEDMM_TRUST_PLUGINS")
        seen: set[tuple[str, str]] = set()
        eps = sorted(
            entry_points(group=GROUP),
            key=lambda e: (getattr(e.dist, "name", "?") != BUILTIN_DIST, e.name),
        )
        for ep in eps:
            if (ep.name, ep.value) in seen:  # the same distribution found twice on sys.path
                continue
            seen.add((ep.name, ep.value))
            dist = ep.dist.name if ep.dist else "?"
            info = PluginInfo(ep.name, ep.value, dist, ep.dist.version if ep.dist else "?")
            self.plugins.append(info)
            builtin = dist == BUILTIN_DIST
            if not builtin and no_auto:
                info.status = "disabled"
                self.disabled_by[ep.name] = "TILEDMM_DISABLE_PLUGIN_AUTOLOAD=1"
                continue
            if not builtin and only and ep.name not in only:
                info.status = "disabled"
                self.disabled_by[ep.name] = f"TILEDMM_PLUGINS={os.environ['TILEDMM_PLUGINS']}"
                continue
            self._load_one(ep, info, builtin or "all" in trust or ep.name in trust, strict)
        unknown = sorted(only - {p.name for p in self.plugins})
        if unknown:
            names = ", ".join(p.name for p in self.plugins) or "none"
            warnings.warn(f"TILEDMM_PLUGINS names {', '.join(map(repr, unknown))}, which matches "
                          f"no installed plugin (installed: {names}); check the spelling",
                          PluginWarning, stacklevel=4)  # fmt: skip

    def _load_one(self, ep: Any, info: PluginInfo, trusted: bool, strict: bool) -> None:
        module = None
        try:
            module = ep.load()
            self.pm.register(module, name=ep.name)
            self.pm.check_pending()
            impls = self.pm.hook.register_backends.get_hookimpls()
            for impl in [i for i in impls if i.plugin is module]:
                impl.function(register=lambda backend: self.add(backend, info, trusted))
        except BaseException as exc:  # any plugin failure is isolated, SystemExit included
            if not isolated(exc):
                raise
            self._mark_broken(info, module, exc, strict)

    def _mark_broken(self, info: PluginInfo, module: Any, exc: BaseException,
                     strict: bool) -> None:  # fmt: skip
        if module is not None and self.pm.is_registered(module):
            self.pm.unregister(module)
        for name in info.backends:
            self.backends.pop(name, None)
            self.owner.pop(name, None)
            self.trusted.discard(name)
        info.status, info.error, info.backends = "broken", describe(exc), []
        if strict:
            raise RuntimeError(
                f"tiledmm plugin {info.name!r} ({info.value}, from {info.distribution}) "
                f"failed: {info.error}"
            ) from exc
        warnings.warn(f"tiledmm plugin {info.name!r} ({info.value}) was skipped: {info.error}",
                      PluginWarning, stacklevel=5)  # fmt: skip

    def add(self, backend: Any, info: PluginInfo | None = None, trusted: bool = True) -> None:
        plugin = info.name if info else "(registered in code)"
        builtin = info is not None and info.distribution == BUILTIN_DIST
        validate(backend, plugin)
        if backend.name in self.backends:
            raise ValueError(
                f"backend name {backend.name!r} from plugin {plugin!r} is already registered by "
                f"plugin {self.owner[backend.name]!r}; pick another name"
            )
        if not builtin and backend.name in RESERVED:
            raise ValueError(
                f"backend name {backend.name!r} from plugin {plugin!r} is reserved for "
                f"tiledmm's built-in backends; pick another name"
            )
        if "auto" in backend.aliases:
            raise ValueError(f"plugin {plugin!r} declares the alias 'auto', which is reserved")
        if info is not None and not builtin:  # its errors name it (plugin_guard)
            name_errors(backend, f"plugin {plugin!r}, {info.distribution}")
        self.backends[backend.name] = backend
        self.owner[backend.name] = plugin
        if trusted:
            self.trusted.add(backend.name)
        if info is not None:
            info.backends.append(backend.name)

    def reason(self, name: str) -> str | None:
        """Why backend ``name`` is unavailable (None: it is): its own answer, or what its
        ``unavailable_reason()`` or ``device()`` raised (a backend that cannot describe its
        device cannot be planned for)."""
        if name not in self.reasons:
            be, step = self.backends[name], "availability check"
            try:
                why = be.unavailable_reason()
                if why is None:
                    step = "device()"
                    be.device()
            except BaseException as exc:  # a probe that crashes means unavailable
                if not isolated(exc):
                    raise
                owner = self.owner.get(name, "")
                by = f" (plugin {owner!r})" if owner and not owner.startswith("(") else ""
                why = f"its {step} failed{by}: {describe(exc)}"
            self.reasons[name] = why
        return self.reasons[name]

    def rank(self, be: Backend) -> tuple[int, int]:
        """Sort key: trusted (built-in) backends first, then by descending priority."""
        return (be.name not in self.trusted, -be.priority)


_LOCK = threading.RLock()
_CURRENT: _Registry | None = None
_GENERATION = 0


def _registry() -> _Registry:
    """The loaded registry; the first caller loads it, other threads wait for it."""
    reg = _CURRENT
    if reg is not None:
        return reg
    with _LOCK:
        if _CURRENT is None:
            fresh = _Registry()
            fresh.load()  # strict mode raises here: nothing is published, the next use retries
            _publish(fresh)
        return _CURRENT


def _publish(reg: _Registry | None) -> None:
    global _CURRENT, _GENERATION
    _CURRENT = reg
    _GENERATION += 1


def _after_fork_in_child() -> None:
    """A forked child re-asks each backend whether it is available (OpenCL cannot run in a
    child forked after it started: the backend then says why), and has a lock of its own."""
    global _LOCK
    _LOCK = threading.RLock()
    if _CURRENT is not None:
        _CURRENT.reasons.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def generation() -> int:
    """A number that changes whenever the set of backends changes, or :func:`expire` is called
    (for caches to key on: plans, backend choices, the hot paths)."""
    return _GENERATION


def expire() -> None:
    """A new :func:`generation`, the backends unchanged: every cache keyed on it expires."""
    with _LOCK:
        _publish(_CURRENT)


def reload() -> None:
    """Forget every plugin and load the entry points again (after installing a plugin)."""
    with _LOCK:
        _publish(None)
        _registry()


def register_backend(backend: Backend) -> None:
    """Register a backend object directly (scripts, notebooks, tests). It is trusted."""
    with _LOCK:
        _registry().add(backend)
        _publish(_CURRENT)


def plugins() -> list[PluginInfo]:
    return list(_registry().plugins)


def is_trusted(name: str) -> bool:
    return name in _registry().trusted


def get_backend(name: str) -> Backend:
    """A registered, available backend by name or alias (``"auto"`` is not accepted here).

    An alias goes to the available backend that ranks first: built-in and trusted backends
    before others, then by priority."""
    reg = _registry()
    be = reg.backends.get(name)
    if be is None:
        sharing = _sharing(reg, name)
        matches = [b for b in sharing if reg.reason(b.name) is None]
        if not matches:
            if sharing:
                why = "; ".join(f"{b.name}: {reg.reason(b.name)}" for b in sharing)
                raise RuntimeError(f"no available backend for {name!r} ({why})")
            raise ValueError(_unknown(reg, name))
        be = matches[0]
    why = reg.reason(be.name)
    if why:
        raise RuntimeError(f"backend {be.name!r} is unavailable, because {why}")
    return be


def registered() -> list[Backend]:
    """Every registered backend object, available or not (for offline tools that read what a
    backend ships, such as its geometry table; nothing here runs on a device)."""
    return list(_registry().backends.values())


def _sharing(reg: _Registry, alias: str) -> list[Backend]:
    """The backends that declare ``alias``, best-ranked first."""
    return sorted((b for b in reg.backends.values() if alias in b.aliases), key=reg.rank)


def alias_target(alias: str) -> str | None:
    """The backend an alias runs now (what :func:`get_backend` picks), or None when no
    backend that declares it is available. A backend's name is not an alias."""
    reg = _registry()
    if alias in reg.backends:
        return alias
    found = [b.name for b in _sharing(reg, alias) if reg.reason(b.name) is None]
    return found[0] if found else None


def _unknown(reg: _Registry, name: str) -> str:
    known = sorted(reg.backends) + sorted({a for b in reg.backends.values() for a in b.aliases})
    msg = f"unknown backend {name!r}; known: {', '.join(known) or 'none'}"
    if name in reg.disabled_by:
        return f"backend {name!r} comes from plugin {name!r}, disabled by {reg.disabled_by[name]}"
    if reg.disabled_by:
        off = ", ".join(f"{p} ({v})" for p, v in sorted(reg.disabled_by.items()))
        msg += f"; disabled plugins: {off}"
    return msg


def candidates(sample: Any, kernel: str | None = None) -> list[Backend]:
    """Available backends that take ``sample`` (and have ``kernel``, if given), best-ranked
    first. Untrusted third-party backends are included only when no trusted one qualifies."""
    reg = _registry()
    found = [
        b
        for b in reg.backends.values()
        if (kernel is None or kernel in b.kernels)
        and reg.reason(b.name) is None
        and _accepts(b, sample)
    ]
    trusted = [b for b in found if b.name in reg.trusted]
    return sorted(trusted or found, key=reg.rank)


def _accepts(be: Backend, sample: Any) -> bool:
    try:
        return bool(be.accepts(sample))
    except BaseException as exc:  # a plugin's accepts() that raises takes nothing
        if not isolated(exc):
            raise
        return False


def backends() -> list[BackendEntry]:
    """Every registered backend, available or not, with the reason when not."""
    reg = _registry()
    rows = []
    for name, be in reg.backends.items():
        why = reg.reason(name)
        try:
            dev = be.device().name if why is None else ""
        except BaseException as exc:  # reason() probed it; a device that fails only now
            if not isolated(exc):
                raise
            dev = f"(device query failed: {describe(exc)})"
        rows.append(BackendEntry(name, tuple(be.aliases), why is None, why or "",
                                 tuple(be.kernels), tuple(be.dtypes), dev,
                                 reg.owner.get(name, ""), name in reg.trusted))  # fmt: skip
    return rows
