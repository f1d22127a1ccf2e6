"""float16 / bfloat16 PyTorch tensors on the tensor cores (``tiledmm.interop.halfprec``, issue 14).

CPU part (CI): which operands take the path (``half_dtype``), the views' dtypes, the bridge's
hook, and the device-independent ``halfprec.run`` on CPU tensors with NumPy views and a
stand-in tensor-core backend (plan dtype, kernel family, broadcasting, 1-D, ``out=``); CPU half
tensors still go to ``torch.matmul`` exactly; ml_dtypes bfloat16 arrays give float32, as NumPy.
GPU part (marked ``gpu``): CUDA tensors of both dtypes through the CuPy backend's ``mma``
family against a float64 product of the (rounded) inputs and beside torch.matmul's own error.
"""

from __future__ import annotations

import numpy as np
import pytest

import tiledmm
from tiledmm.core import registry, semantics
from tiledmm.interop import bridge as arrays
from tiledmm.interop import halfprec, kinds
from tiledmm.interop.kinds import Kind

from .conftest import backend_reason
from .helpers import HostMma16

torch = pytest.importorskip("torch")

DTYPES = ["float16", "bfloat16"]
#: relative Frobenius error against a float64 product of the 16-bit inputs (K <= ~1024): the
#: 16-bit rounding of the result (float32 sums)
TOL = {"float16": 1e-3, "bfloat16": 4e-3}
CUDA = Kind("torch", "cuda", 0, True)


def tensor(rng, shape, dtype, device="cpu"):
    """Fresh values in [-1, 1) as a ``dtype`` tensor (never zeros)."""
    x = torch.from_numpy(rng.random(shape, dtype=np.float32) * 2 - 1)
    return x.to(device=device, dtype=getattr(torch, dtype))


def rel_error(got, a, b) -> float:
    """||got - a @ b|| / ||a @ b||, the product in float64 of the 16-bit values themselves."""
    ref = torch.matmul(a.double(), b.double())
    return float(torch.linalg.norm(got.double() - ref) / torch.linalg.norm(ref))


# --------------------------------------------------------------------- which operands


@pytest.mark.parametrize("dtype", DTYPES)
def test_half_dtype_names_the_plan_dtype(rng, dtype):
    a, b = tensor(rng, (5, 7), dtype), tensor(rng, (7, 3), dtype)
    assert halfprec.half_dtype(torch, a, b) == dtype
    assert halfprec.half_dtype(torch, a[0], b) == dtype  # 1-D: NumPy's promotion
    assert halfprec.half_dtype(torch, tensor(rng, (2, 1, 5, 7), dtype), b.T.T) == dtype
    out = torch.empty((5, 3), dtype=a.dtype)
    assert halfprec.half_dtype(torch, a, b, out) == dtype


def test_half_dtype_refuses_what_torch_keeps(rng):
    f16, bf16 = (tensor(rng, (4, 4), d) for d in DTYPES)
    f32 = tensor(rng, (4, 4), "float32")
    refused = {
        "float32": (f32, f32, None),
        "mixed 16-bit": (f16, bf16, None),
        "16-bit @ float32": (f16, f32, None),
        "shape mismatch": (f16, tensor(rng, (5, 4), "float16"), None),
        "empty K": (tensor(rng, (4, 0), "float16"), tensor(rng, (0, 3), "float16"), None),
        "empty batch": (tensor(rng, (0, 4, 4), "float16"), f16, None),
        "out of another dtype": (f16, f16, torch.empty((4, 4), dtype=torch.float32)),
        "out of another shape": (f16, f16, torch.empty((4, 5), dtype=torch.float16)),
        "out with overlap": (f16, f16, torch.empty((4, 1), dtype=torch.float16).expand(4, 4)),
        "requires grad": (f16.clone().requires_grad_(), f16, None),
        "not a tensor": (f16, np.ones((4, 4), np.float16), None),
    }
    for what, (a, b, out) in refused.items():
        assert halfprec.half_dtype(torch, a, b, out) is None, what
    with torch.no_grad():  # inference: the graph is not needed, the path runs it
        assert halfprec.half_dtype(torch, f16.clone().requires_grad_(), f16) == "float16"


def test_views_and_result_shapes():
    assert halfprec.storage_dtype("float16") == np.float16
    assert halfprec.storage_dtype("bfloat16") == np.uint16  # CuPy has no bfloat16
    assert semantics.result_shape((2, 1, 5, 7), (3, 7, 4)) == (2, 3, 5, 4)
    assert semantics.result_shape((7,), (7,)) == ()
    assert semantics.result_shape((5, 7), (7,)) == (5,)
    assert semantics.result_shape((5, 7), (6, 3)) is None


def test_matmul_hands_back_what_it_does_not_run(rng, monkeypatch):
    """CPU tensors, precision=, NumPy keywords and other kinds: None (the bridge delegates),
    before any backend is looked at."""
    monkeypatch.setattr(halfprec, "run", None)  # reaching it would fail
    a, b = tensor(rng, (4, 6), "bfloat16"), tensor(rng, (6, 2), "bfloat16")
    cpu = Kind("torch", "cpu", 0, True)

    def ask(kind, kwargs):
        return halfprec.matmul(kind, a, b, None, kwargs, None)

    assert ask(cpu, {"backend": "auto", "kernel": "auto"}) is None
    assert ask(CUDA, {"backend": "auto"}) is None  # CPU tensors
    assert ask(CUDA, {"precision": "tf32"}) is None
    assert ask(CUDA, {"dtype": "float32"}) is None
    assert ask(Kind("jax", "cuda", 0, True), {}) is None


def test_bridge_asks_halfprec_before_delegating(rng, monkeypatch):
    a, b = tensor(rng, (3, 5), "float16"), tensor(rng, (5, 2), "float16")
    seen = []
    monkeypatch.setattr(halfprec, "matmul", lambda *args: seen.append(args) or "ran")
    got = arrays.matmul_foreign(CUDA, a, b, None, backend="cupy", kernel="mma")
    assert got == "ran" and seen[0][:4] == (CUDA, a, b, None)
    assert seen[0][4] == {"backend": "cupy", "kernel": "mma"} and callable(seen[0][5])
    monkeypatch.setattr(halfprec, "matmul", lambda *args: None)  # not run: torch.matmul
    got = arrays.matmul_foreign(CUDA, a, b, None, backend="numpy")
    assert got.dtype == torch.float16 and torch.equal(got, torch.matmul(a, b))
    monkeypatch.undo()
    got = arrays.matmul_foreign(kinds.route(a, b).kind, a, b, None, backend="numpy")
    assert torch.equal(got, torch.matmul(a, b))


# --------------------------------------------------------------------- the path on stand-ins


def _host_view(t):
    """The CPU analogue of the bridge's CUDA views: NumPy over the tensor's memory, its
    strides (bfloat16 tensors come as int16: :func:`halfprec.words`)."""
    assert t.dtype in (torch.float16, torch.int16)
    return t.numpy()


@pytest.fixture
def fake():
    be = HostMma16()
    tiledmm.register_backend(be)
    yield be
    registry.reload()


def _run(fake, a, b, out=None, kernel="auto"):
    name = halfprec.half_dtype(torch, a, b, out)
    assert name is not None
    return halfprec.run(torch, a, b, out, name, fake.name, kernel, _words(name))


def _words(name):
    return halfprec.words(torch, _host_view, name)


SHAPES = [((257, 77), (77, 129)), ((2, 1, 33, 20), (3, 20, 17)), ((20,), (4, 20, 9)),
          ((6, 31, 20), (20,)), ((20,), (20,))]  # fmt: skip


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("sa, sb", SHAPES)
def test_run_plans_the_dtype_on_mma(rng, fake, dtype, sa, sb):
    a, b = tensor(rng, sa, dtype), tensor(rng, sb, dtype)
    got = _run(fake, a, b)
    want = torch.matmul(a, b)
    assert type(got) is torch.Tensor and got.dtype == a.dtype and got.shape == want.shape
    assert fake.plans and all(p.dtype == dtype and p.kernel == "mma" for p in fake.plans)
    assert rel_error(got, a, b) < TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
def test_run_writes_out_and_strided_operands(rng, fake, dtype):
    a = tensor(rng, (2, 41, 60), dtype)[:, :, ::2]  # strided
    b = tensor(rng, (23, 30), dtype).T  # transposed: (30, 23)
    big = torch.full((2, 41, 50), float("nan"), dtype=a.dtype)
    out = big[:, :, 3:26]  # a strided out: written through, the rest untouched
    assert _run(fake, a, b, out) is out
    assert rel_error(out, a, b) < TOL[dtype]
    assert torch.isnan(big[:, :, :3]).all() and torch.isnan(big[:, :, 26:]).all()
    sq = tensor(rng, (37, 37), dtype)
    x, want = sq.clone(), torch.matmul(sq.double(), sq.double())
    assert _run(fake, sq, x, out=x) is x  # out is an operand: computed aside, then copied
    err = torch.linalg.norm(x.double() - want) / torch.linalg.norm(want)
    assert err < TOL[dtype]


def test_run_errors_and_refusals(rng, fake):
    a, b = tensor(rng, (8, 8), "bfloat16"), tensor(rng, (8, 8), "bfloat16")
    with pytest.raises(ValueError, match="tensor cores only"):
        _run(fake, a, b, kernel="register")
    with pytest.raises(ValueError, match="kernel must be"):
        _run(fake, a, b, kernel="fastest")
    assert halfprec.run(torch, a, b, None, "bfloat16", "numpy", "auto", _words("bfloat16")) is None
    assert not fake.plans


# --------------------------------------------------------------------- CPU stays torch's


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend", ["auto", "numpy"])
def test_cpu_half_tensors_are_torch_exactly(rng, dtype, backend):
    a, b = tensor(rng, (3, 9, 5), dtype), tensor(rng, (5, 4), dtype)
    got = tiledmm.matmul(a, b, backend=backend)
    assert got.dtype == a.dtype and torch.equal(got, torch.matmul(a, b))
    out = torch.full((3, 9, 4), float("nan"), dtype=a.dtype)
    assert tiledmm.matmul(a, b, backend=backend, out=out) is out
    assert torch.equal(out, torch.matmul(a, b))


def test_ml_dtypes_bfloat16_arrays_give_float32_as_numpy(rng):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    a = (rng.random((6, 11)) * 2 - 1).astype(ml_dtypes.bfloat16)
    b = (rng.random((11, 4)) * 2 - 1).astype(ml_dtypes.bfloat16)
    got, want = tiledmm.matmul(a, b), a @ b
    assert got.dtype == want.dtype == np.float32
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 1e-6


# --------------------------------------------------------------------- GPUs (skipped here)


@pytest.fixture
def cuda(monkeypatch):
    """torch on a CUDA device with the CuPy backend; delegation to torch fails the test."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device for torch")
    pytest.importorskip("cupy")
    if backend_reason("cupy"):
        pytest.skip(f"cupy backend: {backend_reason('cupy')}")

    def refuse(*args, **kwargs):
        raise AssertionError("delegated to torch instead of running on the tensor cores")

    monkeypatch.setattr(arrays, "delegate", refuse)
    return torch.device("cuda", 0)


def _spy(monkeypatch):
    """The plans the CuPy backend's run gets."""
    be = tiledmm.get_backend("cupy")
    plans, real = [], type(be).run
    monkeypatch.setattr(type(be), "run", lambda self, p, *x: (plans.append(p), real(self, p, *x)))
    return plans


def _torch_error(a, b) -> float:
    return rel_error(torch.matmul(a, b), a, b)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend", ["cupy", "auto"])
@pytest.mark.parametrize("m, n, k", [(257, 129, 77), (1000, 3000, 777), (64, 64, 1024)])
def test_gpu_half_tensors_on_mma(rng, cuda, monkeypatch, dtype, backend, m, n, k):
    plans = _spy(monkeypatch)
    a, b = tensor(rng, (m, k), dtype, cuda), tensor(rng, (k, n), dtype, cuda)
    got = tiledmm.matmul(a, b, backend=backend)
    assert type(got) is torch.Tensor and got.dtype == a.dtype and got.device == a.device
    assert got.shape == (m, n) and plans and plans[-1].kernel == "mma"
    assert plans[-1].dtype == dtype
    err = rel_error(got, a, b)
    assert err < TOL[dtype] and err < 3 * _torch_error(a, b), err
    again = tiledmm.matmul(a, b, backend=backend, kernel="mma")  # a second call: same path
    assert rel_error(again, a, b) < TOL[dtype] and plans[-1].dtype == dtype


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_gpu_broadcast_batch_strides_and_vectors(rng, cuda, dtype):
    a = tensor(rng, (2, 1, 65, 66), dtype, cuda)[..., ::2]  # strided (65, 33) matrices
    b = tensor(rng, (3, 17, 33), dtype, cuda).transpose(-1, -2)  # transposed (33, 17)
    got = tiledmm.matmul(a, b)
    assert got.shape == (2, 3, 65, 17) and got.dtype == a.dtype
    assert rel_error(got, a, b) < TOL[dtype]
    v = tensor(rng, (33,), dtype, cuda)
    for x, y in ((v, b), (a, v), (v, v)):
        r = tiledmm.matmul(x, y)
        assert r.shape == torch.matmul(x, y).shape and rel_error(r, x, y) < TOL[dtype]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_gpu_out_poisoned_strided_and_aliased(rng, cuda, dtype):
    a, b = tensor(rng, (300, 200), dtype, cuda), tensor(rng, (200, 150), dtype, cuda)
    out = torch.full((300, 150), float("nan"), dtype=a.dtype, device=cuda)
    assert tiledmm.matmul(a, b, out=out) is out
    assert not torch.isnan(out).any() and rel_error(out, a, b) < TOL[dtype]
    big = torch.full((300, 160), float("nan"), dtype=a.dtype, device=cuda)
    view = big[:, 5:155]  # rows 320 bytes apart, a 10-byte offset: not 16-byte aligned
    assert tiledmm.matmul(a, b, out=view) is view
    assert rel_error(view, a, b) < TOL[dtype]
    assert torch.isnan(big[:, :5]).all() and torch.isnan(big[:, 155:]).all()
    sq = tensor(rng, (128, 128), dtype, cuda)
    x = sq.clone()
    want = torch.matmul(sq.double(), sq.double())
    assert tiledmm.matmul(x, sq, out=x) is x
    assert float(torch.linalg.norm(x.double() - want) / torch.linalg.norm(want)) < TOL[dtype]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_gpu_non_default_stream(rng, cuda, dtype):
    """Producer, tiledmm and consumer on one side stream, no host synchronization between:
    the launch is ordered after the producer and before the consumer."""
    s = torch.cuda.Stream(device=cuda)
    x = tensor(rng, (2048, 1024), dtype, cuda)
    y = tensor(rng, (1024, 512), dtype, cuda)
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        for _ in range(3):
            a = torch.matmul(torch.matmul(x, y), y.T) * 0.5  # (2048, 1024): queued work
        b = y * 1.5
        out = torch.full((2048, 512), float("nan"), dtype=a.dtype, device=cuda)
        got = tiledmm.matmul(a, b, out=out)
        r = got * 2  # the consumer, on s
    s.synchronize()
    assert got is out and not torch.isnan(r).any()
    assert rel_error(r / 2, a, b) < TOL[dtype]


@pytest.mark.gpu
def test_gpu_other_families_and_autograd(rng, cuda, monkeypatch):
    a, b = (tensor(rng, (64, 64), "bfloat16", cuda) for _ in range(2))
    with pytest.raises(ValueError, match="tensor cores only"):
        tiledmm.matmul(a, b, backend="cupy", kernel="register")
    monkeypatch.undo()  # delegation allowed again: autograd stays torch's
    g = a.clone().requires_grad_()
    r = tiledmm.matmul(g, b)
    assert r.grad_fn is not None and r.dtype == torch.bfloat16
