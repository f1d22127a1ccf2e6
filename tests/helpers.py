"""Small helpers shared by the tests (the error metric is tiledmm.util.accuracy's, the one
metric)."""

from __future__ import annotations

import subprocess
import types
from pathlib import Path

import numpy as np

from tiledmm.util.accuracy import matmul_error, rel_error

__all__ = ["available_backends", "matmul_error", "nvcc_build", "rel_error"]


def available_backends() -> list[str]:
    """Names of the backends that can run here."""
    import tiledmm

    return sorted(b.name for b in tiledmm.backends() if b.available)


def nvcc_build(text: str, tmp_path: Path) -> None:
    """Compile CUDA source ``text`` for sm_90 as NVRTC would see it (no host headers): no
    warnings, no register spills (the ``nvcc``-marked tests; no GPU needed)."""
    src = tmp_path / "k.cu"
    src.write_text(text)
    res = subprocess.run(
        ["nvcc", "-arch=sm_90", "-cubin", "-Werror", "all-warnings", "-Xptxas", "-v",
         "-o", str(tmp_path / "k.cubin"), str(src)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    assert " 0 bytes spill stores" in res.stderr, res.stderr[-2000:]


class DeviceArray(np.ndarray):
    """A NumPy array with CuPy's ``.data.ptr``: the stand-in for device arrays in the host-side
    tests of the CUDA kernels' launch code."""

    @property
    def data(self):  # noqa: D102 - CuPy's ``.data.ptr``
        return types.SimpleNamespace(ptr=self.__array_interface__["data"][0])


def device_array(x) -> DeviceArray:
    """``x`` as a :class:`DeviceArray` (a view, no copy)."""
    return np.asarray(x).view(DeviceArray)
