"""Host array-likes that are not ndarrays (issue 33): an object with ``shape``, ``dtype`` and
``__array__`` (a minimal wrapper; dask's test class EncapsulateNDArray) is host data, so every
CPU backend returns NumPy for it, as docs/interop.md promises (the OpenCL backend returned a
``pyopencl.array.Array``; ``backend="auto"`` found no backend for it). A type a registered
backend takes as its own native array stays that backend's."""

from __future__ import annotations

import numpy as np
import pytest

import tiledmm
from tests.conftest import backend_reason
from tiledmm.core import registry
from tiledmm.util.accuracy import matmul_error

CPU_BACKENDS = ["numpy", "opencl", "numba-cpu", "example", "auto"]


class Wrapper:
    """The least an array-like can be: shape, dtype, ndim and ``__array__``."""

    def __init__(self, x) -> None:
        self._x = np.asarray(x)

    shape = property(lambda self: self._x.shape)
    dtype = property(lambda self: self._x.dtype)
    ndim = property(lambda self: self._x.ndim)

    def __array__(self, dtype=None, copy=None):
        return self._x if dtype is None else self._x.astype(dtype)


def _backend(name: str) -> str:
    why = None if name == "auto" else backend_reason(name)
    if why:
        pytest.skip(f"{name} unavailable: {why}")
    return name


@pytest.mark.parametrize("name", CPU_BACKENDS)
@pytest.mark.parametrize(
    "sa,sb", [((17, 9), (9, 13)), ((9,), (9, 5)), ((6, 9), (9,)), ((2, 5, 9), (9, 4))]
)
def test_a_wrapper_comes_back_as_numpy(name, sa, sb):
    backend = _backend(name)
    rng = np.random.default_rng(11)
    a, b = rng.standard_normal(sa).astype(np.float32), rng.standard_normal(sb).astype(np.float32)
    ref = np.matmul(a, b)
    for x, y in ((Wrapper(a), Wrapper(b)), (Wrapper(a), b), (a, Wrapper(b))):
        for _ in range(2):  # the second call takes the hot path where there is one
            c = tiledmm.matmul(x, y, backend=backend)
            assert type(c) is np.ndarray, (name, type(c))
            assert c.shape == ref.shape and c.dtype == ref.dtype
            assert matmul_error(c, a, b) < 1e-5


@pytest.mark.parametrize("name", CPU_BACKENDS)
def test_dasks_encapsulated_ndarray_comes_back_as_numpy(name):
    backend = _backend(name)
    enc = pytest.importorskip("dask.array.tests.test_dispatch").EncapsulateNDArray
    rng = np.random.default_rng(12)
    a, b = rng.standard_normal((8, 5)), rng.standard_normal((5, 3))
    c = tiledmm.matmul(enc(a), enc(b), backend=backend)
    assert type(c) is np.ndarray and matmul_error(c, a, b) < 1e-12


class _Native(Wrapper):
    """A plugin's own array type (it also has ``__array__``)."""

    def reshape(self, *shape):
        return _Native(self._x.reshape(*shape))


class _NativeBackend(tiledmm.Backend):
    name = "native-wrapper"
    kernels = ("naive",)

    def accepts(self, x):
        return isinstance(x, _Native)

    def asarray(self, x, dtype):
        return _Native(np.asarray(x, dtype))

    def empty(self, shape, dtype, like=None):
        return _Native(np.empty(shape, dtype))

    def run(self, plan, a, b, out):
        out._x[...] = np.asarray(a) @ np.asarray(b)


def test_a_backends_own_array_type_is_left_to_it():
    tiledmm.register_backend(_NativeBackend())
    try:
        a, b = np.ones((3, 4), np.float32), np.ones((4, 2), np.float32)
        c = tiledmm.matmul(_Native(a), _Native(b), backend="native-wrapper")
        assert isinstance(c, _Native) and np.array_equal(np.asarray(c), a @ b)
    finally:
        registry.reload()
