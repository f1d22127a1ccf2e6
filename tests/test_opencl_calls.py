"""OpenCL as users call it (issue 37, item 4): ``pyopencl.array.Array`` operands of the
caller's own context and queue, no ``out=``. The product runs on the caller's queue and comes
back as a queued array holding the call's event; kernels are built once per context with their
scalar argument types declared; results and temporaries come from the queue's buffer pool;
nothing waits on the host inside a call; vectors take the gemv path. Small shapes: these run
on PoCL's CPU device in CI (2 cores)."""

from __future__ import annotations

import numpy as np
import pytest

import tiledmm
from tests.conftest import requires_backend
from tiledmm.util.accuracy import matmul_error

pytestmark = requires_backend("opencl")

#: odd, non-divisible products: the gemv path both ways (one pass with counters, and rows),
#: register tiles with padded copies of odd leading dimensions, split-K
SHAPES = [(1, 77, 133), (61, 1, 45), (37, 29, 53), (8, 100, 257), (5, 33, 600)]


@pytest.fixture
def user():
    """The backend, and a context and in-order queue of the caller's own on its device
    (fresh per test: programs are built for it here)."""
    cl = pytest.importorskip("pyopencl")
    be = tiledmm.get_backend("opencl")
    return be, cl.CommandQueue(cl.Context([be.state().dev]))


def operands(q, m, n, k, rng, dtype=np.float32):
    import pyopencl.array as cla

    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    return a, b, cla.to_device(q, a), cla.to_device(q, b)


def test_result_is_queued_on_the_callers_queue(user, rng):
    """The result lives on the operands' queue and context and holds the call's event; the
    call is ordered after the caller's pending work on that queue."""
    be, q = user
    for m, n, k in SHAPES:
        a, b, A, B = operands(q, m, n, k, rng)
        A.fill(np.float32(0.5))  # queued on q, not waited for: the product must see it
        r = tiledmm.matmul(A, B)
        assert r.queue is q and r.context == q.context, (m, n, k)
        assert r.events, "the call's last event is the result's pending event"
        r.finish()
        assert not r.events
        assert matmul_error(r.get(), np.full_like(a, 0.5), b) < 1e-5, (m, n, k)


def test_no_host_wait_inside_a_call(user, rng, monkeypatch):
    """No finish, wait or blocking copy inside calls on pyopencl arrays (the first ones,
    which build kernels, included)."""
    import pyopencl as cl
    import pyopencl.array as cla

    be, q = user
    ops = [operands(q, m, n, k, rng) for m, n, k in SHAPES]
    a, bt, A, Bt = operands(q, 37, 23, 29, rng)  # A a view with a pitch, B a transposed one
    ops.append((a[:, :23], bt.T, A[:, :23], Bt.transpose()))  # (contiguous copies in the call)
    q.finish()
    waits = []
    for owner, name in ((cl.CommandQueue, "finish"), (cl, "wait_for_events"),
                        (cl.Event, "wait"), (cla.Array, "get"), (cla.Array, "set"),
                        (cla.Array, "finish")):  # fmt: skip
        real = getattr(owner, name)
        monkeypatch.setattr(owner, name, lambda *a, _n=name, _r=real, **kw: (waits.append(_n),
                                                                            _r(*a, **kw))[1])
    results = [tiledmm.matmul(A, B) for _ in range(3) for _, _, A, B in ops]
    assert waits == []
    monkeypatch.undo()
    for (a, b, _, _), r in zip(ops * 3, results, strict=True):
        assert matmul_error(r.get(), a, b) < 1e-5


def test_kernels_built_once_per_context_with_typed_arguments(user, rng, monkeypatch):
    """Programs are built on a context's first call of a source only; a launch through
    pyopencl's kernel call has its scalar argument types declared (its generic per-argument
    path cost 15-20 us a scalar, a GEMM has about 20), and the hot path's pre-bound launches
    set no scalar per call (only the buffers)."""
    import pyopencl as cl

    be, q = user
    builds, declared, called, scalars = [], set(), [], []
    real_build, real_declare = cl.Program.build, cl.Kernel.set_scalar_arg_dtypes
    real_call, real_set = cl.Kernel.__call__, cl.Kernel.set_arg

    def declare(self, types):
        declared.add(id(self))
        return real_declare(self, types)

    def call(self, *a, **kw):
        called.append(id(self))
        return real_call(self, *a, **kw)

    def set_arg(self, i, v):
        scalars.append(isinstance(v, np.generic | int | float))
        return real_set(self, i, v)

    monkeypatch.setattr(cl.Program, "build",
                        lambda self, *a, **kw: (builds.append(1), real_build(self, *a, **kw))[1])
    monkeypatch.setattr(cl.Kernel, "set_scalar_arg_dtypes", declare)
    monkeypatch.setattr(cl.Kernel, "__call__", call)
    monkeypatch.setattr(cl.Kernel, "set_arg", set_arg)
    ops = [operands(q, m, n, k, rng) for m, n, k in SHAPES]
    plans = [tiledmm.plan(*A.shape, B.shape[1], backend="opencl") for _, _, A, B in ops]

    def both(A, B, plan):  # the hot path (pre-bound), and run (what a first call takes)
        r = tiledmm.matmul(A, B)
        out = be.empty(r.shape, r.dtype, like=A)
        be.run(plan, A, B, out)
        return r, out

    for _ in range(2):  # first calls: build, bind
        for (_, _, A, B), plan in zip(ops, plans, strict=True):
            both(A, B, plan)
    first = len(builds)
    assert first > 0 and called  # a fresh context: its own programs
    assert set(called) <= declared
    called.clear()
    del scalars[:]
    for _ in range(3):
        for (a, b, A, B), plan in zip(ops, plans, strict=True):
            for r in both(A, B, plan):
                assert matmul_error(r.get(), a, b) < 1e-5
    assert len(builds) == first
    assert called and set(called) <= declared
    assert scalars and not any(scalars)  # buffers only


def test_results_and_scratch_come_from_the_queue_pool(user, rng, monkeypatch):
    """Repeated calls take their results and workspaces from the queue's pool without growing
    it, never through ``cla.empty``'s checks; a result the caller holds is never handed out
    again."""
    import pyopencl.array as cla

    be, q = user
    a, b, A, B = operands(q, 5, 33, 600, rng)  # split-K: a workspace per call too
    tiledmm.matmul(A, B).finish()
    st = be.home(A)
    real, taken = st.pool, []

    def counting(nbytes):
        taken.append(nbytes)
        return real(nbytes)

    monkeypatch.setattr(st, "pool", counting)
    monkeypatch.setattr(cla, "empty", lambda *a, **kw: pytest.fail("cla.empty per call"))
    managed = real.managed_bytes
    for _ in range(10):
        tiledmm.matmul(A, B)
    assert len(taken) >= 10 and real.managed_bytes == managed
    a2, b2, A2, B2 = operands(q, 5, 33, 600, rng)
    r1 = tiledmm.matmul(A, B)
    r2 = tiledmm.matmul(A2, B2)
    assert r1.base_data.int_ptr != r2.base_data.int_ptr
    assert matmul_error(r1.get(), a, b) < 1e-5 and matmul_error(r2.get(), a2, b2) < 1e-5


@pytest.mark.parametrize("form", ["row", "1-D x @ B", "A @ 1-D x", "column"])
def test_vectors_take_the_gemv_path(user, rng, form, monkeypatch):
    """Decode shapes on pyopencl arrays run the naive family's gemv path (the route CuPy's
    arrays take from the same source), on the caller's queue."""
    import pyopencl.array as cla
    from tiledmm_backends.kernels import launch
    from tiledmm_backends.opencl.bound import Bound

    be, q = user
    k, n = 257, 95
    a, b, A, B = operands(q, 1, n, k, rng)
    plans = []  # (queue, plan) of each launch: run's, or the hot path's pre-bound one
    real, real_bound = launch.run, Bound.arrays
    monkeypatch.setattr(launch, "run", lambda st, ls, plan, *a: (plans.append((st.queue, plan)),
                                                                  real(st, ls, plan, *a))[1])
    monkeypatch.setattr(Bound, "arrays", lambda self, x, y, c: (plans.append((c.queue, self.plan)),
                                                                real_bound(self, x, y, c))[1])
    Bt = cla.to_device(q, np.ascontiguousarray(b.T))
    if form == "row":
        x, w, want = A, B, a @ b.astype(np.float64)
    elif form == "1-D x @ B":
        x, w, want = A.reshape(k), B, a.reshape(k) @ b.astype(np.float64)
    elif form == "A @ 1-D x":
        x, w, want = Bt, A.reshape(k), b.T @ a.reshape(k).astype(np.float64)
    else:
        x, w, want = Bt, A.reshape(k, 1), b.T @ a.reshape(k, 1).astype(np.float64)
    for _ in range(2):  # the full path, then the hot path
        r = tiledmm.matmul(x, w)
        assert r.queue is q and r.shape == want.shape
        got = r.get()
        assert np.abs(got - want).max() <= 1e-5 * np.abs(b).sum(axis=0).max()
    assert len(plans) == 2
    for queue, plan in plans:
        assert queue is q
        assert plan.kernel == "naive" and plan.options.get("gemv"), plan


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_out_views_on_the_callers_queue(user, rng, dtype):
    """``out=`` views of a NaN-poisoned array on the caller's queue, odd shapes: exactly the
    view is written, against a float64 reference."""
    import pyopencl.array as cla

    be, q = user
    if dtype not in be.dtypes:
        pytest.skip(f"no {dtype} on this device")
    for m, n, k in SHAPES:
        a, b, A, B = operands(q, m, n, k, rng, dtype)
        big = cla.to_device(q, np.full((m + 2, n + 3), np.nan, dtype))
        view = big[1 : m + 1, 2 : n + 2]
        assert tiledmm.matmul(A, B, out=view) is view
        full = big.get()
        got = full[1 : m + 1, 2 : n + 2]
        tol = 1e-5 if dtype == "float32" else 1e-12
        assert np.isfinite(got).all() and matmul_error(got, a, b) < tol, (m, n, k)
        full[1 : m + 1, 2 : n + 2] = np.nan
        assert np.isnan(full).all()


def test_operands_of_two_contexts_and_host_operands(user, rng):
    """NumPy and pyopencl operands mixed, and pyopencl operands of two contexts: correct,
    the result of the caller's kind; NumPy alone still gives NumPy."""
    be, q = user
    a, b, A, B = operands(q, 9, 70, 130, rng)
    own = be.asarray(b, b.dtype)  # the backend's own context
    for x, y in ((A, own), (be.asarray(a, a.dtype), B), (a, B), (A, b)):
        r = tiledmm.matmul(x, y)
        assert hasattr(r, "queue") and matmul_error(r.get(), a, b) < 1e-5
    r = tiledmm.matmul(a, b, backend="opencl")
    assert type(r) is np.ndarray and matmul_error(r, a, b) < 1e-5


def test_timings_of_calls_on_a_plain_queue(user, rng, monkeypatch):
    """A caller's queue without profiling: ``timings`` waits for that queue and falls back to
    the host clock."""
    import pyopencl as cl

    be, q = user
    _, _, A, B = operands(q, 16, 16, 16, rng)
    finished = []
    real = cl.CommandQueue.finish
    monkeypatch.setattr(cl.CommandQueue, "finish", lambda self: (finished.append(self),
                                                                 real(self))[1])
    times = be.timings(lambda: tiledmm.matmul(A, B), repeat=2, warmup=1)
    assert len(times) == 2 and all(t > 0 for t in times)
    assert sum(f is q for f in finished) >= 3  # after the warm-up and each timed call


#: plans the pre-bound launch takes: one GEMM, K slices reduced after it, one-pass gemv
BOUND = [
    ("register", (37, 29, 53), ((16, 16, 4), (2, 4), dict(use_local=0, cpu_vec=4))),
    ("register", (5, 33, 600), ((16, 16, 4), (2, 4), dict(use_local=0, cpu_vec=4, split_k=3))),
    ("register", (8, 40, 64), ((32, 32, 8), (4, 4), dict(use_local=1, vm=4, vn=4, split_k=2))),
    ("tiled", (19, 24, 37), ((8, 8, 8), (1, 1), dict(split_k=4))),
    ("naive", (1, 97, 300), ((1, 16, 1), (1, 1), dict(gemv=1, ks=4, split_k=3, onepass=1))),
    ("naive", (70, 1, 129), ((2, 8, 1), (1, 1), dict(gemv=1, ks=8, split_k=4, onepass=1))),
]


@pytest.mark.parametrize("family,shape,geo", BOUND, ids=[f"{f}-{s}" for f, s, _ in BOUND])
def test_bound_launch_matches_a_float64_reference(user, rng, family, shape, geo):
    """The hot path's pre-bound launch (``OpenCLBackend.bind``) into NaN-poisoned results,
    called repeatedly (workspaces from the pool, the one-pass counters left zero), on odd
    shapes; views and offsets are refused (``run`` takes them)."""
    import pyopencl.array as cla

    be, q = user
    m, n, k = shape
    bt, tt, opts = geo
    geo = tiledmm.Geometry(bt, tt, tuple(sorted(opts.items())))
    plan = tiledmm.make_plan(m, n, k, dtype="float32", kernel=family, device=be.device(),
                             geometry=geo)  # fmt: skip
    go = be.bind(plan)
    assert go is not None
    for _ in range(3):
        a, b, A, B = operands(q, m, n, k, rng)
        c = cla.to_device(q, np.full((m, n), np.nan, np.float32))
        assert go.arrays(A, B, c) and c.events
        got = c.get()
        assert np.isfinite(got).all() and matmul_error(got, a, b) < 1e-5
    big = cla.to_device(q, np.zeros((m + 1, n), np.float32))
    assert not go.arrays(A, B, big[1:])  # an offset: run's
    wide = cla.to_device(q, np.zeros((m, k + 3), np.float32))
    assert not go.arrays(wide[:, :k], B, c)  # a row pitch: run's
