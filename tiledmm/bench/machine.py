"""The machine and the commit a results file records: pytest-benchmark's ``machine_info`` and
``commit_info``, with the tiledmm details (GPU from nvidia-smi, OpenCL from pyopencl, imported
only here; CPU; the benchmarked backends' devices). :mod:`tiledmm.bench.results` writes them."""

from __future__ import annotations

import platform
import subprocess
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from ..core.backend import Backend

__all__ = [
    "gpu_info",
    "opencl_info",
    "cpu_info",
    "tiledmm_machine_info",
    "machine_info",
    "commit_info",
]


def _run(cmd: list[str], cwd: str | None = None) -> str:
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=20, cwd=cwd)
    except (OSError, subprocess.SubprocessError):
        return ""
    return res.stdout.strip() if res.returncode == 0 else ""


def gpu_info() -> list[dict]:
    """NVIDIA GPUs as nvidia-smi reports them (empty without a driver)."""
    q = "name,driver_version,memory.total,compute_cap,clocks.max.sm"
    out = _run(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader"])
    keys = q.split(",")
    return [
        dict(zip(keys, (v.strip() for v in line.split(",")), strict=False))
        for line in out.splitlines()
        if line.strip()
    ]


def opencl_info() -> list[dict]:
    """OpenCL platforms and devices when pyopencl is installed (imported only here)."""
    try:
        import pyopencl as cl

        return [
            {
                "platform": p.name,
                "platform_version": p.version,
                "device": d.name,
                "driver": d.driver_version,
                "compute_units": d.max_compute_units,
            }
            for p in cl.get_platforms()
            for d in p.get_devices()
        ]
    except Exception:  # noqa: BLE001 - no OpenCL runtime is a normal state
        return []


def cpu_info() -> dict:
    from ..device.host import cpu_cores, cpu_model

    info = {"brand_raw": cpu_model(), "count": cpu_cores(), "arch": platform.machine()}
    try:
        import cpuinfo  # py-cpuinfo, a pytest-benchmark dependency

        info.update(
            {
                k: v
                for k, v in cpuinfo.get_cpu_info().items()
                if k
                in (
                    "brand_raw",
                    "arch",
                    "hz_advertised_friendly",
                    "l2_cache_size",
                    "l3_cache_size",
                    "flags",
                )
            }
        )
        info["count"] = cpu_cores()
    except Exception:  # noqa: BLE001
        pass
    return info


def tiledmm_machine_info(backends: Iterable[Backend] = (), loadavg: list | None = None) -> dict:
    """Devices of the benchmarked backends, GPUs, OpenCL devices: machine_info["tiledmm"].
    ``loadavg``: the load averages when the run started (else now, with no end figure)."""
    from .. import __version__
    from .busy import load_average

    devs = {}
    for be in backends:
        try:
            devs[be.name] = be.device().to_dict()
        except Exception as exc:  # noqa: BLE001
            devs[be.name] = {"error": f"{type(exc).__name__}: {exc}"}
    now = load_average()  # other work here skews every timing
    ends = {"loadavg_at_end": now} if loadavg is not None else {}
    return {
        "version": __version__,
        "numpy": np.__version__,
        "loadavg_1_5_15min": now if loadavg is None else list(loadavg),
        **ends,
        "devices": devs,
        "gpus": gpu_info(),
        "opencl": opencl_info(),
    }


def machine_info(backends: Iterable[Backend] = (), loadavg: list | None = None) -> dict:
    """pytest-benchmark's machine_info, plus the tiledmm device details (``loadavg``: the
    load averages when the run started)."""
    return {
        "node": platform.node(),
        "processor": platform.processor(),
        "machine": platform.machine(),
        "python_compiler": platform.python_compiler(),
        "python_implementation": platform.python_implementation(),
        "python_implementation_version": platform.python_version(),
        "python_version": platform.python_version(),
        "python_build": list(platform.python_build()),
        "release": platform.release(),
        "system": platform.system(),
        "cpu": cpu_info(),
        "tiledmm": tiledmm_machine_info(backends, loadavg),
    }


def commit_info() -> dict:
    """The commit of the tiledmm checkout this package runs from (an editable install); an
    installed package (a wheel in site-packages, even inside some other git work tree) has
    none: ``{"id": None, "error": ...}``. Never raises (no git is the same answer)."""
    root = Path(__file__).resolve().parents[2]  # the checkout: tiledmm/bench/ is two below
    top = _run(["git", "rev-parse", "--show-toplevel"], str(root))
    if not top or Path(top).resolve() != root or not (root / "pyproject.toml").is_file():
        return {"id": None, "error": "not a git checkout (an installed package)"}
    root = str(root)
    sha = _run(["git", "rev-parse", "HEAD"], root)
    if not sha:
        return {"id": None, "error": "not a git checkout"}
    return {
        "id": sha,
        "time": _run(["git", "show", "-s", "--format=%cI", "HEAD"], root),
        "author_time": _run(["git", "show", "-s", "--format=%aI", "HEAD"], root),
        "dirty": bool(_run(["git", "status", "--porcelain", "--untracked-files=no"], root)),
        "project": "tiledmm",
        "branch": _run(["git", "rev-parse", "--abbrev-ref", "HEAD"], root),
    }
