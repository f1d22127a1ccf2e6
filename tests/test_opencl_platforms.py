"""OpenCL that works, or says why not, on any CPU (issue 33).

The backend uses only devices whose compiler builds and runs a trivial kernel (probed once per
device); a failing one is skipped with its reason; where none passes, the backend is
"unavailable, because ..." with the cause and the fix, and nothing else breaks: ``import
tiledmm``, ``tiledmm info``, ``backend="auto"``, the CLI. The failing compiler is simulated by
replacing the probe's build (``platforms.build_probe``) with the error the bundled PoCL gives
on a Zen 5 (pocl#1049); the rest runs on whatever OpenCL platforms this machine has (in CI:
Debian's PoCL, installed by .ci/run, beside the PoCL in pyopencl's wheel).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from tiledmm_backends.opencl import platforms

import tiledmm
from tiledmm import cli
from tiledmm.core import registry
from tiledmm.util.accuracy import matmul_error

ZEN5 = (
    "clBuildProgram failed: BUILD_PROGRAM_FAILURE - clBuildProgram failed: "
    "BUILD_PROGRAM_FAILURE\n\nBuild on <pyopencl.Device 'pthread-AMD Ryzen 9 9950X'>:\n\n"
    "error: unknown target CPU 'generic'\nDevice pthread-AMD Ryzen 9 9950X failed to build "
    "the program, log: error: unknown target CPU 'generic'"
)


# ------------------------------------------------------------------ no device needed


def test_prepare_icd_points_an_old_loader_at_the_system_directory(tmp_path):
    system = tmp_path / "vendors"
    system.mkdir()
    old = tmp_path / "libOpenCL-old.so"
    old.write_bytes(b"\0ocl-icd\0OCL_ICD_VENDORS\0/opt/conda/etc/OpenCL/vendors\0")
    new = tmp_path / "libOpenCL-new.so"
    new.write_bytes(b"\0ocl-icd\0OCL_ICD_VENDORS\0" + str(system).encode() + b"\0")
    env: dict[str, str] = {}
    assert platforms.prepare_icd(env, system, old) == "" and not env  # no ICD there: nothing
    (system / "pocl.icd").write_text("libpocl.so.2\n")
    assert platforms.prepare_icd(env, system, new) == "" and not env  # the loader reads it
    said = platforms.prepare_icd(env, system, old)
    assert env == {"OCL_ICD_VENDORS": str(system)} and "OCL_ICD_VENDORS" in said
    env = {"OCL_ICD_VENDORS": "/mine"}  # the user's choice stays
    assert platforms.prepare_icd(env, system, old) == "" and env == {"OCL_ICD_VENDORS": "/mine"}
    env = {"TILEDMM_OPENCL_SYSTEM_ICD": "0"}  # opted out
    assert platforms.prepare_icd(env, system, old) == "" and "OCL_ICD_VENDORS" not in env


def test_the_unavailable_sentence_names_cause_and_fix():
    why = platforms.unusable_reason([
        ("Portable Computing Language / pthread-AMD Ryzen 9 9950X (PoCL 3.0-rc2, LLVM 14.0.6)",
         "error: unknown target CPU 'generic'"),
    ])  # fmt: skip
    assert "\n" not in why
    assert "LLVM cannot target this CPU" in why and "bundled with pyopencl" in why
    assert "apt-get install pocl-opencl-icd" in why and "OCL_ICD_VENDORS=/etc/OpenCL/vendors" in why


def test_ci_installs_a_system_pocl():
    """.ci/run installs Debian's PoCL (best effort, bounded), so the PoCL tests run where the
    wheel's PoCL cannot build for the CPU."""
    ci = (Path(__file__).resolve().parents[1] / ".ci" / "run").read_text()
    assert "apt-get install -y -qq pocl-opencl-icd" in ci and "timeout" in ci


def test_a_probe_failure_is_one_line():
    class Dev:
        int_ptr = 123456789

    platforms.forget()
    try:
        old = platforms.build_probe
        platforms.build_probe = lambda dev: (_ for _ in ()).throw(RuntimeError(ZEN5))
        assert platforms.probe(Dev()) == "error: unknown target CPU 'generic'"
    finally:
        platforms.build_probe = old
        platforms.forget()


# ------------------------------------------------------------------ on this machine's OpenCL


def _opencl_devices() -> list:
    try:
        import pyopencl as cl

        return [d for p in cl.get_platforms() for d in p.get_devices()]
    except Exception:  # noqa: BLE001 - no pyopencl, no ICD
        return []


needs_opencl = pytest.mark.skipif(not _opencl_devices(), reason="no OpenCL device here")


@pytest.fixture
def probe_fails(monkeypatch):
    """``fail(pred)``: the probe's build raises the Zen 5 error for devices where ``pred``
    holds; the registry is reloaded (a fresh backend), and restored afterwards."""

    def fail(pred=lambda dev: True):
        real = platforms.build_probe

        def build(dev):
            if pred(dev):
                raise RuntimeError(ZEN5)
            return real(dev)

        monkeypatch.setattr(platforms, "build_probe", build)
        platforms.forget()
        registry.reload()

    yield fail
    monkeypatch.undo()
    platforms.forget()
    registry.reload()


def _entry(name: str):
    return next(e for e in tiledmm.backends() if e.name == name)


@needs_opencl
def test_the_chosen_device_passes_the_probe():
    be = tiledmm.get_backend("opencl")
    assert platforms.probe(be.state().dev) is None
    usable = [d for d in _opencl_devices() if platforms.probe(d) is None]
    assert [s.name for s in be.devices()] == [d.name.strip() for d in usable]


@needs_opencl
def test_no_device_builds_then_opencl_is_unavailable_and_nothing_else_breaks(
    probe_fails, capsys, tmp_path, monkeypatch
):
    probe_fails()
    entry = _entry("opencl")
    assert not entry.available
    assert entry.reason.startswith("no OpenCL device here builds a kernel")
    assert "unknown target CPU" in entry.reason
    assert "apt-get install pocl-opencl-icd" in entry.reason
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((37, 19)), rng.standard_normal((19, 23))
    c = tiledmm.matmul(a, b)  # auto never picks it
    assert isinstance(c, np.ndarray) and matmul_error(c, a, b) < 1e-12
    with pytest.raises(RuntimeError, match="unavailable, because no OpenCL device here builds"):
        tiledmm.matmul(a, b, backend="opencl")
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert "  unavailable, because no OpenCL device here builds a kernel" in out
    monkeypatch.setenv("TILEDMM_CACHE_DIR", str(tmp_path))
    for argv in (["tune", "--backend", "opencl", "--budget", "5"],
                 ["bench", "--backend", "opencl", "--quick", "-o", str(tmp_path / "r")],
                 ["plan", "64", "64", "64", "--backend", "opencl"],
                 ["calibrate", "--backend", "opencl", "--quick"]):  # fmt: skip
        assert cli.main(argv) != 0
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and "Traceback" not in err, err
        assert "apt-get install pocl-opencl-icd" in err, err
    assert not (tmp_path / "r").exists() or not list((tmp_path / "r").glob("*.json"))


@needs_opencl
def test_a_platform_failing_the_probe_is_skipped(probe_fails):
    devs = _opencl_devices()
    first = devs[0]
    probe_fails(lambda dev: dev.int_ptr == first.int_ptr)
    be = tiledmm.get_backend("opencl") if len(devs) > 1 else None
    if be is None:  # one device only: unavailable, saying why
        assert "unknown target CPU" in _entry("opencl").reason
        return
    assert be.state().dev.int_ptr != first.int_ptr
    skipped = dict(be.device().extra).get("skipped", "")
    assert first.name.strip() in skipped and "unknown target CPU" in skipped
    assert len(be.devices()) == len(devs) - 1
    rng = np.random.default_rng(5)
    for family in be.kernels:
        for m, n, k in ((33, 17, 65), (1, 31, 7), (70, 1, 129)):
            a, b = rng.standard_normal((m, k), np.float32), rng.standard_normal((k, n), np.float32)
            c = tiledmm.matmul(a, b, backend="opencl", kernel=family)
            assert isinstance(c, np.ndarray) and matmul_error(c, a, b) < 1e-5, (family, m, n, k)


@needs_opencl
def test_each_device_is_probed_once(probe_fails, monkeypatch):
    probe_fails(lambda dev: False)
    calls = []
    real = platforms.build_probe
    monkeypatch.setattr(platforms, "build_probe", lambda dev: calls.append(dev) or real(dev))
    be = tiledmm.get_backend("opencl")
    for _ in range(3):
        be.devices()
        be.device()
        tiledmm.backends()
    assert len(calls) == len({d.int_ptr for d in calls}) <= len(_opencl_devices())


@needs_opencl
@pytest.mark.skipif(sys.platform != "linux", reason="ocl-icd's OCL_ICD_VENDORS (Linux)")
def test_only_the_platform_in_pyopencls_wheel(tmp_path):
    """With the system's ICDs hidden (an empty OCL_ICD_VENDORS), only the PoCL in pyopencl's
    wheel is left: it either runs every family correctly or the backend says why not."""
    empty = tmp_path / "vendors"
    empty.mkdir()
    code = (
        "import json, numpy as np, tiledmm\n"
        "e = next(e for e in tiledmm.backends() if e.name == 'opencl')\n"
        "out = {'available': e.available, 'reason': e.reason, 'errors': {}}\n"
        "if e.available:\n"
        "    be = tiledmm.get_backend('opencl')\n"
        "    out['device'] = be.device().name\n"
        "    out['devices'] = [d.name for d in be.devices()]\n"
        "    rng = np.random.default_rng(0)\n"
        "    a = rng.standard_normal((45, 33)).astype(np.float32)\n"
        "    b = rng.standard_normal((33, 29)).astype(np.float32)\n"
        "    for f in be.kernels:\n"
        "        c = tiledmm.matmul(a, b, backend='opencl', kernel=f)\n"
        "        ref = a.astype(np.float64) @ b\n"
        "        out['errors'][f] = float(np.linalg.norm(c - ref) / np.linalg.norm(ref))\n"
        "print(json.dumps(out))\n"
    )
    env = dict(os.environ, OCL_ICD_VENDORS=str(empty), TILEDMM_CACHE_DIR=str(tmp_path))
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=300, cwd=tmp_path)  # fmt: skip
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout.strip().splitlines()[-1])
    if got["available"]:
        assert len(got["devices"]) == 1 and got["errors"]
        assert all(err < 1e-5 for err in got["errors"].values()), got
    else:
        assert "apt-get install pocl-opencl-icd" in got["reason"] or "no usable" in got["reason"]
