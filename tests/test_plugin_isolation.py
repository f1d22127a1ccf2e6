"""A plugin's exceptions are isolated wherever tiledmm calls it (issue 40): at import and
registration (``SystemExit`` included; ``KeyboardInterrupt`` still stops), in ``device()``
(the backend is listed as unavailable, because ...), and in ``run`` (the error names the
backend and its plugin, also when ``auto`` or an alias chose it)."""

from __future__ import annotations

import os
from dataclasses import replace

import numpy as np
import pytest

import tiledmm
from tests.test_registry import good, info, plugin_env  # noqa: F401 - the fixture
from tiledmm import cli
from tiledmm.core import dispatch, registry

EXITS_AT_IMPORT = "import sys\nsys.exit(3)\n"

EXITS_AT_REGISTER = """
import sys, tiledmm

@tiledmm.hookimpl
def register_backends(register):
    raise SystemExit("plugin gave up")
"""

NO_DEVICE = """
import tiledmm

class NoDevice(tiledmm.Backend):
    name, kernels = "nodevice", ("naive",)

    def device(self):
        raise OSError("device node /dev/fantasy0 is gone")

    def run(self, plan, a, b, out):
        out[...] = a @ b

@tiledmm.hookimpl
def register_backends(register):
    register(NoDevice())
"""

EXPLODES = """
import sys
from dataclasses import replace
import tiledmm

class Explodes(tiledmm.Backend):
    name, kernels, aliases, priority = "explodes", ("naive",), ("cpu",), 100

    def device(self):
        return replace(tiledmm.host_cpu(), name="fantasy", peak_flops=(("float32", 1e30),),
                       bandwidth=1e30, launch_overhead=0.0)

    def run(self, plan, a, b, out):
        if plan.m == 3:
            raise ValueError("operands too small for this fantasy")
        if plan.m == 5:
            sys.exit("the kernel called exit")
        raise RuntimeError("kernel exploded")

@tiledmm.hookimpl
def register_backends(register):
    register(Explodes())
"""


@pytest.mark.parametrize(
    "source, error",
    [(EXITS_AT_IMPORT, "SystemExit: 3"), (EXITS_AT_REGISTER, "SystemExit: plugin gave up")],
)
def test_system_exit_while_loading_is_isolated(plugin_env, capsys, source, error):  # noqa: F811
    plugin_env("quitter", source)
    with pytest.warns(registry.PluginWarning, match="quitter"):
        registry.reload()
    p = info("quitter")
    assert p.status == "broken" and p.error == error
    a = np.ones((4, 4), np.float32)
    np.testing.assert_array_equal(tiledmm.matmul(a, a, backend="numpy"), a @ a)
    assert any(r.name == "numpy" for r in tiledmm.backends())
    capsys.readouterr()
    assert cli.main(["plugins"]) == 0
    out = capsys.readouterr().out
    assert "quitter" in out and "broken" in out and error in out


def test_keyboard_interrupt_while_loading_still_stops(plugin_env):  # noqa: F811
    plugin_env("ctrlc", "raise KeyboardInterrupt\n")
    with pytest.raises(KeyboardInterrupt):
        registry.reload()
    os.environ["TILEDMM_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # the next load works without it
    registry.reload()
    assert tiledmm.get_backend("numpy").name == "numpy"


def test_a_failing_device_makes_the_backend_unavailable_not_the_cli(plugin_env, capsys):  # noqa: F811
    plugin_env("nodevice", NO_DEVICE)
    registry.reload()
    row = next(r for r in tiledmm.backends() if r.name == "nodevice")
    assert not row.available
    assert "device() failed" in row.reason and "'nodevice'" in row.reason
    assert "/dev/fantasy0 is gone" in row.reason
    with pytest.raises(RuntimeError, match="unavailable, because its device"):
        tiledmm.get_backend("nodevice")
    a = np.ones((4, 4), np.float32)
    np.testing.assert_array_equal(tiledmm.matmul(a, a), a @ a)  # auto skips it
    capsys.readouterr()
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert "nodevice" in out and "unavailable, because its device() failed" in out
    assert "numpy" in out and "kernels:" in out  # the other backends are still listed
    assert cli.main(["info", "--json"]) == 0


def test_a_backends_failing_devices_query_is_reported_on_its_row(monkeypatch, capsys):
    be = tiledmm.get_backend("numpy")
    monkeypatch.setattr(be, "devices", lambda: 1 / 0)
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert "devices: unknown, because its devices() failed: ZeroDivisionError" in out


def test_a_trusted_plugins_run_error_names_backend_and_plugin(plugin_env, monkeypatch):  # noqa: F811
    plugin_env("explodes", EXPLODES)
    os.environ["TILEDMM_TRUST_PLUGINS"] = "explodes"
    registry.reload()
    a = np.ones((4, 4), np.float32)
    with pytest.raises(RuntimeError, match=r"backend 'explodes' \(plugin 'explodes', "
                                           r"tiledmm_throwaway_explodes\) failed in run: "
                                           "kernel exploded"):  # fmt: skip
        tiledmm.matmul(a, a, backend="cpu")  # the alias chose it
    # a ValueError keeps its type and words (numpy's, for the caller's mistakes); a note
    # under the traceback names the backend
    with pytest.raises(ValueError) as got:
        tiledmm.matmul(np.ones((3, 3), np.float32), np.ones((3, 3), np.float32), backend="cpu")
    assert str(got.value) == "operands too small for this fantasy"
    assert "backend 'explodes' (plugin 'explodes'" in " ".join(got.value.__notes__)
    # SystemExit from a kernel does not end the caller's program
    with pytest.raises(RuntimeError, match="'explodes'.*raised SystemExit: the kernel called"):
        tiledmm.matmul(np.ones((5, 5), np.float32), np.ones((5, 5), np.float32), backend="cpu")
    real = dispatch._plan  # where every plan of dispatch comes from (behind plan_for)

    def injected(be, *args, **kwargs):  # auto picks the fantasy device (speeds injected)
        p = real(be, *args, **kwargs)
        return replace(p, predicted_seconds=1e-9 if be.name == "explodes" else 1.0)

    monkeypatch.setattr(dispatch, "_plan", injected)
    dispatch.clear_caches()
    b = np.ones((64, 64), np.float32)
    with pytest.raises(RuntimeError, match="backend 'explodes'.*kernel exploded"):
        tiledmm.matmul(b, b)


def test_builtin_errors_are_unchanged():
    out = np.zeros((2, 2), np.float32)
    out.setflags(write=False)
    with pytest.raises(ValueError, match="^output array is read-only$"):
        tiledmm.matmul(np.ones((2, 2), np.float32), np.ones((2, 2), np.float32),
                       backend="numpy", out=out)  # fmt: skip
