"""numba-cpu correctness: odd shapes, strides, K=0, NaN poisoning, IEEE propagation, alias."""

from __future__ import annotations

import numpy as np
import pytest

tiledmm = pytest.importorskip("tiledmm")
pytest.importorskip("numba")
pytest.importorskip("tiledmm_numba_cpu")

FAMILIES = ("naive", "tiled", "register")
SHAPES = [(1, 1, 1), (7, 5, 3), (33, 65, 17), (70, 257, 131), (3, 1, 300)]


def _reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a.astype(np.float64) @ b.astype(np.float64)


def _run(a, b, kernel, out=None):
    be = tiledmm.get_backend("numba-cpu")
    m, k = a.shape
    n = b.shape[1]
    plan = tiledmm.plan(m, n, k, dtype=a.dtype.name, backend="numba-cpu", kernel=kernel)
    if out is None:
        out = np.full((m, n), np.nan, a.dtype)  # poison: an unwritten element stays NaN
    be.run(plan, a, b, out)
    return out


@pytest.mark.parametrize("dtype,tol", [("float32", 2e-6), ("float64", 1e-13)])
@pytest.mark.parametrize("kernel", FAMILIES)
def test_odd_shapes_against_float64(kernel, dtype, tol):
    rng = np.random.default_rng(1)
    for m, n, k in SHAPES:
        a = rng.standard_normal((m, k)).astype(dtype)
        b = rng.standard_normal((k, n)).astype(dtype)
        c = _run(a, b, kernel)
        ref = _reference(a, b)
        assert np.isfinite(c).all(), (kernel, m, n, k)
        assert np.linalg.norm(c - ref) / np.linalg.norm(ref) < tol, (kernel, m, n, k)


@pytest.mark.parametrize("kernel", FAMILIES)
def test_strided_inputs_and_output(kernel):
    rng = np.random.default_rng(2)
    big_a = rng.standard_normal((80, 90)).astype(np.float32)
    big_b = rng.standard_normal((60, 70)).astype(np.float32)
    a = big_a[::2, 1::3]  # (40, 30), both strides non-unit
    b = big_b[:30, ::2].T.copy().T  # Fortran order (30, 35)
    store = np.full((50, 80), np.nan, np.float32)
    out = store[5:45, 10:80:2]  # strided output view (40, 35)
    _run(a, b, kernel, out)
    assert np.isnan(store[:5]).all() and np.isnan(store[45:]).all()  # nothing outside
    np.testing.assert_allclose(out, _reference(a, b), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kernel", FAMILIES)
def test_k_zero_writes_zeros(kernel):
    a, b = np.ones((5, 0), np.float32), np.ones((0, 7), np.float32)
    assert (_run(a, b, kernel) == 0).all()


@pytest.mark.parametrize("kernel", FAMILIES)
def test_nan_and_inf_propagate_like_numpy(kernel):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((9, 11))
    b = rng.standard_normal((11, 13))
    a[2, 4] = np.nan
    b[3, 6] = np.inf
    b[5, 8] = -np.inf
    got, want = _run(a, b, kernel), np.matmul(a, b)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], rtol=1e-12)


def test_registered_with_cpu_alias_and_matmul():
    names = {e.name: e for e in tiledmm.backends()}
    assert names["numba-cpu"].available and "cpu" in names["numba-cpu"].aliases
    assert tiledmm.get_backend("cpu").name == "numpy"  # priority -5 ranks below numpy's 0
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((3, 20, 30)), rng.standard_normal((30, 10))
    c = tiledmm.matmul(a, b, backend="numba-cpu", kernel="register")
    np.testing.assert_allclose(c, a @ b, rtol=1e-12)


def test_register_kernel_rejects_unsupported_micro_tile():
    plan = tiledmm.plan(
        8, 8, 8, backend="numba-cpu", kernel="register", thread_tile=(2, 8), block_tile=(8, 8, 8)
    )
    a = np.ones((8, 8), np.float32)
    with pytest.raises(ValueError, match="4 x TN"):
        tiledmm.get_backend("numba-cpu").run(plan, a, a, np.empty_like(a))


def _read_only_operands(tmp_path, rng, dtype):
    """(label, A, B) pairs of read-only kinds: setflags, broadcast_to (zero stride), memmap."""
    a = rng.standard_normal((37, 19)).astype(dtype)
    b = rng.standard_normal((19, 23)).astype(dtype)
    frozen = a.copy()
    frozen.setflags(write=False)
    row = np.broadcast_to(rng.standard_normal((1, 23)).astype(dtype), (19, 23))
    path = tmp_path / "b.bin"
    b.tofile(path)
    mapped = np.memmap(path, dtype=dtype, mode="r", shape=b.shape)
    return [("setflags", frozen, b), ("broadcast", a, row), ("memmap", frozen.T.T, mapped)]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("kernel", FAMILIES)
def test_read_only_inputs(kernel, dtype, tmp_path):
    rng = np.random.default_rng()
    for label, a, b in _read_only_operands(tmp_path, rng, dtype):
        assert not (a.flags.writeable and b.flags.writeable), label
        c = _run(a, b, kernel)
        ref = _reference(a, b)
        tol = 1e-5 if dtype == "float32" else 1e-12
        assert np.linalg.norm(c - ref) / np.linalg.norm(ref) < tol, (label, kernel)
        got = tiledmm.matmul(a, b, backend="numba-cpu", kernel=kernel)
        np.testing.assert_allclose(got, ref, rtol=tol * 10, atol=tol * 10, err_msg=label)


@pytest.mark.parametrize("kernel", FAMILIES)
def test_read_only_out_raises_numpys_error(kernel):
    rng = np.random.default_rng()
    a, b = rng.standard_normal((6, 5)), rng.standard_normal((5, 4))
    out = np.full((6, 4), np.nan)
    out.setflags(write=False)
    with pytest.raises(ValueError) as want:
        np.matmul(a, b, out=out)
    with pytest.raises(ValueError) as got:
        _run(a, b, kernel, out)
    assert str(got.value) == str(want.value) == "output array is read-only"
    with pytest.raises(ValueError, match="read-only"):
        tiledmm.matmul(a, b, backend="numba-cpu", kernel=kernel, out=out)
    assert np.isnan(out).all()


def test_split_bench_times_packing_and_loop(tmp_path):
    """benches/studies/numba_cpu_split.py (the packing / loop split of docs/model.md) runs and
    writes
    both phases with the model's figures beside them."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    out = tmp_path / "split.json"
    cmd = [sys.executable, "-m", "benches.studies.numba_cpu_split", "--sizes", "96", "--rounds",
           "2", "-o", str(out)]  # fmt: skip
    subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=300, cwd=root)
    rows = json.loads(out.read_text())["rows"]
    assert {r["family"] for r in rows} == {"tiled", "register"}
    for r in rows:
        assert r["measured"]["whole"] > 0 and r["measured"]["packing"] > 0
        assert r["model"]["packing"] > 0 and r["model"]["whole"] > r["model"]["packing"]
        assert r["pack_clocks_per_element"] > 0


def test_register_block_probe_runs_the_register_kernel():
    """`tiledmm calibrate`'s loop probe: ``compile_probe("register_block")`` runs the register
    kernel on one block (a right product, NaN-poisoned output); no other probe name exists."""
    be = tiledmm.get_backend("numba-cpu")
    assert be.compile_probe("acc_probe", {"THREADS": 1}) is None
    run = be.compile_probe("register_block", {"BM": 8, "BN": 32, "BK": 12, "TN": 8})
    rng = np.random.default_rng(3)
    a = rng.standard_normal((8, 29)).astype(np.float32)
    b = rng.standard_normal((29, 32)).astype(np.float32)
    c = np.full((8, 32), np.nan, np.float32)
    run(1, (a, b, c))
    np.testing.assert_allclose(c, _reference(a, b), rtol=2e-5, atol=2e-5)
