"""Registry tests with throwaway plugins installed through real entry points.

Each plugin is a module plus a ``*.dist-info`` folder (METADATA + entry_points.txt) in a temp
dir put on sys.path: importlib.metadata finds it exactly as it finds a pip-installed plugin.
Every test leaves the registry reloaded with the environment it found.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import textwrap

import pytest

import tiledmm
from tiledmm import cli, registry

ENV_VARS = ("TILEDMM_PLUGINS", "TILEDMM_DISABLE_PLUGIN_AUTOLOAD", "TILEDMM_STRICT_PLUGINS")

GOOD = """
import tiledmm

class Throwaway(tiledmm.Backend):
    name = "{backend}"
    kernels = ("naive",)
    aliases = {aliases!r}
    priority = {priority}

    def unavailable_reason(self):
        return {reason!r}

    def run(self, plan, a, b, out):
        out[...] = a @ b

@tiledmm.hookimpl
def register_backends(register):
    register(Throwaway())
"""


@pytest.fixture
def plugin_env(tmp_path):
    """Returns ``install(ep_name, source)``; env vars set in the test are restored after it."""
    saved = {k: os.environ.get(k) for k in ENV_VARS}
    for k in ENV_VARS:
        os.environ.pop(k, None)
    modules: list[str] = []
    sys.path.insert(0, str(tmp_path))

    def install(ep_name: str, source: str) -> str:
        module = f"tiledmm_throwaway_{ep_name.replace('-', '_')}"
        (tmp_path / f"{module}.py").write_text(textwrap.dedent(source))
        info = tmp_path / f"{module}-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1\n")
        (info / "entry_points.txt").write_text(f"[tiledmm]\n{ep_name} = {module}\n")
        modules.append(module)
        importlib.invalidate_caches()
        return module

    yield install
    sys.path.remove(str(tmp_path))
    for m in modules:
        sys.modules.pop(m, None)
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    importlib.invalidate_caches()
    registry.reload()


def good(backend="throwaway", aliases=(), priority=0, reason=None) -> str:
    return GOOD.format(backend=backend, aliases=tuple(aliases), priority=priority, reason=reason)


def info(ep_name: str) -> tiledmm.PluginInfo:
    return next(p for p in tiledmm.plugins() if p.name == ep_name)


def load_warned(plugin_env, ep_name: str, source: str, match: str | None = None):
    """Install a plugin, reload expecting a PluginWarning, and return its PluginInfo."""
    plugin_env(ep_name, source)
    with pytest.warns(registry.PluginWarning, match=match):
        registry.reload()
    return info(ep_name)


def test_throwaway_plugin_loads_through_entry_point(plugin_env):
    module = plugin_env("throwaway", good())
    registry.reload()
    p = info("throwaway")
    assert (p.status, p.backends, p.distribution, p.value) == ("ok", ["throwaway"], module, module)
    row = next(r for r in tiledmm.backends() if r.name == "throwaway")
    assert row.available and row.plugin == "throwaway"
    import numpy as np

    a = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(tiledmm.matmul(a, a.T, backend="throwaway"), a @ a.T)


def test_broken_import_is_isolated(plugin_env):
    src = "raise ImportError('no such device library: libfoo')\n"
    p = load_warned(plugin_env, "crashy", src, match="crashy")
    assert p.status == "broken" and "libfoo" in p.error and p.backends == []
    assert info("numpy").status == "ok"
    assert tiledmm.get_backend("numpy").name == "numpy"


def test_malformed_hookimpl_names_plugin_and_hook(plugin_env):
    src = "import tiledmm\n\n@tiledmm.hookimpl\ndef register_backends(reg):\n    pass\n"
    p = load_warned(plugin_env, "badarg", src)
    assert p.status == "broken"
    assert "badarg" in p.error and "register_backends" in p.error and "reg" in p.error


def test_misspelled_hook_is_broken(plugin_env):
    src = "import tiledmm\n\n@tiledmm.hookimpl\ndef register_backend(register):\n    pass\n"
    p = load_warned(plugin_env, "typo", src)
    assert p.status == "broken" and "register_backend" in p.error


def test_duplicate_backend_name_keeps_first_owner(plugin_env):
    plugin_env("zz-dup", good(backend="numpy"))
    with pytest.warns(registry.PluginWarning, match="already registered"):
        registry.reload()
    assert info("zz-dup").status == "broken" and "numpy" in info("zz-dup").error
    row = next(r for r in tiledmm.backends() if r.name == "numpy")
    assert row.plugin == "numpy"


def test_invalid_backend_object_is_broken(plugin_env):
    src = "import tiledmm\n\n@tiledmm.hookimpl\ndef register_backends(register):\n"
    src += "    register(object())\n"
    plugin_env("notbackend", src)
    with pytest.warns(registry.PluginWarning, match="not a tiledmm.Backend"):
        registry.reload()
    assert info("notbackend").status == "broken"


def test_tiledmm_plugins_selects_entry_points(plugin_env):
    plugin_env("throwaway", good())
    os.environ["TILEDMM_PLUGINS"] = "throwaway"
    registry.reload()
    assert info("throwaway").status == "ok"
    assert info("numpy").status == "disabled"
    assert [r.name for r in tiledmm.backends()] == ["throwaway"]


def test_disable_autoload_keeps_only_builtins(plugin_env):
    plugin_env("throwaway", good())
    os.environ["TILEDMM_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    registry.reload()
    assert info("throwaway").status == "disabled"
    assert info("numpy").status == "ok"
    assert all(p.status == "disabled" for p in tiledmm.plugins() if p.distribution != "tiledmm")


def test_strict_mode_raises_and_names_plugin(plugin_env):
    plugin_env("crashy", "raise RuntimeError('boom')\n")
    os.environ["TILEDMM_STRICT_PLUGINS"] = "1"
    with pytest.raises(RuntimeError, match="crashy.*boom"):
        registry.reload()
    with pytest.raises(RuntimeError, match="crashy"):  # still strict on the next use
        tiledmm.backends()


def test_plugins_json(plugin_env, capsys):
    plugin_env("throwaway", good())
    plugin_env("crashy", "raise ImportError('libfoo')\n")
    with pytest.warns(registry.PluginWarning):
        registry.reload()
    assert cli.main(["plugins", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["throwaway"]["status"] == "ok" and rows["throwaway"]["backends"] == ["throwaway"]
    assert rows["crashy"]["status"] == "broken" and "libfoo" in rows["crashy"]["error"]
    assert set(rows["numpy"]) == {
        "name",
        "value",
        "distribution",
        "version",
        "status",
        "error",
        "backends",
    }
    assert cli.main(["plugins"]) == 0
    assert "broken" in capsys.readouterr().out


def test_cpu_alias_goes_to_highest_available_priority(plugin_env):
    plugin_env("fast-off", good("fastcpu-off", ("cpu",), 100, "its device is switched off"))
    plugin_env("fast-on", good("fastcpu-on", ("cpu",), 50))
    registry.reload()
    assert tiledmm.get_backend("cpu").name == "fastcpu-on"  # the unavailable 100 is skipped
    with pytest.raises(RuntimeError, match="switched off"):
        tiledmm.get_backend("fastcpu-off")
    os.environ["TILEDMM_PLUGINS"] = "numpy,fast-off"
    registry.reload()
    assert tiledmm.get_backend("cpu").name == "numpy"


def test_cpu_alias_without_throwaways():
    # numba-cpu (priority -5) shares the alias but ranks below numpy, which measured faster
    assert tiledmm.get_backend("cpu").name == "numpy"
    assert registry.resolve_backend_name("auto", shape=(512, 512, 512)) == "numpy"


def test_unknown_backend_lists_known_names():
    with pytest.raises(ValueError, match="unknown backend 'nope'.*numpy"):
        tiledmm.get_backend("nope")
