"""The shared launch path (kernels/launch.py) with a NumPy adapter: CuPy's array model (the
array is the pointer) run on the host, so CI checks the steps CuPy takes on a GPU."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from numpy.lib.stride_tricks import as_strided
from tiledmm_backends import kernels as K
from tiledmm_backends.kernels import defs, launch

import tiledmm
from tests.helpers import nvcc_build
from tiledmm.util.accuracy import matmul_error

GPU = tiledmm.DeviceSpec(name="test gpu", kind="gpu", peak_flops=(("float32", 5e13),),
                         bandwidth=4e12)  # fmt: skip


class HostArrays:
    """CuPy's adapter, on NumPy arrays; ``enqueue`` is the kernel (reads through ld only)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def layout(self, x):
        s0, s1 = x.strides
        return (x, 0, x.__array_interface__["data"][0], s0, s1, 0)

    def contiguous(self, x):
        self.calls.append("contiguous")
        return np.ascontiguousarray(x)

    def empty(self, shape, dtype):
        self.calls.append("empty")
        return np.full(shape, np.nan, dtype)

    def aligned_copy(self, x, ld, role):
        self.calls.append(f"aligned {role}")
        y = np.empty((x.shape[0], ld), x.dtype)[:, : x.shape[1]]
        y[...] = x
        return y

    def copy(self, src, dst):
        self.calls.append("copy")
        dst[...] = src

    def device_id(self):
        return 0

    def enqueue(self, call, m, n, k, a, oa, lda, b, ob, ldb, c, oc, ldc, bt=launch.NOBATCH):
        assert bt == launch.NOBATCH  # one product (batches: tests/test_batched.py)
        self.calls.append(f"enqueue ld={lda},{ldb},{ldc}")
        s = c.itemsize
        A = as_strided(a, (m, k), (lda * s, s))
        B = as_strided(b, (k, n), (ldb * s, s))
        C = as_strided(c, (m, n), (ldc * s, s))
        C[...] = (A.astype(np.float64) @ B).astype(c.dtype)


def _plan(m, n, k, kernel="register"):
    geo = tiledmm.Geometry((32, 32, 8), (4, 4), (("use_local", 1),)) if kernel == "register" \
        else None  # fmt: skip
    return tiledmm.make_plan(m, n, k, dtype="float32", kernel=kernel, device=GPU, geometry=geo)


def _run(a, b, out, kernel="register"):
    ad, builds = HostArrays(), []
    launches = launch.Launches(lambda plan, aligned, single: builds.append(aligned) or "call")
    launch.run(ad, launches, _plan(a.shape[0], b.shape[1], a.shape[1], kernel), a, b, out)
    return ad.calls, builds


def test_row_major_operands_launch_without_copies():
    rng = np.random.default_rng()
    big = rng.standard_normal((40, 48)).astype(np.float32)
    a, b = big[1:30, 3:19], big[5:21, 8:40]  # offsets (A: unaligned), leading dimension 48
    out = np.full((29, 32), np.nan, np.float32)
    calls, builds = _run(a, b, out)
    assert calls == ["enqueue ld=48,48,32"] and builds == [False]  # unaligned starts
    assert matmul_error(out, a, b) < 1e-6


def test_transposed_and_strided_operands_are_copied_and_out_written_back():
    rng = np.random.default_rng()
    a = np.asfortranarray(rng.standard_normal((13, 9)).astype(np.float32))
    b = rng.standard_normal((9, 22)).astype(np.float32)[:, ::2]
    big = np.full((13, 22), np.nan, np.float32)
    calls, _ = _run(a, b, big[:, ::2], kernel="tiled")
    assert calls.count("contiguous") == 2 and calls[-2:] == ["enqueue ld=9,11,11", "copy"]
    assert matmul_error(big[:, ::2], a, b) < 1e-6 and np.isnan(big[:, 1::2]).all()


def test_out_overlapping_an_input_gets_a_temporary():
    x = np.random.default_rng().standard_normal((12, 12)).astype(np.float32)
    h = x.copy()
    calls, _ = _run(x, x, x)
    assert "empty" in calls and calls[-1] == "copy"
    assert matmul_error(x, h, h) < 1e-6


def test_odd_leading_dimensions_copied_to_aligned_rows_when_it_pays(monkeypatch):
    monkeypatch.setattr(defs, "pad_pays", lambda plan, *odd: True)  # the launch path's
    rng = np.random.default_rng()
    a = rng.standard_normal((21, 13)).astype(np.float32)
    b = rng.standard_normal((13, 7)).astype(np.float32)
    out = np.full((21, 7), np.nan, np.float32)
    calls, builds = _run(a, b, out)
    assert "aligned a" in calls and "aligned b" in calls and builds == [True]
    assert calls[-1] == "enqueue ld=16,8,7" and matmul_error(out, a, b) < 1e-6


class Huge:
    """An operand of any size without memory: shape and strides only."""

    def __init__(self, shape, strides):
        self.shape, self.strides = shape, strides
        self.__array_interface__ = {"data": (4096, False)}


@pytest.mark.parametrize("transposed", [False, True])
def test_32_bit_check_comes_before_any_copy(transposed):
    m, k = (1 << 16) + 1, 1 << 15
    a = Huge((m, k), (4, 4 * m) if transposed else (4 * k, 4))
    b, out = Huge((k, 8), (32, 4)), Huge((m, 8), (32, 4))
    ad = HostArrays()
    launches = launch.Launches(lambda plan, aligned, single: "call")
    with pytest.raises(ValueError, match="operand A .*32-bit indexing.*backend='numpy'"):
        launch.run(ad, launches, _plan(m, 8, k, "naive"), a, b, out)
    assert ad.calls == []  # nothing copied, allocated or launched


def test_launch_cache_is_keyed_by_launch_and_bounded():
    builds = []
    launches = launch.Launches(lambda plan, aligned, single: builds.append(plan) or len(builds), 3)
    p1, p1_again = _plan(64, 64, 64), _plan(64, 64, 64)
    assert p1 is not p1_again and p1.launch_key == p1_again.launch_key
    assert launches.get(p1, 0, True) == launches.get(p1_again, 0, True) == 1
    assert launches.get(p1, 1, True) == 2  # another device
    assert launches.get(p1, 1, True, single=True) == 3  # the batch prologue compiled out
    for n in range(1, 10):
        launches.get(_plan(n, 64, 64), 0, True)
    assert len(launches.cache) == 3 and len(builds) == 12


def test_single_products_compile_without_the_batch_prologue():
    """One product without K slices builds with NO_BATCH; a split-K (or batched) launch keeps
    the prologue (its grid z walks K slices and matrices)."""
    seen = []

    def build(plan, aligned, single):
        seen.append(single)
        return single

    class Ad(HostArrays):
        def enqueue(self, call, *args):
            self.calls.append("enqueue")

        def reduce(self, *args):
            self.calls.append("reduce")

    ad, launches = Ad(), launch.Launches(build)
    rng = np.random.default_rng(5)
    a, b = rng.random((33, 517), np.float32), rng.random((517, 9), np.float32)
    launch.run(ad, launches, _plan(33, 9, 517), a, b, np.empty((33, 9), np.float32))
    geo = tiledmm.Geometry((32, 32, 8), (4, 4), (("split_k", 2), ("use_local", 1)))
    split = tiledmm.make_plan(33, 9, 517, dtype="float32", kernel="register", device=GPU,
                              geometry=geo)  # fmt: skip
    launch.run(ad, launches, split, a, b, np.empty((33, 9), np.float32))
    assert seen == [True, False] and ad.calls.count("reduce") == 1
    assert K.defines(split, True, single=True).get("NO_BATCH") is None  # slices keep it
    assert K.defines(_plan(33, 9, 517), True, single=True)["NO_BATCH"] == 1


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_the_timing_spin_is_one_source_for_cuda_and_opencl(tmp_path):
    """spin.cl builds as CUDA (the CuPy backend's timing spin); its OpenCL branch declares the
    same kernel with OpenCL's types (NVIDIA's OpenCL builds it on the GPU machine)."""
    src = K.spin_source()
    nvcc_build(src, tmp_path)
    assert "__OPENCL_VERSION__" in src and "__kernel void" in src and "ulong" in src
