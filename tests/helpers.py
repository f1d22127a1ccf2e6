"""Small helpers shared by the tests (the error metric is tiledmm.util.accuracy's, the one
metric)."""

from __future__ import annotations

import subprocess
import types
from pathlib import Path

import numpy as np

from tiledmm.core.backend import Backend
from tiledmm.device.nvidia import reference_h200
from tiledmm.util.accuracy import matmul_error, rel_error

__all__ = ["available_backends", "matmul_error", "nvcc_build", "rel_error", "HostMma16",
           "bf16_to_f32", "f32_to_bf16", "aligned_array", "batch_operands"]  # fmt: skip


def available_backends() -> list[str]:
    """Names of the backends that can run here."""
    import tiledmm

    return sorted(b.name for b in tiledmm.backends() if b.available)


#: nvcc's target flags for the Hopper kernels (wgmma and setmaxnreg exist only on sm_90a)
SM90A = ("-gencode=arch=compute_90a,code=sm_90a", "-std=c++17")


def nvcc_run(text: str, tmp_path: Path, target=("-arch=sm_90",),
             timeout: float = 120) -> subprocess.CompletedProcess:  # fmt: skip
    """Compile CUDA source ``text`` to a cubin as NVRTC would see it (no host headers), warnings
    as errors, ptxas's report in ``stderr``; ``target``: nvcc's architecture flags."""
    src = tmp_path / "k.cu"
    src.write_text(text)
    return subprocess.run(
        ["nvcc", *target, "-cubin", "-Werror", "all-warnings", "-Xptxas", "-v",
         "-o", str(tmp_path / "k.cubin"), str(src)],
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def nvcc_build(text: str, tmp_path: Path) -> None:
    """Compile CUDA source ``text`` for sm_90 as NVRTC would see it (no host headers): no
    warnings, no register spills (the ``nvcc``-marked tests; no GPU needed)."""
    res = nvcc_run(text, tmp_path)
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


def aligned_array(shape, dtype, fill=None) -> DeviceArray:
    """A C-ordered :class:`DeviceArray` whose base is 16-byte aligned (what CuPy's allocator
    gives), set by ``fill(shape)`` where given."""
    size = int(np.prod(shape)) * np.dtype(dtype).itemsize
    raw = np.empty(size + 16, np.uint8)
    off = -raw.ctypes.data % 16
    x = raw[off : off + size].view(dtype).reshape(shape)
    if fill is not None:
        x[...] = fill(shape)
    return device_array(x)


def batch_operands(case: str, dtype, fill, shared_view: str = "b"):
    """(m, n, k, a, b, out) of the batched Hopper host tests' ``case``: "both" (6 matrices
    each), "shared_b", "two_axes", "partial" (broadcast in part), "odd", "out_view" (out a
    view into wider rows), "shared_a_view" / "shared_b_view" (one operand a broadcast view);
    ``out`` NaN-poisoned."""
    m, n, k = (383, 129, 77) if case == "odd" else (64, 96, 40)
    sa, sb = (6, m, k), (6, k, n)
    if case == "shared_b":
        sb = (k, n)
    if case == "two_axes":
        sa, sb = (2, 3, m, k), (2, 3, k, n)
    if case == "partial":
        sa, sb = (2, 1, m, k), (1, 3, k, n)
    a, b = aligned_array(sa, dtype, fill), aligned_array(sb, dtype, fill)
    if case == "shared_a_view":
        a = device_array(np.broadcast_to(aligned_array((m, k), dtype, fill), (6, m, k)))
    if case == "shared_b_view":
        b = device_array(np.broadcast_to(aligned_array((k, n), dtype, fill), (6, k, n)))
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    out = device_array(np.full((*batch, m, n), np.nan, dtype))
    if case == "out_view":
        big = device_array(np.full((*batch, m, n + 8), np.nan, dtype))
        out = big[..., 3 : n + 3]
    return m, n, k, a, b, out


def bf16_to_f32(u: np.ndarray) -> np.ndarray:
    """bfloat16 words -> float32."""
    return (u.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 words, to nearest even (finite values)."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


class HostMma16(Backend):
    """A host 'GPU' whose tensor-core family takes float16 and bfloat16 (as uint16 words),
    sums in float32 and rounds once, as the mma kernels do; records every plan it runs."""

    name, kernels = "fake-halfprec", ("naive", "tiled", "register", "mma")
    dtypes = ("float32", "float64")
    mma_dtypes = ("float64", "float16", "bfloat16")

    def __init__(self):
        self.plans = []

    def device(self):
        return reference_h200()

    def device_key(self):
        return 0

    def accepts(self, x):
        return isinstance(x, np.ndarray)

    def run(self, plan, a, b, out):
        self.plans.append(plan)
        bf = plan.dtype == "bfloat16"
        assert a.dtype == b.dtype == out.dtype == (np.uint16 if bf else np.float16)
        f32 = (lambda x: bf16_to_f32(x)) if bf else (lambda x: x.astype(np.float32))
        for i in range(a.shape[0]):  # row by row, as a kernel streams: overlap shows
            c = f32(a[i]) @ f32(b)
            out[i] = f32_to_bf16(c) if bf else c.astype(np.float16)
