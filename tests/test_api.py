"""tiledmm.matmul is a drop-in for numpy.matmul: shapes, dtypes, out=, errors, NaN/Inf."""

from __future__ import annotations

import numpy as np
import pytest

import tiledmm
from tests.helpers import matmul_error

KERNELS = ["naive", "tiled", "register"]


def rand(rng, shape, dtype="float32"):
    return rng.standard_normal(shape).astype(dtype)


SHAPES = [
    ((7, 5), (5, 3)),
    ((65, 33), (33, 17)),
    ((1, 9), (9, 1)),
    ((5,), (5, 3)),
    ((4, 5), (5,)),
    ((6,), (6,)),
    ((2, 3, 4), (4, 5)),
    ((4, 5), (3, 5, 2)),
    ((2, 1, 3, 4), (5, 4, 6)),
    ((3,), (2, 3, 4)),
    ((2, 3, 4), (4,)),
]


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("sa, sb", SHAPES)
def test_shapes_match_numpy(rng, kernel, sa, sb):
    a, b = rand(rng, sa), rand(rng, sb)
    got = tiledmm.matmul(a, b, backend="numpy", kernel=kernel)
    want = np.matmul(a, b)
    assert type(got) is type(want)
    assert np.shape(got) == want.shape and got.dtype == want.dtype
    assert matmul_error(got, a, b) < 1e-5


def test_scalar_result_is_a_numpy_scalar(rng):
    a, b = rand(rng, 6), rand(rng, 6)
    got = tiledmm.matmul(a, b, backend="numpy")
    assert isinstance(got, np.float32) and not isinstance(got, np.ndarray)


@pytest.mark.parametrize(
    "da, db",
    [("float32", "float32"), ("float32", "float64"), ("int32", "float32"), ("float64", "int64")],
)
def test_kernel_dtypes_promote_like_numpy(rng, da, db):
    a, b = (
        (rng.standard_normal((9, 7)) * 4).astype(da),
        (rng.standard_normal((7, 5)) * 4).astype(db),
    )
    got = tiledmm.matmul(a, b, backend="numpy", kernel="tiled")
    want = np.matmul(a, b)
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "dtype",
    ["bool", "int8", "int32", "uint16", "int64", "float16", "complex64", "complex128", "object"],
)
def test_delegated_dtypes_are_numpys_exact_result(rng, dtype):
    a = (rng.standard_normal((6, 5)) * 3).astype(dtype)
    b = (rng.standard_normal((5, 4)) * 3).astype(dtype)
    got = tiledmm.matmul(a, b, backend="numpy")
    want = np.matmul(a, b)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_lists_are_accepted():
    assert tiledmm.matmul([[1.0, 2.0]], [[3.0], [4.0]], backend="numpy").tolist() == [[11.0]]


@pytest.mark.parametrize("kernel", KERNELS)
def test_out_is_filled_and_returned(rng, kernel):
    a, b = rand(rng, (2, 9, 7)), rand(rng, (7, 11))
    out = np.full((2, 9, 11), np.nan, dtype="float32")
    got = tiledmm.matmul(a, b, backend="numpy", kernel=kernel, out=out)
    assert got is out
    np.testing.assert_allclose(out, np.matmul(a, b), rtol=1e-5, atol=1e-5)


def test_out_with_other_dtype_casts_same_kind(rng):
    a, b = rand(rng, (5, 4), "float64"), rand(rng, (4, 3), "float64")
    out = np.empty((5, 3), dtype="float32")
    assert tiledmm.matmul(a, b, backend="numpy", out=out) is out
    np.testing.assert_allclose(out, np.matmul(a, b), rtol=1e-6)


def test_out_that_numpy_broadcasts_into(rng):
    a, b = rand(rng, (3, 4)), rand(rng, (4, 5))
    out, ref = np.empty((2, 3, 5), "float32"), np.empty((2, 3, 5), "float32")
    assert tiledmm.matmul(a, b, backend="numpy", out=out) is out
    np.matmul(a, b, out=ref)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)  # (an entry may cancel to ~0)


def test_out_aliasing_an_input(rng):
    a, b = rand(rng, (6, 6)), rand(rng, (6, 6))
    want = np.matmul(a, b)
    got = tiledmm.matmul(a, b, backend="numpy", out=a)
    assert got is a
    np.testing.assert_allclose(a, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "sa, sb",
    [((7,), (7, 9)), ((9, 7), (7,)), ((7,), (7,)), ((7,), (3, 7, 9)), ((3, 9, 7), (7,))],
    ids=["x@A", "A@x", "x@y", "x@batch", "batch@x"],
)
def test_vector_out_is_written_in_place(rng, monkeypatch, sa, sb):
    """A 1-D operand's product lands in the caller's out= (strided too) through a view, with
    no temporary: the backend is never asked for an output array."""
    a, b = rand(rng, sa), rand(rng, sb)
    want = np.matmul(a.astype("float64"), b)
    shape = want.shape
    big = np.full(shape[:-1] + (2 * shape[-1],) if shape else (), np.nan, "float32")
    out = big[..., ::2] if shape else big
    be = tiledmm.get_backend("numpy")

    def no_temporary(*args, **kwargs):
        raise AssertionError("out= given: the result must not go through a temporary")

    monkeypatch.setattr(be, "empty", no_temporary)
    assert tiledmm.matmul(a, b, backend="numpy", out=out) is out
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    if shape:
        assert np.isnan(big[..., 1::2]).all()  # the gaps between out's elements untouched


def test_vector_out_aliasing_its_input(rng):
    x, a = rand(rng, (8,)), rand(rng, (8, 8))
    want = np.matmul(x, a)
    assert tiledmm.matmul(x, a, backend="numpy", out=x) is x
    np.testing.assert_allclose(x, want, rtol=1e-5, atol=1e-5)


def numpy_error(call):
    try:
        call()
    except Exception as exc:  # noqa: BLE001
        return exc
    raise AssertionError("numpy did not raise")


@pytest.mark.parametrize(
    "sa, sb, out_shape, out_dtype",
    [
        ((3, 4), (5, 2), None, None),
        ((4,), (5,), None, None),
        ((2, 3), (4,), None, None),
        ((2, 2, 3), (3, 3, 3, 2), None, None),
        ((), (3,), None, None),
        ((3, 4), (4, 5), (5, 3), "float32"),
        ((3, 4), (4, 5), (3, 5), "int32"),
        ((3, 4), (4,), (3, 1), "float32"),
    ],
)
def test_errors_are_numpys(sa, sb, out_shape, out_dtype):
    a, b = np.ones(sa, "float32"), np.ones(sb, "float32")
    kw = {} if out_shape is None else {"out": np.empty(out_shape, out_dtype)}
    want = numpy_error(lambda: np.matmul(a, b, **kw))
    with pytest.raises(type(want)) as got:
        tiledmm.matmul(a, b, backend="numpy", **kw)
    assert str(got.value) == str(want)


def test_bad_kernel_and_backend_names():
    a = np.ones((2, 2), "float32")
    with pytest.raises(ValueError, match="kernel must be"):
        tiledmm.matmul(a, a, kernel="fast")
    with pytest.raises(ValueError, match="unknown backend"):
        tiledmm.matmul(a, a, backend="tpu9000")


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize(
    "sa, sb",
    [
        ((0, 4), (4, 3)),
        ((3, 0), (0, 2)),
        ((3, 4), (4, 0)),
        ((0, 3, 4), (4, 2)),
        ((0,), (0,)),
        ((2, 0), (0,)),
    ],
)
def test_empty_dimensions(kernel, sa, sb):
    a, b = np.ones(sa, "float32"), np.ones(sb, "float32")
    got = tiledmm.matmul(a, b, backend="numpy", kernel=kernel)
    want = np.matmul(a, b)
    assert np.shape(got) == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("kernel", KERNELS)
def test_strided_and_transposed_inputs(rng, kernel):
    base_a, base_b = rand(rng, (40, 60)), rand(rng, (50, 30))
    a, b = base_a[::2, 1::3].T, base_b[::-1, ::2][:20]  # non-contiguous, transposed, reversed
    got = tiledmm.matmul(a, b, backend="numpy", kernel=kernel)
    np.testing.assert_allclose(got, np.matmul(a, b), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kernel", KERNELS)
def test_nan_and_inf_propagate_like_numpy(rng, kernel):
    # 37 x 29 x 23: every tile size used by the families leaves a ragged edge.
    a, b = rand(rng, (37, 23)), rand(rng, (23, 29))
    a[0, 0], a[36, 22], a[5, 7] = np.inf, -np.inf, np.nan
    b[22, 28], b[3, 0] = np.inf, np.nan
    with np.errstate(invalid="ignore"):
        got = tiledmm.matmul(a, b, backend="numpy", kernel=kernel)
        want = np.matmul(a, b)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-4, atol=1e-4)


def test_import_is_light():
    import subprocess
    import sys

    code = (
        "import sys, numpy, tiledmm; a = numpy.ones((3, 3)); "
        "tiledmm.matmul(a, a, backend='numpy'); tiledmm.plan(9, 9, 9, backend='numpy'); "
        "bad = [m for m in ('cupy', 'numba', 'pyopencl', 'matplotlib') if m in sys.modules]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


# The CuPy backend's pre-bound launch (the hot paths' launch), against stand-ins: no GPU.


class _Fn:
    """A compiled kernel that records its launches (CuPy's ``Function`` call)."""

    def __init__(self, name):
        self.name, self.calls, self.streams = name, [], []

    def __call__(self, grid, block, args, shared_mem=0, stream=None):
        assert shared_mem == 0
        self.streams.append(stream)
        vals = [getattr(a, "value", a) for a in args]  # (CuPy's CScalar holds .value)
        self.calls.append((grid, block, [int(v) if isinstance(v, np.integer) else v
                                         for v in vals]))  # fmt: skip


def _bound(monkeypatch, m=13, n=8, k=12, dtype="float32", pad=False, **opts):
    from types import SimpleNamespace

    cc = pytest.importorskip("tiledmm_backends.cupy_cuda")
    monkeypatch.setattr(cc.ARRAYS, "device_id", lambda: 0)
    monkeypatch.setattr(cc.K, "pad_pays", lambda plan, *odd: pad)
    fns = {True: _Fn("aligned"), False: _Fn("unaligned")}

    def raw_kernel(al):  # CuPy's RawKernel: keywords only; the launch uses its .kernel
        def call(grid, block, args, **kwargs):
            raise AssertionError("RawKernel.__call__ used")

        call.kernel = fns[al]
        return call

    be = cc.CupyBackend()
    be.launches = SimpleNamespace(get=lambda plan, dev, al, one: (raw_kernel(al), [2, 3], (16, 16)))
    plan = SimpleNamespace(kernel=opts.pop("kernel", "tiled"), dtype=dtype, m=m, n=n, k=k,
                           options=opts)  # fmt: skip
    return be.bind(plan), fns


def test_cupy_bound_launch_arguments(monkeypatch):
    go, fns = _bound(monkeypatch)
    assert go(0x1000, 0x2000, 0x3000, 0x1000, 0x2000)  # ld 12 and 8: 16-byte rows
    ((grid, block, args),) = fns[True].calls
    assert (grid, block) == ((2, 3), (16, 16))
    # m, n, k, A, offset, lda, B, offset, ldb, C, offset, ldc, then one matrix's batch
    assert args == [13, 8, 12, 0x1000, 0, 12, 0x2000, 0, 8, 0x3000, 0, 8, 1, 0, 0, 0, 0, 0,
                    0, 0]  # fmt: skip
    assert go(0x1000, 0x2004, 0x3000, 0x1000, 0x2004, "s") and len(fns[False].calls) == 1
    assert fns[True].streams == [None] and fns[False].streams == ["s"]  # None: CuPy's current
    arrays = type("A", (), {})  # CuPy arrays: contiguity flag and address
    x, y, z = arrays(), arrays(), arrays()
    x._c_contiguous, y._c_contiguous = True, False
    x.data = y.data = type("P", (), {"ptr": 0x4000})()
    assert not go.arrays(x, y, z)  # a strided operand: the backend's run decides
    y._c_contiguous = True
    assert go.arrays(x, y, z) and fns[True].calls[-1][2][3] is x


def test_cupy_bound_launch_refuses_what_run_must_do(monkeypatch):
    go, fns = _bound(monkeypatch, n=7, pad=True)  # odd ldb, and the plan pads: none
    assert go is None
    go, fns = _bound(monkeypatch, pad=True)
    assert not go(0x1000, 0x2004, 0x3000, 0x1000, 0x2004)  # unaligned B and padding pays
    assert fns[True].calls == fns[False].calls == []
    for kw in ({"split_k": 4}, {"kernel": "mma"}, {"k": 0}, {"m": 2**16, "k": 2**16}):
        assert _bound(monkeypatch, **kw)[0] is None, kw


class _Dev:
    """A stand-in device array (host memory) for a registered stand-in device backend."""

    def __init__(self, x):
        self.x = x
        self.shape, self.dtype, self.ndim = x.shape, x.dtype, x.ndim

    def reshape(self, *shape):
        return _Dev(self.x.reshape(*shape))

    def __setitem__(self, idx, value):
        self.x[idx] = value.x if isinstance(value, _Dev) else value


def test_out_on_the_hot_path_for_device_arrays(rng):
    from tiledmm.core import engine, registry

    class DevBackend(tiledmm.Backend):
        name, kernels = "devstandin", ("naive",)
        runs: list = []

        def accepts(self, x):
            return isinstance(x, _Dev)

        def asarray(self, x, dtype):
            return x if isinstance(x, _Dev) and x.dtype == dtype else _Dev(np.asarray(x, dtype))

        def empty(self, shape, dtype, like=None):
            return _Dev(np.full(shape, np.nan, dtype))

        def to_numpy(self, x):
            return x.x

        def run(self, plan, a, b, out):
            self.runs.append(out)
            np.matmul(a.x, b.x, out=out.x)

    try:
        tiledmm.register_backend(DevBackend())
        a, b = _Dev(rand(rng, (9, 5))), _Dev(rand(rng, (5, 7)))
        out = _Dev(np.full((9, 7), np.nan, np.float32))
        assert tiledmm.matmul(a, b, backend="devstandin", out=out) is out  # learns the key
        calls = []
        real = engine._matmul
        engine._matmul = lambda *args, **kw: (calls.append(1), real(*args, **kw))[1]
        try:
            for _ in range(2):  # fresh operands and out of the same key: the hot path
                a, b = _Dev(rand(rng, (9, 5))), _Dev(rand(rng, (5, 7)))
                out = _Dev(np.full((9, 7), np.nan, np.float32))
                assert tiledmm.matmul(a, b, backend="devstandin", out=out) is out
                assert DevBackend.runs[-1] is out and calls == []
                assert matmul_error(out.x, a.x, b.x) < 1e-5
            for bad in (np.full((9, 7), np.nan, np.float32), _Dev(np.zeros((9, 7))),
                        _Dev(np.zeros((7, 9), np.float32))):  # fmt: skip
                try:  # host out, another dtype or shape: the full path's rules
                    tiledmm.matmul(a, b, backend="devstandin", out=bad)
                except ValueError:
                    pass
                assert calls, bad
                calls.clear()
        finally:
            engine._matmul = real
    finally:
        registry.reload()


@pytest.mark.parametrize("backend", ["numpy", "opencl"])
@pytest.mark.parametrize(
    ("sa", "sb"),
    [((7,), (7, 5)), ((6, 7), (7,)), ((7,), (7,)), ((3, 6, 7), (7, 5)), ((2, 1, 6, 7), (3, 7, 5))],
)  # fmt: skip
def test_hot_path_for_batched_and_1d_products(backend, sa, sb, monkeypatch):
    """A batched or 1-D product seen before takes the hot path, with fresh data each call."""
    from tiledmm.core import engine

    if tiledmm.get_backend(backend).unavailable_reason():
        pytest.skip(f"{backend} unavailable")
    rng = np.random.default_rng(5)
    for call in range(3):
        if call == 1:  # from now on the full path must not be needed

            def full(*args, **kw):
                raise AssertionError("the full path ran for a product seen before")

            monkeypatch.setattr(engine, "_matmul", full)
        a, b = rng.random(sa, dtype=np.float32), rng.random(sb, dtype=np.float32)
        got = tiledmm.matmul(a, b, backend=backend)
        ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
        assert np.shape(got) == ref.shape and np.asarray(got).dtype == np.float32
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("sa", "sb"), [((7,), (7, 5)), ((6, 7), (7,))])
@pytest.mark.parametrize("takes", [True, False])
def test_hot_path_1d_uses_the_bound_launch(sa, sb, takes, monkeypatch):
    """A 1-D product seen before goes through the backend's bound launch (as 2-D ones do):
    (k,) read as (1, k) or (k, 1), the result allocated in its final 1-D shape; a launch that
    declines (False) falls back to the shaped path."""
    from tiledmm.core import engine

    calls = []

    class Bound:
        def arrays(self, a, b, c):
            calls.append((a.shape, b.shape, c.shape))
            if takes:
                c[...] = np.matmul(a.astype(np.float64), b).astype(c.dtype)
            return takes

    monkeypatch.setattr(engine, "bound", lambda be, plan: Bound())
    engine._fast.clear()
    rng = np.random.default_rng(8)
    for _ in range(3):
        a, b = rng.random(sa, dtype=np.float32), rng.random(sb, dtype=np.float32)
        got = tiledmm.matmul(a, b, backend="numpy")
        ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
        assert got.shape == ref.shape
        np.testing.assert_allclose(got, ref, rtol=1e-5)
    assert len(calls) == 2 and calls[0] == (sa, sb, ref.shape)  # calls 2 and 3: the hot path


@pytest.mark.parametrize("kernel", ["auto", "tiled"])
@pytest.mark.parametrize("backend", ["numpy", "auto"])
@pytest.mark.parametrize("foreign", [False, True])
def test_one_route_one_resolution_one_dispatch_per_call(foreign, backend, kernel, monkeypatch):
    """From ``tiledmm.matmul`` to the launch (a product not seen before), the operands' kinds
    are decided once (``kinds.route``); a backend's name is resolved once
    (``registry.get_backend``: NumPy operands by the engine's choice, a foreign (DLPack) operand
    by the route, whose Backend the bridge hands to the engine); dispatch is entered once
    (``dispatch.decide``); and the ``kernel`` argument is checked in one place,
    ``semantics.check_kernel``: its name first, then, for a named backend, that the backend has
    it. Dispatch plans through ``plan_product``, not ``make_plan`` (whose argument checks are
    for other callers: the tuning database's check of an entry, say)."""
    import sys
    from pathlib import Path

    from tests.test_interop import StandIn
    from tiledmm.core import dispatch, engine, registry, semantics
    from tiledmm.interop import kinds
    from tiledmm.planner import make

    counts = {"route": 0, "get_backend": 0}

    def counted(name, real):
        def wrapper(*args, **kw):
            counts[name] += 1
            return real(*args, **kw)

        return wrapper

    monkeypatch.setattr(kinds, "route", counted("route", kinds.route))
    monkeypatch.setattr(registry, "get_backend", counted("get_backend", registry.get_backend))
    dispatch.clear_caches()
    engine._fast.clear()
    rng = np.random.default_rng(36)
    a, b = rng.random((7, 5), dtype=np.float32), rng.random((5, 3), dtype=np.float32)
    calls: list[tuple[str, str, str]] = []  # (file, function, caller's file) of each call

    def profile(frame, event, arg):
        if event == "call":
            back = frame.f_back.f_code.co_filename if frame.f_back else ""
            calls.append((frame.f_code.co_filename, frame.f_code.co_name, back))

    sys.setprofile(profile)
    try:
        got = tiledmm.matmul(StandIn(a) if foreign else a, b, backend=backend, kernel=kernel)
    finally:
        sys.setprofile(None)
    named = backend != "auto"
    assert counts == {"route": 1, "get_backend": int(named)}
    here = {m: str(Path(m.__file__)) for m in (dispatch, semantics, make)}
    entries = [f for path, f, back in calls if path == here[dispatch] != back]
    assert entries == ["decide"], entries  # dispatch entered once
    checks = [f for path, f, _ in calls if path == here[semantics] and f.startswith("check_k")]
    assert checks == ["check_kernel"] * (1 + (named and kernel != "auto")), checks
    assert not [f for path, f, back in calls if path == here[make] and back == here[dispatch]
                and f == "make_plan"]  # fmt: skip
    got = np.from_dlpack(got) if foreign else got
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-5)


def test_a_dtype_run_on_tensor_cores_only_takes_the_hot_path(monkeypatch):
    """float16 on a backend that runs it only on tensor cores: ``kernel="auto"`` becomes
    ``mma`` in dispatch, and the hot path is still keyed by what the caller asked ("auto"):
    a product seen before is neither decided nor planned again (it was, on every call, before:
    90 us per call on an H100 for 8 x 14336 x 4096)."""
    from tests.helpers import HostMma16
    from tiledmm.core import dispatch, engine, registry

    be = HostMma16()
    tiledmm.register_backend(be)
    decided = []
    real = dispatch.decide
    monkeypatch.setattr(engine, "decide", lambda *a, **k: decided.append(1) or real(*a, **k))
    try:
        engine._fast.clear()
        rng = np.random.default_rng(16)
        a = rng.standard_normal((40, 24)).astype(np.float16)
        b = rng.standard_normal((24, 56)).astype(np.float16)
        for _ in range(3):
            got = tiledmm.matmul(a, b, backend=be.name)
            assert got.dtype == np.float16
            assert matmul_error(got, a, b) < 1e-2
        assert len(decided) == 1
    finally:
        registry.reload()
