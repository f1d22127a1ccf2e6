"""numpy's matmul keywords on every array kind and backend (issue 39): ``tiledmm.matmul(a, b,
**kw)`` against ``numpy.matmul(a, b, **kw)`` for many keyword combinations, error cases
included (same exception type and message), on each CPU backend; the result's type, shape,
dtype and strides are numpy's, ``out`` is returned itself. Then: the kernels run (not
numpy.matmul), torch tensors and Dask arrays take the same keywords, and numpy's layout rule
(``order="K"``) holds on random strided views."""

from __future__ import annotations

from collections import namedtuple

import numpy as np
import pytest

import tiledmm
from tests.conftest import requires_backend
from tests.helpers import available_backends
from tiledmm.interop import ufunc_keywords

CPU_BACKENDS = [b for b in available_backends() if b in ("numpy", "opencl", "numba-cpu", "example")]

AX4 = [(1, 2), (0, 1), (0, 1)]  # CuPy's TestMatmulAxes cases, as (shapes, axes)
CUPY_AXES = [
    (((2, 5, 3, 2, 3, 4), (3, 5, 1, 1, 1, 4), (5, 5, 2, 2, 3, 4)), AX4),
    (((2, 5, 3, 2, 3, 4), (2, 5, 3, 1, 4, 1), (3, 1, 2, 5, 3, 2)), [(-2, -1), (-2, -1), (0, 1)]),
    (((3, 2, 4, 4), (4, 4, 3, 2), (4, 4, 3, 3)), [(0, 1), (-1, -2), (-2, -1)]),
    (((3, 2, 4, 4), (2, 3, 4, 4), (4, 3, 3, 4)), [(0, 1), (0, 1), (1, 2)]),
]

F8, F4 = "float64", "float32"
Pair = namedtuple("Pair", "first second")  # numpy takes tuple subclasses as axes items
M, N = (3, 4), (4, 5)


def out(shape, dtype=F8, view=None, wrap=False):
    """An out= operand: (shape, dtype, how to view it, whether in a 1-tuple)."""
    return (shape, dtype, view, wrap)


# id: (shape a, dtype a, shape b, dtype b, keywords, out or None)
# fmt: off
CASES = {
    **{f"cupy-axes-{i}": (s[0], F4, s[1], F4, {"axes": ax}, None) for i, (s, ax) in
       enumerate(CUPY_AXES)},
    **{f"cupy-axes-out-{i}": (s[0], F4, s[1], F4, {"axes": ax}, out(s[2])) for i, (s, ax) in
       enumerate(CUPY_AXES)},
    "axes-vec-vec": ((4,), F8, (4,), F8, {"axes": [0, (0,), ()]}, None),
    "axes-mat-vec": ((4, 3), F8, (4,), F8, {"axes": [(1, 0), (0,), (0,)]}, None),
    "axes-vec-batch": ((4,), F4, (2, 4, 5), F4, {"axes": [(0,), (1, 2), 0]}, None),
    "axes-default": ((2, 3, 4), F8, N, F8, {"axes": [(-2, -1), (-2, -1), (-2, -1)]}, None),
    "axes-namedtuple": (M, F8, N, F8, {"axes": [Pair(0, 1), Pair(0, 1), Pair(1, 0)]}, None),
    "axes-numpy-ints": (M, F8, N, F8, {"axes": [(np.int64(1), 0), (1, 0), (np.int8(0), 1)]},
                        None),
    "axes-int8": ((2, 3, 4), "int8", (4, 2, 5), "int8", {"axes": [(1, 2), (0, 2), (2, 0)]},
                  None),
    "axes-complex": ((3, 2, 4), "complex64", (4, 2, 5), F4, {"axes": [(0, 2), (0, 2), (0, 2)]},
                     None),
    "axes-empty": ((0, 3, 2), F4, (2, 4), F4, {"axes": [(1, 0), (0, 1), (1, 0)]}, None),
    "axes-k0": ((0, 3), F8, (0, 4), F8, {"axes": [(1, 0), (0, 1), (0, 1)]}, None),
    "order-C-F": ((2, 3, 4), F8, (2, 4, 5), F8, {"order": "C"}, None),
    "order-F": ((2, 3, 4), F4, (2, 4, 5), F4, {"order": "F"}, None),
    "order-f-lower": ((2, 3, 4), F4, (2, 4, 5), F4, {"order": "f"}, None),
    "order-bytes": ((2, 3, 4), F4, N, F4, {"order": b"F"}, None),
    "order-None": ((2, 3, 4), F4, N, F4, {"order": None}, None),
    "order-A-fortran": ("F", (3, 2, 3, 4), F8, (3, 2, 4, 5), F8, {"order": "A"}, None),
    "order-K-fortran": ("F", (3, 2, 3, 4), F8, (3, 2, 4, 5), F8, {"order": "K"}, None),
    "order-K-transposed": ("T", (3, 2, 3, 4), F4, (2, 3, 4, 5), F4, {"order": "K"}, None),
    "order-F-axes": ((2, 5, 3, 2, 3, 4), F4, (3, 5, 1, 1, 1, 4), F4, {"axes": AX4, "order": "F"},
                     None),
    "dtype-f4": (M, F8, N, F8, {"dtype": np.float32}, None),
    "dtype-f8": (M, F4, N, F4, {"dtype": "float64"}, None),
    "dtype-f4-from-f2": (M, "float16", N, "float16", {"dtype": F4}, None),
    "dtype-f8-from-int": (M, "int32", N, "int64", {"dtype": F8}, None),
    "dtype-int8-unsafe": (M, F8, N, F8, {"dtype": "int8", "casting": "unsafe"}, None),
    "dtype-c8": (M, F4, N, F4, {"dtype": "complex64"}, None),
    "signature-str": (M, F8, N, F8, {"signature": "ff->f"}, None),
    "signature-tuple": (M, F4, N, "int16", {"signature": (None, None, F8)}, None),
    "signature-full": (M, "int64", N, "int64", {"signature": (F4, F4, F4)}, None),
    "mixed-f4-f8": (M, F4, N, F8, {"casting": "same_kind"}, None),
    "casting-no": (M, F8, N, F8, {"casting": "no"}, out((3, 5))),
    "casting-equiv": (M, F4, N, F4, {"casting": "equiv"}, None),
    "casting-safe-out-f8": (M, F4, N, F4, {"casting": "safe"}, out((3, 5))),
    "casting-unsafe-bool": ((5, 3, 2), F4, (5, 2, 4), F8, {"casting": "unsafe"},
                            out((5, 3, 4), "bool")),
    "casting-unsafe-int": (M, F8, N, F8, {"casting": b"unsafe"}, out((3, 5), "int16")),
    "casting-same-kind-f2-out": (M, F4, N, F4, {"casting": "same_kind"}, out((3, 5), "float16")),
    "out-tuple": (M, F8, N, F8, {"axes": [(0, 1), (0, 1), (1, 0)]}, out((5, 3), wrap=True)),
    "out-strided": ((2, 3, 4), F4, N, F4, {"order": "C"}, out((2, 3, 10), F4, "every-2nd")),
    "out-fortran": ((2, 3, 4), F8, N, F8, {"subok": True}, out((2, 3, 5), F8, "F")),
    "out-broadcast": (M, F8, N, F8, {"subok": False}, out((2, 3, 5))),
    "out-broadcast-cast": (M, F8, N, F8, {"casting": "unsafe"}, out((2, 1, 3, 5), "int32")),
    "out-overlaps-a": ((4, 4), F8, (4, 4), F8, {"axes": [(1, 0), (0, 1), (0, 1)]}, "a"),
    "bool": (M, "bool", N, "bool", {"axes": [(0, 1), (0, 1), (0, 1)]}, None),
    # numpy's errors
    "err-axis": (M, F8, N, F8, {"axis": 0}, None),
    "err-keepdims": (M, F8, N, F8, {"keepdims": False}, None),
    "err-keepdims-int": (M, F8, N, F8, {"keepdims": 1}, None),
    "err-axes-None": (M, F8, N, F8, {"axes": None}, None),
    "err-axes-tuple": (M, F8, N, F8, {"axes": ((0, 1), (0, 1), (0, 1))}, None),
    "err-axes-two": (M, F8, N, F8, {"axes": [(0, 1), (0, 1)]}, None),
    "err-axes-list-item": (M, F8, N, F8, {"axes": [[0, 1], [0, 1], [0, 1]]}, None),
    "err-axes-float": (M, F8, N, F8, {"axes": [(0.0, 1), (0, 1), (0, 1)]}, None),
    "err-axes-bool": (M, F8, N, F8, {"axes": [(True, 0), (0, 1), (0, 1)]}, None),
    "err-axes-bounds": (M, F8, N, F8, {"axes": [(0, 1), (0, 1), (0, 5)]}, None),
    "err-axes-repeat": (M, F8, N, F8, {"axes": [(0, 1), (0, 1), (0, 0)]}, None),
    "err-axes-count": (M, F8, N, F8, {"axes": [(0, 1), (0, 1), (0,)]}, None),
    "err-axes-int-2d": (M, F8, N, F8, {"axes": [(0, 1), (0, 1), 0]}, None),
    "err-axes-core": (M, F8, N, F8, {"axes": [(1, 0), (1, 0), (1, 0)]}, None),
    "err-axes-out-shape": ((2, 3, 4), F8, (2, 4, 5), F8, {"axes": [(1, 2), (1, 2), (0, 1)]},
                           out((3, 6, 2))),
    "err-casting-word": (M, F8, N, F8, {"casting": "SAFE"}, None),
    "err-casting-None": (M, F8, N, F8, {"casting": None}, None),
    "err-casting-no": (M, F8, N, F4, {"casting": "no"}, None),
    "err-casting-safe": (M, F8, N, F8, {"casting": "safe", "dtype": F4}, None),
    "err-order-word": (M, F8, N, F8, {"order": "X"}, None),
    "err-order-int": (M, F8, N, F8, {"order": 1}, None),
    "err-order-list": (M, F8, N, F8, {"order": ["C"]}, None),
    "err-casting-list": (M, F8, N, F8, {"casting": ["no"]}, None),
    "err-subok": (M, F8, N, F8, {"subok": "x"}, None),
    "err-dtype-word": (M, F8, N, F8, {"dtype": "x"}, None),
    "err-dtype-input-cast": (M, F8, N, F8, {"dtype": np.int8}, None),
    "err-dtype-and-signature": (M, F8, N, F8, {"dtype": F4, "signature": "dd->d"}, None),
    "err-signature-one": (M, F8, N, F8, {"signature": "f"}, None),
    "err-signature-no-loop": (M, F8, N, F8, {"signature": (np.float32, None, None)}, None),
    "err-out-cast": (M, F8, N, F8, {"casting": "same_kind"}, out((3, 5), "int64")),
    "err-out-core": (M, F8, N, F8, {"order": "K"}, out((3, 6))),
    "err-out-loop": ((2, 3, 4), F8, N, F8, {"order": "K"}, out((3, 5))),
    "err-out-readonly": (M, F8, N, F8, {"order": "K"}, out((3, 5), F8, "readonly")),
    "err-out-list": (M, F8, N, F8, {"order": "K"}, "list"),
    "err-out-two": (M, F8, N, F8, {"order": "K"}, "two"),
    "err-out-int": (M, F8, N, F8, {"order": "K"}, 1),
    "err-where": (M, F8, N, F8, {"where": True}, None),
    "err-unknown": (M, F8, N, F8, {"bogus": 1}, None),
    "err-0d": ((), F8, N, F8, {"casting": "unsafe"}, None),
    "err-shapes": ((3,), F8, (4,), F8, {"order": "C"}, None),
    "err-no-loop": (M, "datetime64[s]", N, "datetime64[s]", {"order": "C"}, None),
}
# fmt: on


def _array(rng, shape, dtype, layout=""):
    """Small integer values (exact in every dtype and every summation order)."""
    x = rng.integers(-3, 4, shape).astype(dtype) if "datetime" not in dtype else np.zeros(
        shape, dtype)  # fmt: skip
    if layout == "F":
        return np.asfortranarray(x)
    if layout == "T":  # loop dimensions transposed in memory
        return np.ascontiguousarray(np.swapaxes(x, 0, 1)).swapaxes(0, 1)
    return x


def _out(spec, a):
    if spec == "a":
        return a
    if spec == "list":
        return [np.zeros((3, 5))]
    if spec == "two":
        return (np.zeros((3, 5)), np.zeros((3, 5)))
    if not isinstance(spec, tuple):
        return spec
    shape, dtype, view, wrap = spec
    o = np.zeros(shape, dtype)
    if view == "every-2nd":
        o = o[..., ::2]
    elif view == "F":
        o = np.asfortranarray(o)
    elif view == "readonly":
        o.flags.writeable = False
    return (o,) if wrap else o


def _operands(case, seed=0):
    rng = np.random.default_rng(seed)
    layout, case = (case[0], case[1:]) if isinstance(case[0], str) else ("", case)
    sa, da, sb, db, kw, spec = case
    a, b = _array(rng, sa, da, layout), _array(rng, sb, db, layout)
    return a, b, kw, _out(spec, a)


def _numpy(case):
    a, b, kw, o = _operands(case)
    try:
        return a, np.matmul(a, b, **({} if o is None else {"out": o}), **kw), o, None
    except Exception as e:  # noqa: BLE001 - any of numpy's errors is the expected one
        return a, None, o, e


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("name", list(CASES))
def test_keywords_as_numpy(name, backend):
    case = CASES[name]
    _, expect, _, error = _numpy(case)
    a, b, kw, o = _operands(case)
    call = dict(kw, backend=backend, **({} if o is None else {"out": o}))
    if error is not None:
        with pytest.raises(type(error)) as info:
            tiledmm.matmul(a, b, **call)
        assert type(info.value) is type(error) and str(info.value) == str(error)
        return
    got = tiledmm.matmul(a, b, **call)
    if o is not None:
        assert got is (o[0] if isinstance(o, tuple) else o)
        expect = _numpy(case)[2]
        expect = expect[0] if isinstance(expect, tuple) else expect
    assert type(got) is type(expect)
    assert np.shape(got) == np.shape(expect) and got.dtype == expect.dtype
    if isinstance(expect, np.ndarray):
        assert got.strides == expect.strides  # numpy's layout (order=, axes=)
    np.testing.assert_array_equal(got, expect)


def test_float_keywords_run_in_the_kernels(monkeypatch):
    """axes/order/casting/dtype calls of float32/float64 reach the backend's run, not
    numpy.matmul; integer ones go to numpy.matmul (numpy's loops, numpy's result)."""
    from tiledmm.core.registry import get_backend

    be, runs = get_backend("numpy"), []
    for name in ("run", "run_batched"):
        real = getattr(be, name)
        monkeypatch.setattr(be, name, lambda *a, _real=real, **k: runs.append(1) or _real(*a, **k))
    for key in ("cupy-axes-0", "cupy-axes-out-1", "order-F", "dtype-f4", "casting-unsafe-bool",
                "axes-vec-batch", "out-broadcast"):  # fmt: skip
        runs.clear()
        a, b, kw, o = _operands(CASES[key])
        tiledmm.matmul(a, b, backend="numpy", **kw, **({} if o is None else {"out": o}))
        assert runs, key
    runs.clear()
    a, b, kw, _ = _operands(CASES["axes-int8"])
    tiledmm.matmul(a, b, backend="numpy", **kw)
    assert not runs


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")  # np.matrix
def test_subclasses_keep_numpys_semantics():
    m = np.matrix([[1.0, 2.0], [3.0, 4.0]])
    res = tiledmm.matmul(m, m, casting="unsafe", order="F")
    assert type(res) is np.matrix
    np.testing.assert_array_equal(res, np.matmul(m, m))


@pytest.mark.parametrize("seed", range(3))
def test_layout_is_numpys_on_random_views(seed):
    """Random strided (transposed, reversed, every-other) views, random axes and order: the
    result's strides are numpy's (numpy's iterator sorts the loop dimensions by stride)."""
    rng = np.random.default_rng(seed)
    for _ in range(60):
        nl = int(rng.integers(0, 4))
        loop = [int(rng.choice([1, 2, 3])) for _ in range(nl)]
        m, k, n = (int(x) for x in rng.integers(1, 4, 3))
        sa = tuple(d if rng.random() < 0.7 else 1 for d in loop) + (m, k)
        sb = tuple(loop[int(rng.integers(0, nl + 1)) :]) + (k, n)
        a, b = _view(rng, sa), _view(rng, sb)
        kw = {"order": str(rng.choice(list("KACF")))}
        if rng.random() < 0.5:
            dims = (a.ndim, b.ndim, max(a.ndim, b.ndim))
            pa, pb, pr = (tuple(int(i) for i in rng.permutation(nd)[:2]) for nd in dims)
            a, b = np.moveaxis(a, (-2, -1), pa), np.moveaxis(b, (-2, -1), pb)
            kw["axes"] = [pa, pb, pr]
        expect = np.matmul(a, b, **kw)
        got = tiledmm.matmul(a, b, backend="numpy", **kw)
        assert got.strides == expect.strides, (a.shape, a.strides, b.shape, b.strides, kw)
        np.testing.assert_allclose(got, expect, rtol=1e-12)


def _view(rng, shape):
    perm = rng.permutation(len(shape))
    steps = [int(rng.choice([1, 2])) for _ in shape]
    base = rng.standard_normal([shape[p] * s for p, s in zip(perm, steps, strict=True)])
    v = base[tuple(slice(None, None, -s if rng.random() < 0.2 else s) for s in steps)]
    return np.transpose(v, np.argsort(perm))


def test_f_contiguous_is_numpys_flag():
    rng = np.random.default_rng(5)
    for _ in range(200):
        x = _view(rng, tuple(int(d) for d in rng.integers(0, 4, int(rng.integers(1, 5)))))
        got = ufunc_keywords.f_contiguous(x.shape, x.strides, x.itemsize)
        assert got == x.flags.f_contiguous, (x.shape, x.strides)


def test_check_reads_specs_only():
    """The rules take shapes and dtypes: the call numpy makes of them, or numpy's error."""
    spec = ufunc_keywords.Spec
    call = ufunc_keywords.check(spec((2, 5, 3), np.dtype(F4)), spec((3, 2, 4), np.dtype(F4)),
                                None, {"axes": [(1, 2), (0, 2), (2, 0)]})  # fmt: skip
    assert call.axes == ((1, 2), (0, 2), (2, 0)) and call.loop == (2,) and call.core == (5, 4)
    assert call.dtype == np.float32 and call.order == "K"
    with pytest.raises(ValueError, match="mismatch in its core dimension"):
        ufunc_keywords.check(spec((2, 3), np.dtype(F8)), spec((4, 5), np.dtype(F8)), None, {})


# ------------------------------------------------------------------------------- other kinds


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


@pytest.mark.parametrize("name", ["cupy-axes-0", "cupy-axes-out-1", "cupy-axes-2", "order-F",
                                  "order-F-axes", "dtype-f8", "casting-unsafe-bool",
                                  "out-broadcast-cast", "axes-mat-vec", "axes-int8",
                                  "err-axes-core", "err-out-cast", "err-axis"])  # fmt: skip
def test_torch_tensors_take_numpys_keywords(torch, name):
    """A non-numpy kind through the same code a device array takes: axes moved with
    torch.moveaxis (views), the result allocated by torch in numpy's layout, out written."""
    a, b, kw, o = _operands(CASES[name])
    _, expect, o_np, error = _numpy(CASES[name])
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    to = None if o is None else torch.from_numpy(o)
    call = dict(kw, backend="numpy", **({} if to is None else {"out": to}))
    if error is not None:
        with pytest.raises(type(error)) as info:
            tiledmm.matmul(ta, tb, **call)
        assert str(info.value) == str(error)
        return
    got = tiledmm.matmul(ta, tb, **call)
    assert isinstance(got, torch.Tensor)
    if to is not None:
        assert got is to
        expect = o_np
    assert tuple(got.shape) == expect.shape
    assert tuple(s * got.element_size() for s in got.stride()) == expect.strides
    np.testing.assert_array_equal(got.numpy(), expect)


def test_dask_arrays_take_numpys_keywords():
    """A kind without strides: the product with its axes moved (they were dropped before)."""
    da = pytest.importorskip("dask.array")
    a, b, kw, _ = _operands(CASES["cupy-axes-1"])
    x, y = da.from_array(a), da.from_array(b)
    got = tiledmm.matmul(x, y, backend="numpy", dtype=F8, **kw)
    assert isinstance(got, da.Array) and got.dtype == np.float64
    np.testing.assert_array_equal(got.compute(), np.matmul(a, b, dtype=F8, **kw))


@pytest.mark.gpu
@requires_backend("cupy")
@pytest.mark.parametrize("name", ["cupy-axes-0", "cupy-axes-out-1", "cupy-axes-3", "order-F-axes",
                                  "casting-unsafe-bool", "dtype-f4", "axes-int8", "out-broadcast",
                                  "err-axes-core", "err-out-cast"])  # fmt: skip
def test_gpu_cupy_arrays_take_numpys_keywords(name):
    """On the device: the same results, layout and errors as numpy, the arrays on the GPU."""
    import cupy as cp

    a, b, kw, o = _operands(CASES[name])
    _, expect, o_np, error = _numpy(CASES[name])
    ca, cb = cp.asarray(a), cp.asarray(b)
    co = None if o is None else cp.asarray(o)
    call = dict(kw, backend="cupy", **({} if co is None else {"out": co}))
    if error is not None:
        with pytest.raises(type(error)) as info:
            tiledmm.matmul(ca, cb, **call)
        assert str(info.value) == str(error)
        return
    got = tiledmm.matmul(ca, cb, **call)
    assert isinstance(got, cp.ndarray)
    if co is not None:
        assert got is co
        expect = o_np
    assert got.shape == expect.shape and got.dtype == expect.dtype
    assert got.strides == expect.strides
    np.testing.assert_array_equal(cp.asnumpy(got), expect)
