"""The fast path for torch tensors (tiledmm.interop.torchpath): what it takes, what it leaves to the
general bridge, and its CUDA launch logic.

CPU part (CI): torch CPU tensors take the fast path after one call on every CPU backend; the
operands it must not take (transposed, negated views, mixed kinds, autograd, ints, batched,
1-D) go to the bridge; a CUDA entry's stream logic and data flow against stand-ins (CuPy,
torch's allocator, a backend; host memory as the device). GPU part (marked ``gpu``): the fast
path on torch CUDA tensors is zero-copy (pointers checked) and falls back where it must. The
1,000-repetition side-stream test is ``tests/test_interop.py::test_gpu_torch_stream_ordering``
(run with the fast path on and off).
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import tiledmm
from tests.conftest import backend_reason, requires_backend
from tiledmm.core import engine
from tiledmm.interop import bridge as arrays
from tiledmm.interop import torchpath
from tiledmm.util.accuracy import matmul_error

CPU_BACKENDS = [
    pytest.param(n, marks=requires_backend(n)) for n in ("numpy", "opencl", "numba-cpu", "example")
]
TOL = {"float32": 1e-5, "float64": 1e-12}
_GPU_NAMES = [n for n in ("cupy", "numba-cuda") if not backend_reason(n)]


def rand(rng, shape, dtype="float32"):
    return rng.standard_normal(shape).astype(dtype)


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


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
    from tiledmm.core.dispatch import clear_caches

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
    allocs = iter(range(0x9000, 0x100000, 0x100))  # torch's allocator, for new_empty_strided

    def __init__(self, ptr, grad=False):
        self.ptr, self.requires_grad = ptr, grad

    def data_ptr(self):
        return self.ptr

    def new_empty_strided(self, shape, strides):
        assert strides == (shape[1], 1), (shape, strides)
        t = _FakeTensor(next(_FakeTensor.allocs))
        t.shape = shape
        return t


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

    torch = SimpleNamespace(
        _C=SimpleNamespace(_cuda_getCurrentRawStream=lambda i: stream[0]),
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
from tiledmm.interop import torchpath

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
    def new_empty_strided(self, shape, strides):
        return T(torch.full(shape, float("nan"), dtype=self.t.dtype).as_strided(shape, strides))
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
fake_torch = NS(is_grad_enabled=torch.is_grad_enabled,
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


class _FakeBound:
    """A backend's pre-bound launch (``bind``): records pointer launches, or refuses."""

    pointer = staticmethod(lambda p: ("ptr", p))

    def __init__(self, cp, ok=True):
        self.cp, self.ok = cp, ok

    def __call__(self, a, b, c, pa, pb, stream):
        assert (a, b) == (("ptr", pa), ("ptr", pb))
        if self.ok:  # (launched on ``stream``, whatever CuPy's current stream is)
            self.cp.log.append(("bound", stream.ptr, a[1], b[1], c[1], self.cp.stack[-1].ptr))
        return self.ok


@pytest.mark.parametrize("launch_stream", ["", "cupy"])
def test_cuda_entry_takes_the_bound_launch_where_it_applies(launch_stream):
    from types import SimpleNamespace

    cp, stream = _FakeCupy(), [0]
    go = _FakeBound(cp)
    _FakeBackend.bind = lambda self, plan: go
    try:
        e, be = _cuda_entry(cp, stream, launch_stream)
    finally:
        del _FakeBackend.bind
    a, b = _FakeTensor(0x1000), _FakeTensor(0x2000)
    r = e(a, b)  # one stream: raw pointers to the bound launch, no views, no run
    assert cp.log == [("bound", 0, 0x1000, 0x2000, r.ptr, 0)] and r.shape == (4, 2)
    assert cp.built == 0
    cp.log.clear()
    go.ok = False  # refused (e.g. misaligned operands the plan pads): the backend's run
    r = e(a, b)
    assert cp.log == [("run", 0, 0x1000, 0x2000, r.ptr)]
    cp.log.clear()
    go.ok = True
    out = _FakeTensor(0x5000)
    out.shape, out.dtype, out.device = (4, 2), "f32", SimpleNamespace(index=0)
    out.is_contiguous, out.is_neg = (lambda: True), (lambda: False)
    assert e(a, b, out) is out  # out= may overlap an operand: the backend's run checks
    assert cp.log == [("run", 0, 0x1000, 0x2000, 0x5000)]
    cp.log.clear()
    stream[0] = 0x77  # a torch side stream: launched there, CuPy's current one untouched
    r = e(a, b)
    assert cp.log == [("bound", 0x77, 0x1000, 0x2000, r.ptr, 0)] and len(cp.stack) == 1
    cp.log.clear()
    go.ok = False  # the backend's run: on the side stream made CuPy's current one
    r = e(a, b)
    if launch_stream == "cupy":
        assert cp.log == [("run", 0x77, 0x1000, 0x2000, r.ptr)]
    else:  # the backend may launch on the legacy stream: events, then the backend's run
        assert [x[0] for x in cp.log] == ["record", "wait", "run", "record", "wait"]
    assert len(cp.stack) == 1


# --------------------------------------------------------------------- GPUs (skipped here)


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
    seen, ptrs = [], []  # pointers the backend's run got (views), or the bound launch's
    real = e.be.run
    monkeypatch.setattr(e.be, "run", lambda p, x, y, o: (
        seen.append((_cai_ptr(x), _cai_ptr(y), _cai_ptr(o))), real(p, x, y, o)))  # fmt: skip
    if e.go is not None:  # (the CuPy backend's pre-bound launch: raw pointers)
        arg = e.ptr
        monkeypatch.setattr(e, "ptr", lambda p: (ptrs.append(p), arg(p))[1])
    a, b = (torch.from_numpy(rand(rng, s, dtype)).cuda() for s in (sa, sb))
    poison = torch.full((sa[0], sb[1]), float("nan"), dtype=a.dtype, device="cuda")
    del poison  # (the caching allocator likely hands this block to the result)
    got = tiledmm.matmul(a, b, backend=backend)
    assert bridge.calls == 1 and len(seen) + (len(ptrs) == 3) == 1, (seen, ptrs)
    vw = 16 // np.dtype(dtype).itemsize  # 16-byte rows (torch's blocks are aligned)
    if e.go is not None and not (sa[1] % vw or sb[1] % vw):
        assert ptrs, "the backend's bound launch was not taken"
    assert (seen[0] if seen else tuple(ptrs)) == (a.data_ptr(), b.data_ptr(), got.data_ptr())
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


def test_bound_is_optional_and_never_fails_a_call():
    from types import SimpleNamespace

    def broken(plan):
        raise RuntimeError("no device")

    go = object()
    assert engine.bound(SimpleNamespace(bind=lambda plan: go), "plan") is go
    assert engine.bound(SimpleNamespace(bind=broken), "plan") is None  # the backend's run
    assert engine.bound(SimpleNamespace(), "plan") is None  # no bind: the backend's run
