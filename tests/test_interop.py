"""Every array library in, the same kind out (tiledmm.arrays and tiledmm.matmul on foreign arrays).

CPU part (CI): a stand-in that exports only DLPack and the array API, PyTorch CPU tensors and
JAX CPU arrays (each skipped when not installed) through every CPU backend: same kind out,
values and dtypes as the library's own matmul, for 2-D, batched, 1-D and out=. GPU part
(marked ``gpu``): torch CUDA, Numba, CuPy and JAX GPU arrays through the CUDA backends,
zero-copy on the way in (pointer checks), and PyTorch stream ordering.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest

import tiledmm
from tests.conftest import backend_reason, requires_backend
from tiledmm import arrays, torchpath
from tiledmm.accuracy import matmul_error

CPU_BACKENDS = [
    pytest.param(n, marks=requires_backend(n)) for n in ("numpy", "opencl", "numba-cpu", "example")
]
SHAPES = [((7, 5), (5, 3)), ((2, 3, 4), (4, 5)), ((5,), (5, 3)), ((4, 5), (5,)), ((6,), (6,))]
TOL = {"float32": 1e-5, "float64": 1e-12}


def rand(rng, shape, dtype="float32"):
    return rng.standard_normal(shape).astype(dtype)


# --------------------------------------------------------------------- a DLPack-only stand-in


class StandIn:
    """An array that exports only DLPack and the array API (no __array__, shape or dtype)."""

    def __init__(self, data):
        self._d = np.asarray(data)

    def __dlpack__(self, **kw):
        return self._d.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self._d.__dlpack_device__()

    def __array_namespace__(self, api_version=None):
        return NS


class _Namespace:
    """The stand-in's namespace: ``from_dlpack`` and ``matmul`` (the delegate), counted."""

    def __init__(self):
        self.matmuls = 0

    def from_dlpack(self, x):
        return StandIn(np.from_dlpack(x))

    def matmul(self, a, b):
        self.matmuls += 1
        return StandIn(np.matmul(np.from_dlpack(a), np.from_dlpack(b)))


NS = _Namespace()


def test_native_operands_are_not_foreign():
    x = np.ones((2, 2))
    for a, b in [(x, x), ([[1.0]], x), (x, 2.0), (np.float32(1), x)]:
        assert arrays.foreign(a, b) is None
        assert arrays.foreign(a, b, out=x) is None
    assert not arrays.kind_of(x).foreign and arrays.kind_of(x).lib == "numpy"
    assert arrays.kind_of([1.0]).lib == "host"
    k = arrays.kind_of(StandIn(x))
    assert (k.lib, k.device, k.foreign) == ("dlpack", "cpu", True)
    assert arrays.kind_of(StandIn(x)) is k  # cached descriptors


def test_one_rule_for_mixed_kinds():
    s, x = StandIn(np.ones((2, 2))), np.ones((2, 2))
    assert arrays.result_kind(s, x).lib == "dlpack"  # the first operand's kind
    assert arrays.result_kind(x, s).lib == "numpy"
    assert arrays.result_kind([[1.0, 1.0]], s).lib == "dlpack"  # a list defers to the other
    assert arrays.result_kind(s, s, out=x).lib == "numpy"  # out= decides
    assert arrays.foreign(x, x, out=(s,)).lib == "dlpack"  # numpy's 1-tuple form of out=


def test_kind_of_imports_no_array_library():
    code = (
        "import sys, numpy as np; from tiledmm import arrays\n"
        "x = np.ones(3); arrays.kind_of(x); arrays.foreign(x, [1.0])\n"
        "libs = arrays.array_libraries()\n"
        "assert ('numpy', np.__version__) in libs, libs\n"
        "bad = [m for m in ('torch', 'jax', 'cupy', 'numba', 'pyopencl') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_array_libraries_lists_what_is_installed():
    libs = dict(arrays.array_libraries())
    assert libs["numpy"] == np.__version__
    for name in ("torch", "jax", "pyopencl"):
        assert (name in libs) == (importlib.util.find_spec(name) is not None)


def test_stand_in_enters_zero_copy(rng):
    a = rand(rng, (5, 7))
    assert arrays.to_native(StandIn(a)).ctypes.data == a.ctypes.data


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("sa, sb", SHAPES)
def test_stand_in_through_cpu_backends(rng, backend, sa, sb):
    a, b = rand(rng, sa), rand(rng, sb)
    got = tiledmm.matmul(StandIn(a), StandIn(b), backend=backend)
    assert type(got) is StandIn
    g = np.from_dlpack(got)
    assert g.shape == np.matmul(a, b).shape and g.dtype == np.float32
    assert matmul_error(g, a, b) < TOL["float32"]


def test_stand_in_out_is_written_through(rng):
    a, b = rand(rng, (6, 4), "float64"), rand(rng, (4, 3), "float64")
    buf = np.full((6, 3), np.nan)
    out = StandIn(buf)
    assert tiledmm.matmul(StandIn(a), StandIn(b), backend="numpy", out=out) is out
    assert matmul_error(buf, a, b) < TOL["float64"]


def test_stand_in_unrun_dtype_goes_to_its_namespace(rng):
    a, b = rng.integers(-9, 9, (4, 5)), rng.integers(-9, 9, (5, 3))
    before = NS.matmuls
    got = tiledmm.matmul(StandIn(a), StandIn(b), backend="numpy")
    assert NS.matmuls == before + 1 and type(got) is StandIn
    np.testing.assert_array_equal(np.from_dlpack(got), a @ b)


def test_bridge_directly_without_api_wiring(rng):
    """arrays.matmul_foreign with tiledmm.matmul as the native product (works before wiring)."""
    a, b = rand(rng, (2, 3, 4)), rand(rng, (4, 5))
    k = arrays.foreign(StandIn(a), b)
    got = arrays.matmul_foreign(k, StandIn(a), b, None, tiledmm.matmul, backend="numpy")
    assert type(got) is StandIn and matmul_error(np.from_dlpack(got), a, b) < TOL["float32"]


# --------------------------------------------------------------------- PyTorch on the CPU


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


def test_torch_kind_and_zero_copy_in(torch, rng):
    t = torch.from_numpy(rand(rng, (6, 9)))
    k = arrays.kind_of(t)
    assert (k.lib, k.device, k.foreign) == ("torch", "cpu", True)
    for x in (t, t.T, t[1:, ::2]):
        assert arrays.to_native(x).ctypes.data == x.data_ptr()
    r = arrays.from_native(np.ones((2, 2), np.float32), k)
    assert type(r) is torch.Tensor and r.dtype == torch.float32


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("sa, sb", SHAPES)
def test_torch_cpu_through_cpu_backends(torch, rng, backend, dtype, sa, sb):
    a, b = torch.from_numpy(rand(rng, sa, dtype)), torch.from_numpy(rand(rng, sb, dtype))
    got = tiledmm.matmul(a, b, backend=backend)
    want = torch.matmul(a, b)
    assert type(got) is torch.Tensor and got.device == want.device
    assert got.dtype == want.dtype and got.shape == want.shape
    assert matmul_error(got.numpy(), a.numpy(), b.numpy()) < TOL[dtype]


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_torch_out_is_written_through(torch, rng, backend):
    a, b = torch.from_numpy(rand(rng, (2, 7, 5))), torch.from_numpy(rand(rng, (5, 3)))
    out = torch.full((2, 7, 3), float("nan"))
    assert tiledmm.matmul(a, b, backend=backend, out=out) is out
    assert matmul_error(out.numpy(), a.numpy(), b.numpy()) < TOL["float32"]
    o64 = torch.full((2, 7, 3), float("nan"), dtype=torch.float64)  # NumPy's same_kind cast
    assert tiledmm.matmul(a, b, backend=backend, out=o64) is o64
    assert matmul_error(o64.numpy(), a.numpy(), b.numpy()) < TOL["float32"]


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "int64", "complex64"])
def test_torch_unrun_dtypes_are_torch_exactly(torch, rng, dtype):
    a = torch.from_numpy(rand(rng, (5, 8)) * 4).to(getattr(torch, dtype))
    b = torch.from_numpy(rand(rng, (8, 3)) * 4).to(getattr(torch, dtype))
    got = tiledmm.matmul(a, b, backend="numpy")
    want = torch.matmul(a, b)
    assert got.dtype == want.dtype and torch.equal(got, want)


def test_torch_autograd_is_kept(torch, rng, monkeypatch):
    a = torch.from_numpy(rand(rng, (4, 5))).requires_grad_()
    b = torch.from_numpy(rand(rng, (5, 3)))
    tiledmm.matmul(a, b).sum().backward()
    want = np.broadcast_to(b.numpy().sum(1), (4, 5))  # a float32 sum of 3: may cancel near 0
    np.testing.assert_allclose(a.grad.numpy(), want, rtol=1e-6, atol=1e-6)
    monkeypatch.setattr(arrays, "delegate", None)  # not delegated: calling it would fail
    with torch.no_grad():  # inference with parameters: tiledmm runs it
        got = tiledmm.matmul(a, b, backend="numpy")
    assert got.grad_fn is None and not got.requires_grad
    assert matmul_error(got.numpy(), a.detach().numpy(), b.numpy()) < TOL["float32"]


def test_torch_mixed_kinds_follow_the_first_operand(torch, rng):
    x, y = rand(rng, (3, 4)), rand(rng, (4, 2))
    assert type(tiledmm.matmul(torch.from_numpy(x), y)) is torch.Tensor
    assert type(tiledmm.matmul(x, torch.from_numpy(y))) is np.ndarray
    assert type(tiledmm.matmul(x.tolist(), torch.from_numpy(y))) is torch.Tensor
    out = np.full((3, 2), np.nan, np.float32)
    assert tiledmm.matmul(torch.from_numpy(x), torch.from_numpy(y), out=out) is out
    assert matmul_error(out, x, y) < TOL["float32"]


def test_torch_bridge_directly_without_api_wiring(torch, rng):
    a, b = torch.from_numpy(rand(rng, (3, 6, 4))), torch.from_numpy(rand(rng, (4, 5)))
    got = arrays.matmul_foreign(arrays.foreign(a, b), a, b, None, tiledmm.matmul, backend="numpy")
    assert type(got) is torch.Tensor and got.dtype == torch.float32
    assert matmul_error(got.numpy(), a.numpy(), b.numpy()) < TOL["float32"]


# --------------------------------------------------------------------- the torch fast path


class Bridge:
    """Counts the calls that reach the general bridge (``arrays.matmul_foreign``)."""

    def __init__(self, monkeypatch):
        self.calls, real = 0, arrays.matmul_foreign

        def counted(*args, **kwargs):
            self.calls += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(arrays, "matmul_foreign", counted)


@pytest.fixture
def bridge(monkeypatch):
    torchpath.enable(True)  # empty: each test learns its own keys
    yield Bridge(monkeypatch)
    torchpath.enable(True)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_torch_cpu_fast_path_after_one_call(torch, rng, bridge, backend, dtype):
    a, b = (torch.from_numpy(rand(rng, s, dtype)) for s in ((13, 7), (7, 5)))
    tiledmm.matmul(a, b, backend=backend)
    assert bridge.calls == 1
    assert isinstance(torchpath.entry(a, b, backend, "auto"), torchpath.HostEntry)
    for _ in range(3):  # fresh tensors of the same key: no bridge, right values
        a, b = (torch.from_numpy(rand(rng, s, dtype)) for s in ((13, 7), (7, 5)))
        got = tiledmm.matmul(a, b, backend=backend)
        assert type(got) is torch.Tensor and got.dtype == a.dtype and got.shape == (13, 5)
        assert matmul_error(got.numpy(), a.numpy(), b.numpy()) < TOL[dtype]
    assert bridge.calls == 1


def test_torch_fast_path_falls_back_for_what_it_does_not_handle(torch, rng, bridge):
    """A learnt square key, then operands with that key that the fast path must not take."""
    x, y = (torch.from_numpy(rand(rng, (9, 9))) for _ in range(2))
    tiledmm.matmul(x, y)
    calls = bridge.calls
    cases = {
        "transposed": (x.T, y),  # same shape, dtype and device: not contiguous
        "negative bit": (torch.complex(x, y).conj().imag, y),  # a lazily negated view
        "mixed torch/numpy": (x, y.numpy()),
    }
    for name, (a, b) in cases.items():
        got = tiledmm.matmul(a, b)
        want = torch.matmul(a.resolve_neg(), torch.as_tensor(b))
        assert type(got) is torch.Tensor, name
        assert torch.allclose(got, want, rtol=1e-5, atol=1e-5), name
        assert bridge.calls == calls + 1, name
        calls += 1
    g = x.clone().requires_grad_()  # autograd under grad mode: torch.matmul, graph kept
    got = tiledmm.matmul(g, y)
    assert got.grad_fn is not None and bridge.calls == calls + 1
    got.sum().backward()
    assert torch.allclose(g.grad, y.sum(1).expand(9, 9), rtol=1e-5, atol=1e-5)
    one = [torch.from_numpy(rand(rng, (1, 1))) for _ in range(3)]
    tiledmm.matmul(one[0], one[1])  # learnt; then a 1x1 negated view, contiguous, same key
    neg = torch.complex(one[0], one[2]).conj().imag
    assert neg.is_neg() and neg.is_contiguous()
    got = tiledmm.matmul(neg, one[1])
    assert torch.allclose(got, -one[2] @ one[1]) and bridge.calls == calls + 3
    ints = [torch.from_numpy(rng.integers(-9, 9, (9, 9))) for _ in range(2)]
    for _ in range(2):  # int64: learnt as not handled, torch's result exactly both times
        assert torch.equal(tiledmm.matmul(*ints), torch.matmul(*ints))
    assert isinstance(torchpath.entry(*ints, "auto", "auto"), torchpath.Skip)


def test_torch_fast_path_learnt_from_any_first_call(torch, rng, bridge):
    """A key first seen with operands the fast path would not take (autograd, a negated view)
    is still learnt: the next plain call with that key takes the fast path."""
    x, y = (torch.from_numpy(rand(rng, (5, 5))) for _ in range(2))
    firsts = [
        (x.clone().requires_grad_(), y),
        (torch.complex(x, y).conj().imag, y),  # a negated, strided view
    ]
    for i, (a, b) in enumerate(firsts):
        torchpath.enable(True)
        want = torch.matmul(a.detach().resolve_neg(), b)
        assert torch.allclose(tiledmm.matmul(a, b), want, rtol=1e-5, atol=1e-5), i
        calls = bridge.calls
        got = tiledmm.matmul(x, y)
        assert bridge.calls == calls, i  # the fast path
        assert torch.allclose(got, x @ y, rtol=1e-5, atol=1e-5), i


@pytest.mark.parametrize("sa, sb", [((2, 3, 4), (4, 5)), ((5,), (5, 3)), ((4, 5), (5,))])
def test_torch_batched_and_1d_stay_on_the_general_path(torch, rng, bridge, sa, sb):
    a, b = torch.from_numpy(rand(rng, sa)), torch.from_numpy(rand(rng, sb))
    for i in range(2):
        got = tiledmm.matmul(a, b, backend="numpy")
        assert got.shape == torch.matmul(a, b).shape and bridge.calls == i + 1
        assert matmul_error(got.numpy(), a.numpy(), b.numpy()) < TOL["float32"]


def test_torch_fast_path_expires_with_the_caches(torch, rng, bridge):
    from tiledmm.dispatch import clear_caches

    a, b = torch.from_numpy(rand(rng, (6, 4))), torch.from_numpy(rand(rng, (4, 3)))
    tiledmm.matmul(a, b, backend="numpy")
    tiledmm.matmul(a, b, backend="numpy")
    assert bridge.calls == 1
    clear_caches()  # (what `tiledmm tune` does after saving tiles)
    assert torchpath.entry(a, b, "numpy", "auto") is None
    got = tiledmm.matmul(a, b, backend="numpy")
    assert bridge.calls == 2 and torchpath.entry(a, b, "numpy", "auto") is not None
    assert matmul_error(got.numpy(), a.numpy(), b.numpy()) < TOL["float32"]
    torchpath.enable(False)  # off: every call takes the bridge, and nothing is learnt
    tiledmm.matmul(a, b, backend="numpy")
    tiledmm.matmul(a, b, backend="numpy")
    assert bridge.calls == 4 and torchpath.entries() == 0


# A CUDA entry's stream logic without a GPU: stand-ins for CuPy, torch and a backend that
# record what runs where.


class _Log(list):
    pass


class _FakeStream:
    def __init__(self, cp, ptr):
        self.cp, self.ptr = cp, ptr

    def __enter__(self):
        self.cp.stack.append(self)

    def __exit__(self, *exc):
        self.cp.stack.pop()

    def wait_event(self, ev):
        self.cp.log.append(("wait", self.ptr, ev.name))


class _FakeEvent:
    count = 0

    def __init__(self, cp):
        _FakeEvent.count += 1
        self.cp, self.name = cp, f"ev{_FakeEvent.count}"

    def record(self, stream):
        self.cp.log.append(("record", self.name, stream.ptr))


class _FakeCupy:
    """Just what a CudaEntry touches: views, Stream.from_external, the current stream, events."""

    def __init__(self, current=0):
        from types import SimpleNamespace

        self.log, self.stack, self.built = _Log(), [_FakeStream(self, current)], 0
        self.cuda = SimpleNamespace(
            UnownedMemory=lambda ptr, size, owner, dev: SimpleNamespace(ptr=ptr, dev=dev),
            MemoryPointer=lambda mem, off: SimpleNamespace(ptr=mem.ptr + off, dev=mem.dev),
            Stream=SimpleNamespace(
                from_external=lambda obj: _FakeStream(self, obj.__cuda_stream__()[1])
            ),
            get_current_stream=lambda: self.stack[-1],
            Event=lambda disable_timing: _FakeEvent(self),
        )

    def ndarray(self, shape, dt, memptr):
        from types import SimpleNamespace

        self.built += 1
        return SimpleNamespace(shape=shape, dtype=dt, data=memptr)


class _FakeTensor:
    def __init__(self, ptr, grad=False):
        self.ptr, self.requires_grad = ptr, grad

    def data_ptr(self):
        return self.ptr


class _FakeBackend:
    def __init__(self, cp, launch_stream=""):
        self.cp, self.dkey = cp, 0
        if launch_stream:
            self.launch_stream = launch_stream

    def device_key(self):
        return self.dkey

    def run(self, plan, a, b, out):
        self.cp.log.append(("run", self.cp.stack[-1].ptr, a.data.ptr, b.data.ptr, out.data.ptr))


def _cuda_entry(cp, stream, launch_stream="", grad=False):
    from types import SimpleNamespace

    allocs = iter(range(0x9000, 0x10000, 0x100))
    torch = SimpleNamespace(
        _C=SimpleNamespace(_cuda_getCurrentRawStream=lambda i: stream[0]),
        empty=lambda shape, dtype, device: _FakeTensor(next(allocs)),
        is_grad_enabled=lambda: grad,
    )
    be = _FakeBackend(cp, launch_stream)
    dev = SimpleNamespace(index=0)
    dt = np.dtype(np.float32)
    shapes = (((4, 3), 48), ((3, 2), 24), ((4, 2), 32))
    return torchpath.CudaEntry(cp, torch, be, None, None, "f32", dev, dt, shapes), be


def test_cuda_entry_end_to_end_with_host_memory_as_the_device(torch):
    """cuda_entry and CudaEntry with the real dispatch and planner: "CUDA tensors" are CPU
    tensors that say they are on cuda:0, CuPy views are NumPy arrays over the same pointers,
    and a registered backend computes with NumPy (a subprocess: the registry stays clean)."""
    code = """
import ctypes, numpy as np, torch, tiledmm
from types import SimpleNamespace as NS
from tiledmm import torchpath

class FakeCuda(tiledmm.Backend):
    name, kernels = "fakecuda", ("naive",)
    def accepts(self, x): return isinstance(x, np.ndarray)
    def device_key(self): return 0
    def run(self, plan, a, b, out):
        self.seen = (a.ctypes.data, b.ctypes.data, out.ctypes.data)
        np.matmul(a, b, out=out)

tiledmm.register_backend(FakeCuda())

class T:  # a "CUDA tensor": a CPU tensor that says it is on cuda:0
    def __init__(self, t): self.t = t
    shape = property(lambda s: s.t.shape)
    dtype = property(lambda s: s.t.dtype)
    device = torch.device("cuda", 0)
    requires_grad = False
    def data_ptr(self): return self.t.data_ptr()
    def get_device(self): return 0
    def is_contiguous(self): return self.t.is_contiguous()
    def is_neg(self): return False

def ndarray(shape, dt, memptr):
    buf = (ctypes.c_char * memptr.size).from_address(memptr.ptr)
    return np.ndarray(shape, dt, buffer=buf)

cp = NS(ndarray=ndarray, cuda=NS(
    UnownedMemory=lambda ptr, size, owner, dev: NS(ptr=ptr, size=size),
    MemoryPointer=lambda mem, off: NS(ptr=mem.ptr + off, size=mem.size - off),
    get_current_stream=lambda: NS(ptr=0)))
torchpath.optional_module = lambda name: cp if name == "cupy" else None
fake_torch = NS(empty=lambda shape, dtype, device: T(torch.full(shape, float("nan"), dtype=dtype)),
                is_grad_enabled=torch.is_grad_enabled,
                _C=NS(_cuda_getCurrentRawStream=lambda i: 0))
rng = np.random.default_rng()
for dt, (m, k, n) in (("float32", (13, 7, 5)), ("float64", (4, 9, 6))):
    a, b = (T(torch.from_numpy(rng.standard_normal(s).astype(dt))) for s in ((m, k), (k, n)))
    e = torchpath.cuda_entry(fake_torch, a, b, np.dtype(dt), "fakecuda", "auto")
    assert isinstance(e, torchpath.CudaEntry) and e.be.name == "fakecuda", e
    assert (e.plan.m, e.plan.n, e.plan.k, e.plan.dtype) == (m, n, k, dt)
    for _ in range(2):
        r = e(a, b)
        assert isinstance(r, T) and r.t.dtype == a.t.dtype and tuple(r.shape) == (m, n)
        assert e.be.seen == (a.data_ptr(), b.data_ptr(), r.data_ptr())
        want = a.t.numpy().astype(float) @ b.t.numpy()
        assert np.abs(r.t.numpy() - want).max() < 1e-5 * np.abs(want).max()
    out = T(torch.full((m, n), float("nan"), dtype=a.t.dtype))
    assert e(a, b, out) is out and e.be.seen[2] == out.data_ptr()
    assert np.abs(out.t.numpy() - want).max() < 1e-5 * np.abs(want).max()
    assert torchpath.cuda_entry(fake_torch, a, b, np.dtype(dt), "numpy", "auto") is None
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.parametrize("launch_stream", ["", "cupy"])
def test_cuda_entry_launches_on_the_torch_stream(launch_stream):
    cp, stream = _FakeCupy(), [0]
    e, be = _cuda_entry(cp, stream, launch_stream)
    a, b = _FakeTensor(0x1000), _FakeTensor(0x2000)
    r = e(a, b)  # torch and CuPy both on the legacy default stream: a plain launch
    assert cp.log == [("run", 0, 0x1000, 0x2000, r.ptr)] and len(cp.stack) == 1
    cp.log.clear()
    stream[0] = 0x77  # a torch side stream
    r = e(a, b)
    if launch_stream == "cupy":  # the backend launches on CuPy's current stream: made 0x77
        assert cp.log == [("run", 0x77, 0x1000, 0x2000, r.ptr)]
    else:  # it may launch on the legacy stream: events both ways around the launch
        (_, ev1, s1), (_, w1, e1), run, (_, ev2, s2), (_, w2, e2) = cp.log
        assert (s1, w1, e1) == (0x77, 0, ev1) and run == ("run", 0x77, 0x1000, 0x2000, r.ptr)
        assert (s2, w2, e2) == (0, 0x77, ev2) and ev1 != ev2
    assert len(cp.stack) == 1  # CuPy's current stream restored
    cp.log.clear()
    stream[0] = 0
    cp.stack[0] = _FakeStream(cp, 0x55)  # CuPy's current stream is another one than torch's
    r = e(a, b)
    assert cp.log == [("run", 0, 0x1000, 0x2000, r.ptr)] and cp.stack[-1].ptr == 0x55


def test_cuda_entry_writes_a_fitting_out():
    from types import SimpleNamespace

    cp = _FakeCupy()
    e, be = _cuda_entry(cp, [0])  # its result: (4, 2) "f32" on device index 0
    a, b = _FakeTensor(0x1000), _FakeTensor(0x2000)

    def tensor(ptr, shape=(4, 2), dtype="f32", index=0, contiguous=True, grad=False):
        t = _FakeTensor(ptr, grad)
        t.shape, t.dtype, t.device = shape, dtype, SimpleNamespace(index=index)
        t.is_contiguous, t.is_neg = (lambda: contiguous), (lambda: False)
        return t

    out = tensor(0x5000)
    assert e(a, b, out) is out and cp.log == [("run", 0, 0x1000, 0x2000, 0x5000)]
    bad = [{"shape": (2, 4)}, {"dtype": "f64"}, {"index": 1}, {"contiguous": False}]
    for kw in bad:  # not the result's layout: the general path decides
        assert e(a, b, tensor(0x6000, **kw)) is None, kw
    assert len(cp.log) == 1


def test_cuda_entry_views_are_cached_per_pointer_and_checks_hold():
    cp, stream = _FakeCupy(), [0]
    e, be = _cuda_entry(cp, stream)
    a, b = _FakeTensor(0x1000), _FakeTensor(0x2000)
    e(a, b)
    built = cp.built
    assert built == 3  # a, b and the output
    e(a, b)
    assert cp.built <= built + 1  # inputs cached (the output: a new pointer here)
    for i in range(3 * torchpath.VIEWS_PER_ROLE):  # many pointers: the cache stays bounded
        e(_FakeTensor(0x100000 + 0x1000 * i), b)
    assert all(len(d) <= torchpath.VIEWS_PER_ROLE for d in e.views)
    be.dkey = 1  # another current device: not this entry's
    assert e(a, b) is None
    be.dkey = 0
    g, stream = _cuda_entry(cp, stream, grad=True)[0], [0]
    assert g(_FakeTensor(0x1000, grad=True), b) is None  # autograd: the general path
    assert g(a, b) is not None  # grad mode on, but nothing requires grad


# --------------------------------------------------------------------- JAX on the CPU


@pytest.fixture(scope="module")
def jnp():
    return pytest.importorskip("jax.numpy")


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("sa, sb", SHAPES)
def test_jax_cpu_through_cpu_backends(jnp, rng, backend, sa, sb):
    a, b = rand(rng, sa), rand(rng, sb)
    got = tiledmm.matmul(jnp.asarray(a), jnp.asarray(b), backend=backend)
    want = jnp.matmul(jnp.asarray(a), jnp.asarray(b))
    assert type(got) is type(want) and got.dtype == want.dtype and got.shape == want.shape
    assert matmul_error(np.asarray(got), a, b) < TOL["float32"]


def test_jax_unrun_dtype_traced_code_and_out(jnp, rng):
    import jax

    a, b = jnp.asarray(rand(rng, (5, 8))), jnp.asarray(rand(rng, (8, 3)))
    ha, hb = a.astype(jnp.bfloat16), b.astype(jnp.bfloat16)
    got = tiledmm.matmul(ha, hb)
    assert got.dtype == jnp.bfloat16 and bool((got == jnp.matmul(ha, hb)).all())
    traced = jax.jit(lambda x, y: tiledmm.matmul(x, y))(a, b)  # tracers go to jnp.matmul
    assert bool((traced == jax.jit(jnp.matmul)(a, b)).all())
    with pytest.raises(TypeError, match="JAX"):
        tiledmm.matmul(a, b, out=jnp.zeros((5, 3), jnp.float32))


# --------------------------------------------------------------------- Numba (CUDA simulator)


@requires_backend("numpy")
def test_numba_in_numba_out_under_the_simulator():
    """Numba device arrays give Numba device arrays on every backend; a backend that cannot
    read CUDA memory (numpy, opencl) gets host copies and says so. One subprocess: the
    simulator is chosen when numba is first imported."""
    pytest.importorskip("numba")
    code = """
import warnings, numpy as np, tiledmm
from numba import cuda
rng = np.random.default_rng()
a, b = rng.standard_normal((5, 4)), rng.standard_normal((4, 3))
da, db = cuda.to_device(a), cuda.to_device(b)
for be in ("numba-cuda", "numpy"):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        r = tiledmm.matmul(da, db, backend=be, kernel="naive")
        o = cuda.to_device(np.full((5, 3), np.nan))
        assert tiledmm.matmul(da, db, backend=be, kernel="naive", out=o) is o
    assert type(r) is type(da), (be, type(r))
    assert np.abs(r.copy_to_host() - a @ b).max() < 1e-12
    assert np.abs(o.copy_to_host() - a @ b).max() < 1e-12
    assert (be == "numpy") == any("through the host" in str(x.message) for x in w), be
"""
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]


# --------------------------------------------------------------------- GPUs (skipped here)


def _cuda_backends():
    return [pytest.param(n, marks=requires_backend(n)) for n in ("cupy", "numba-cuda", "opencl")]


@pytest.fixture(scope="module")
def torch_cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device for torch")
    return torch


def _opencl_on_cpu(backend):
    return backend == "opencl" and not tiledmm.get_backend("opencl").device().is_gpu


@pytest.mark.gpu
@pytest.mark.parametrize("backend", _cuda_backends())
@pytest.mark.parametrize("sa, sb", SHAPES)
def test_gpu_torch_cuda_same_kind_out(torch_cuda, rng, backend, sa, sb):
    torch = torch_cuda
    if _opencl_on_cpu(backend):
        pytest.skip("OpenCL runs on a CPU device here")
    a = torch.from_numpy(rand(rng, sa)).cuda()
    b = torch.from_numpy(rand(rng, sb)).cuda()
    assert arrays.to_native(a).data.ptr == a.data_ptr()  # zero-copy on the way in
    got = tiledmm.matmul(a, b, backend=backend)
    assert type(got) is torch.Tensor and got.device == a.device and got.dtype == a.dtype
    assert matmul_error(got.cpu().numpy(), a.cpu().numpy(), b.cpu().numpy()) < TOL["float32"]
    out = torch.full(torch.matmul(a, b).shape, float("nan"), device="cuda")
    assert tiledmm.matmul(a, b, backend=backend, out=out) is out
    assert matmul_error(out.cpu().numpy(), a.cpu().numpy(), b.cpu().numpy()) < TOL["float32"]


@pytest.mark.gpu
@pytest.mark.parametrize("backend", _cuda_backends())
@pytest.mark.parametrize("lib", ["cupy", "numba"])
def test_gpu_cupy_and_numba_in_same_kind_out(rng, backend, lib):
    if backend_reason("cupy") or _opencl_on_cpu(backend):
        pytest.skip("needs CuPy on a GPU and a GPU device for the backend")
    import cupy
    from numba import cuda

    a, b = rand(rng, (65, 33)), rand(rng, (33, 17))
    to_dev = cupy.asarray if lib == "cupy" else cuda.to_device
    da, db = to_dev(a), to_dev(b)
    got = tiledmm.matmul(da, db, backend=backend)
    assert type(got) is type(da)
    host = got.get() if lib == "cupy" else got.copy_to_host()
    assert matmul_error(host, a, b) < TOL["float32"]


@pytest.mark.gpu
def test_gpu_jax_same_kind_out(rng):
    jax = pytest.importorskip("jax")
    if backend_reason("cupy") or not any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("needs JAX on a GPU and CuPy")
    import cupy

    a, b = rand(rng, (65, 33)), rand(rng, (33, 17))
    ja, jb = jax.device_put(a), jax.device_put(b)
    assert arrays.to_native(ja).data.ptr == ja.unsafe_buffer_pointer()
    got = tiledmm.matmul(ja, jb, backend="cupy")
    assert type(got) is type(ja) and got.dtype == ja.dtype
    assert matmul_error(np.asarray(got), a, b) < TOL["float32"]
    assert cupy is not None


_GPU_NAMES = [n for n in ("cupy", "numba-cuda") if not backend_reason(n)]


@pytest.mark.gpu
@pytest.mark.parametrize("fast", [True, False], ids=["fast-path", "general-path"])
@pytest.mark.parametrize("backend", _GPU_NAMES)
def test_gpu_torch_stream_ordering(torch_cuda, rng, bridge, backend, fast):
    """Producer on a non-default torch stream, then tiledmm.matmul, then a torch consumer:
    right on every one of 1,000 repetitions (a delay before each producer widens any race).
    With the fast path on, only the first call goes through the general bridge."""
    torch = torch_cuda
    torchpath.enable(fast)
    n = 256
    base = torch.from_numpy(rand(rng, (n, n))).cuda()
    b = torch.from_numpy(rand(rng, (n, n))).cuda()
    want = (base @ b).sum(1)
    a = torch.empty_like(base)
    sums = torch.empty((1000, n), device="cuda")
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        for i in range(1000):
            torch.cuda._sleep(20_000)
            a.copy_(base * (i % 7 + 1))  # producer
            c = tiledmm.matmul(a, b, backend=backend)
            sums[i] = c.sum(1) / (i % 7 + 1)  # consumer
            a.fill_(float("nan"))  # the next producer's overwrite comes after the consumer
    s.synchronize()
    assert bridge.calls == (1 if fast else 1000)
    err = (sums - want).abs().max(1).values / want.abs().max()
    assert int((err > 1e-4).sum()) == 0, f"{int((err > 1e-4).sum())} of 1000 repetitions wrong"


def _cai_ptr(x):
    return x.__cuda_array_interface__["data"][0]


@pytest.mark.gpu
@pytest.mark.parametrize("backend", [*_GPU_NAMES, "cuda", "auto"])
@pytest.mark.parametrize("dtype, sa, sb", [("float32", (65, 33), (33, 17)),
                                           ("float64", (64, 64), (64, 64))])  # fmt: skip
def test_gpu_torch_fast_path_is_zero_copy(torch_cuda, rng, bridge, monkeypatch, backend, dtype,
                                          sa, sb):  # fmt: skip
    """The second call takes the fast path: the backend reads the tensors' own memory and
    writes the result tensor's (pointers checked), which is torch on the operands' device."""
    torch = torch_cuda
    if backend == "auto" and backend_reason("cupy") and backend_reason("numba-cuda"):
        pytest.skip("no CUDA backend")
    a, b = (torch.from_numpy(rand(rng, s, dtype)).cuda() for s in (sa, sb))
    tiledmm.matmul(a, b, backend=backend)
    e = torchpath.entry(a, b, backend, "auto")
    assert isinstance(e, torchpath.CudaEntry)
    seen = []
    real = e.be.run
    monkeypatch.setattr(e.be, "run", lambda p, x, y, o: (seen.append((x, y, o)), real(p, x, y, o)))
    a, b = (torch.from_numpy(rand(rng, s, dtype)).cuda() for s in (sa, sb))
    poison = torch.full((sa[0], sb[1]), float("nan"), dtype=a.dtype, device="cuda")
    del poison  # (the caching allocator likely hands this block to the result)
    got = tiledmm.matmul(a, b, backend=backend)
    assert bridge.calls == 1 and len(seen) == 1
    x, y, o = seen[0]
    assert (_cai_ptr(x), _cai_ptr(y), _cai_ptr(o)) == (a.data_ptr(), b.data_ptr(), got.data_ptr())
    assert type(got) is torch.Tensor and got.device == a.device and got.dtype == a.dtype
    assert got.shape == (sa[0], sb[1])
    err = matmul_error(got.cpu().numpy(), a.cpu().numpy(), b.cpu().numpy())
    assert err < TOL[dtype]


@pytest.mark.gpu
@pytest.mark.parametrize("backend", _GPU_NAMES)
def test_gpu_torch_fast_path_falls_back(torch_cuda, rng, bridge, backend):
    """Operands with a learnt key that the fast path must leave to the general path."""
    torch = torch_cuda
    import cupy

    x, y = (torch.from_numpy(rand(rng, (33, 33))).cuda() for _ in range(2))
    tiledmm.matmul(x, y, backend=backend)
    calls = bridge.calls

    def check(a, b, name, out=None):
        nonlocal calls
        got = tiledmm.matmul(a, b, backend=backend, out=out)
        assert bridge.calls == calls + 1, name
        calls += 1
        return got

    strided = torch.from_numpy(rand(rng, (33, 66))).cuda()[:, ::2]  # (33, 33), not contiguous
    for name, (a, b) in {"transposed": (x.T, y), "strided": (strided, y)}.items():
        got = check(a, b, name)
        assert type(got) is torch.Tensor and got.device == x.device, name
        assert torch.allclose(got, a @ b, rtol=1e-4, atol=1e-4), name
    g = x.clone().requires_grad_()
    got = check(g, y, "requires_grad")
    assert got.grad_fn is not None  # torch.matmul: the graph is kept
    with torch.no_grad():  # inference: tiledmm runs it (the fast path, once learnt)
        r = tiledmm.matmul(g, y, backend=backend)
        assert r.grad_fn is None and torch.allclose(r, x @ y, rtol=1e-4, atol=1e-4)
    cy = cupy.asarray(y)
    got = check(x, cy, "torch @ cupy")
    assert type(got) is torch.Tensor and torch.allclose(got, x @ y, rtol=1e-4, atol=1e-4)
    got = tiledmm.matmul(cupy.asarray(x), y, backend=backend)  # CuPy first: a CuPy result
    assert type(got) is cupy.ndarray
    ints = [torch.from_numpy(rng.integers(-9, 9, (33, 33))).cuda() for _ in range(2)]
    try:
        want = torch.matmul(*ints)
    except RuntimeError as exc:  # (no integer GEMM on CUDA in some torch builds)
        want = exc
    for _ in range(2):  # delegated to torch both times: its result, or its error
        if isinstance(want, RuntimeError):
            with pytest.raises(RuntimeError):
                tiledmm.matmul(*ints, backend=backend)
        else:
            assert torch.equal(tiledmm.matmul(*ints, backend=backend), want)
    calls = bridge.calls
    out = torch.full((33, 33), float("nan"), device="cuda")
    assert tiledmm.matmul(x, y, backend=backend, out=out) is out  # the fast path writes out=
    assert bridge.calls == calls and torch.allclose(out, x @ y, rtol=1e-4, atol=1e-4)
    o64 = torch.full((33, 33), float("nan"), device="cuda", dtype=torch.float64)
    for o in (out.T, o64):  # not the result's layout or dtype: the general path's rules
        o.fill_(float("nan"))
        assert check(x, y, "out=", out=o) is o
        assert torch.allclose(o.float(), x @ y, rtol=1e-4, atol=1e-4)
