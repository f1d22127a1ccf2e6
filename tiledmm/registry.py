"""Backend registry: pluggy plugins found through the ``tiledmm`` entry-point group.

Built-in backends register through the same group as third-party plugins. A plugin that fails
to import, to validate or to register is recorded as broken and skipped with a warning.

Environment variables:
  TILEDMM_PLUGINS=a,b                 load only these entry points (others are "disabled")
  TILEDMM_DISABLE_PLUGIN_AUTOLOAD=1   load only the entry points tiledmm itself ships
  TILEDMM_STRICT_PLUGINS=1            raise on a broken plugin instead of warning
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

import pluggy

from . import hookspecs
from .backend import KERNEL_FAMILIES, Backend

__all__ = [
    "PluginInfo",
    "BackendEntry",
    "get_backend",
    "backends",
    "plugins",
    "resolve_backend_name",
    "reload",
    "register_backend",
]

GROUP = "tiledmm"


class PluginWarning(UserWarning):
    """A plugin could not be loaded; tiledmm carries on without it."""


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


class _Registry:
    def __init__(self) -> None:
        self.pm: pluggy.PluginManager | None = None
        self.backends: dict[str, Backend] = {}
        self.owner: dict[str, str] = {}
        self.plugins: list[PluginInfo] = []
        self.reasons: dict[str, str | None] = {}

    def load(self) -> None:
        pm = pluggy.PluginManager(GROUP)
        pm.add_hookspecs(hookspecs)
        self.pm, self.backends, self.owner, self.plugins, self.reasons = pm, {}, {}, [], {}
        strict = os.environ.get("TILEDMM_STRICT_PLUGINS", "") not in ("", "0")
        only = {s.strip() for s in os.environ.get("TILEDMM_PLUGINS", "").split(",") if s.strip()}
        no_auto = os.environ.get("TILEDMM_DISABLE_PLUGIN_AUTOLOAD", "") not in ("", "0")
        seen = set()
        for ep in sorted(
            entry_points(group=GROUP),
            key=lambda e: (getattr(e.dist, "name", "?") != "tiledmm", e.name),
        ):
            dist = ep.dist.name if ep.dist else "?"
            if (ep.name, ep.value) in seen:  # the same distribution found twice on sys.path
                continue
            seen.add((ep.name, ep.value))
            info = PluginInfo(ep.name, ep.value, dist, ep.dist.version if ep.dist else "?")
            self.plugins.append(info)
            if (only and ep.name not in only) or (no_auto and dist != "tiledmm"):
                info.status = "disabled"
                continue
            module = None
            try:
                module = ep.load()
                pm.register(module, name=ep.name)
                pm.check_pending()
                self._call(module, info)
            except Exception as exc:  # noqa: BLE001 - any plugin failure is isolated
                self._mark_broken(info, module, exc, strict)

    def _mark_broken(self, info: PluginInfo, module: Any, exc: Exception, strict: bool) -> None:
        if module is not None and self.pm.is_registered(module):
            self.pm.unregister(module)
        for name in info.backends:
            self.backends.pop(name, None)
            self.owner.pop(name, None)
        info.status, info.error, info.backends = "broken", f"{type(exc).__name__}: {exc}", []
        if strict:
            raise RuntimeError(
                f"tiledmm plugin {info.name!r} ({info.value}, from {info.distribution}) "
                f"failed: {info.error}"
            ) from exc
        warnings.warn(
            f"tiledmm plugin {info.name!r} ({info.value}) was skipped: {info.error}",
            PluginWarning,
            stacklevel=3,
        )

    def _call(self, module: Any, info: PluginInfo) -> None:
        impls = [i for i in self.pm.hook.register_backends.get_hookimpls() if i.plugin is module]
        for impl in impls:
            impl.function(register=lambda backend: self.add(backend, info))

    def add(self, backend: Any, info: PluginInfo | None = None) -> None:
        plugin = info.name if info else "(registered in code)"
        _validate(backend, plugin)
        if backend.name in self.backends:
            raise ValueError(
                f"backend name {backend.name!r} from plugin {plugin!r} is already registered by "
                f"plugin {self.owner[backend.name]!r}; pick another name"
            )
        self.backends[backend.name] = backend
        self.owner[backend.name] = plugin
        if info is not None:
            info.backends.append(backend.name)

    def reason(self, name: str) -> str | None:
        if name not in self.reasons:
            try:
                self.reasons[name] = self.backends[name].unavailable_reason()
            except Exception as exc:  # noqa: BLE001 - a probe that crashes means unavailable
                self.reasons[name] = f"availability check failed: {type(exc).__name__}: {exc}"
        return self.reasons[name]


def _validate(backend: Any, plugin: str) -> None:
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


_REG = _Registry()
_LOADED = False


def _registry() -> _Registry:
    global _LOADED
    if not _LOADED:
        _LOADED = True
        try:
            _REG.load()
        except BaseException:  # strict mode: stay unloaded so the next use raises again
            _LOADED = False
            raise
    return _REG


def reload() -> None:
    """Forget every plugin and load the entry points again (after installing a plugin)."""
    global _LOADED
    _LOADED = False
    from . import api, planner

    planner._cached_plan.cache_clear()
    api._clear_caches()
    _registry()


def register_backend(backend: Backend) -> None:
    """Register a backend object directly (scripts, notebooks, tests)."""
    _registry().add(backend)


def plugins() -> list[PluginInfo]:
    return list(_registry().plugins)


def _by_alias(alias: str) -> list[Backend]:
    reg = _registry()
    found = [b for b in reg.backends.values() if alias in b.aliases and reg.reason(b.name) is None]
    return sorted(found, key=lambda b: -b.priority)


def get_backend(name: str) -> Backend:
    """A registered, available backend by name or alias (``"auto"`` is not accepted here)."""
    reg = _registry()
    be = reg.backends.get(name)
    if be is None:
        matches = _by_alias(name)
        if not matches:
            known = sorted(reg.backends) + sorted(
                {a for b in reg.backends.values() for a in b.aliases}
            )
            if any(name in b.aliases for b in reg.backends.values()):
                raise RuntimeError(f"no available backend for {name!r}; `tiledmm info` says why")
            raise ValueError(f"unknown backend {name!r}; known: {', '.join(known) or 'none'}")
        be = matches[0]
    why = reg.reason(be.name)
    if why:
        raise RuntimeError(f"backend {be.name!r} is unavailable, because {why}")
    return be


def resolve_backend_name(
    name: str,
    *,
    dtype: str = "float32",
    shape: tuple[int, int, int] = (1, 1, 1),
    sample: Any = None,
) -> str:
    """Resolve "auto" and aliases to a backend name.

    "auto" keeps the data where it lives: among available backends whose ``accepts`` takes
    ``sample`` (a NumPy array when none is given), the one with the lowest predicted time.
    """
    if name != "auto":
        return get_backend(name).name
    import numpy as np

    from .planner import plan as _plan

    reg = _registry()
    probe = np.empty((0, 0)) if sample is None else sample
    cands = [b for b in reg.backends.values() if reg.reason(b.name) is None and b.accepts(probe)]
    if not cands:
        raise RuntimeError("no available backend accepts these arrays; see `tiledmm info`")
    if len(cands) == 1:
        return cands[0].name
    m, n, k = shape

    def cost(b: Backend) -> tuple[float, int]:
        try:
            t = _plan(m, n, k, dtype=dtype, backend=b.name).predicted_seconds
        except Exception:  # noqa: BLE001 - a backend that cannot plan this is not a candidate
            t = float("inf")
        return (t, -b.priority)

    return min(cands, key=cost).name


def backends() -> list[BackendEntry]:
    """Every registered backend, available or not, with the reason when not."""
    reg = _registry()
    rows = []
    for name, be in reg.backends.items():
        why = reg.reason(name)
        try:
            dev = be.device().name if why is None else ""
        except Exception as exc:  # noqa: BLE001
            dev = f"(device query failed: {exc})"
        rows.append(
            BackendEntry(
                name,
                tuple(be.aliases),
                why is None,
                why or "",
                tuple(be.kernels),
                tuple(be.dtypes),
                dev,
                reg.owner.get(name, ""),
            )
        )
    return rows
