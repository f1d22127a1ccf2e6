"""numba-cuda backend: kernels under the CUDA simulator, the unavailable reason, GPU checks.

The simulator is chosen by NUMBA_ENABLE_CUDASIM when ``numba`` is first imported, and other
test files import Numba for the CPU. So the simulator cases run in ONE subprocess (module
fixture) that does every product and reports errors as JSON; each test below checks its part.
GPU tests are marked ``gpu`` and skip when no CUDA device is usable.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tiledmm
from tests.conftest import requires_backend
from tiledmm.util.accuracy import matmul_error

NUMBA_FAMILIES = ("naive", "tiled", "register")  # the numba-cuda backend's kernels
_SIM_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import tiledmm
    from numba import cuda
    be = [b for b in tiledmm.backends() if b.name == "numba-cuda"][0]
    out = {"available": be.available, "reason": be.reason, "cases": []}
    # the simulator does not warn: make each configuration warn as numba does on a GPU for a
    # grid under 128 blocks (highlighted, as with colorama), and record what escapes
    import warnings
    from numba.cuda.simulator import kernel as simk
    from tiledmm_backends.numba_cuda import engine as nbe
    _configure, configs = simk.FakeCUDAKernel.__getitem__, []
    def configure(self, conf):
        g = conf[0] if isinstance(conf[0], tuple) else (conf[0],)
        if int(np.prod(g)) < 128:
            configs.append(1)
            warnings.warn(nbe.PERF_WARNING("\x1b[1mGrid size %d will likely result in GPU "
                          "under-utilization due to low occupancy.\x1b[0m" % np.prod(g)))
        return _configure(self, conf)
    simk.FakeCUDAKernel.__getitem__ = configure
    _caught = warnings.catch_warnings(record=True)
    seen = _caught.__enter__()
    warnings.simplefilter("always")
    rng = np.random.default_rng(7)
    shapes = [(5, 7, 3), (17, 9, 13), (1, 20, 6), (9, 1, 4), (8, 8, 0), (48, 33, 40)]

    from tiledmm.util.accuracy import matmul_error

    def case(tag, fam, dt, m, n, k, c, a, b):
        err = matmul_error(c, a, b)
        out["cases"].append(dict(tag=tag, fam=fam, dt=dt, shape=[m, n, k], err=err,
                                 nan=bool(np.isnan(c).any()), dtype=str(c.dtype)))

    for fam in be.kernels:
        for dt in ("float32", "float64"):
            for m, n, k in shapes:
                a = rng.standard_normal((m, k)).astype(dt)
                b = rng.standard_normal((k, n)).astype(dt)
                c = tiledmm.matmul(a, b, backend="numba-cuda", kernel=fam)
                case("host", fam, dt, m, n, k, c, a, b)
                # device arrays, NaN-poisoned out= that must be fully overwritten
                d = cuda.to_device(np.full((m, n), np.nan, dt))
                r = tiledmm.matmul(cuda.to_device(a), cuda.to_device(b), backend="numba-cuda",
                                   kernel=fam, out=d)
                case("poisoned-out", fam, dt, m, n, k, r.copy_to_host(), a, b)
    # strided device inputs and a strided out view
    a = rng.standard_normal((19, 30)).astype("float32")
    b = rng.standard_normal((15, 22)).astype("float32")
    big = cuda.to_device(np.full((19, 44), np.nan, "float32"))
    view = big[:, ::2]
    r = tiledmm.matmul(cuda.to_device(a)[:, ::2], cuda.to_device(b), backend="numba-cuda",
                       kernel="register", out=view)
    case("strided", "register", "float32", 19, 22, 15, big.copy_to_host()[:, ::2], a[:, ::2], b)
    # out= that is an operand (several blocks: a direct launch would read what others wrote),
    # 2-D and batched
    for fam in be.kernels:
        for sa, sb, which in (((40, 40), (40, 40), "a"), ((33, 33), (33, 33), "b"),
                              ((3, 12, 12), (3, 12, 12), "a")):
            a = rng.standard_normal(sa).astype("float32")
            b = rng.standard_normal(sb).astype("float32")
            da, db = cuda.to_device(a), cuda.to_device(b)
            r = tiledmm.matmul(da, db, backend="numba-cuda", kernel=fam,
                               out=da if which == "a" else db)
            got = r.copy_to_host()
            want = np.matmul(a.astype(np.float64), b)
            out["cases"].append(dict(tag="out-is-operand", fam=fam, dt="float32",
                                     shape=list(sa + sb), err=float(np.abs(got - want).max()
                                     / np.abs(want).max()), nan=bool(np.isnan(got).any()),
                                     dtype=str(got.dtype)))
    # the real-GPU default geometry (128x128x8, 8x8) on one odd shape
    plan = tiledmm.plan(33, 130, 9, backend="numba-cuda", kernel="register",
                        block_tile=(128, 128, 8), thread_tile=(8, 8))
    a = rng.standard_normal((33, 9)).astype("float32")
    b = rng.standard_normal((9, 130)).astype("float32")
    c = cuda.to_device(np.full((33, 130), np.nan, "float32"))
    be_obj = tiledmm.get_backend("numba-cuda")
    be_obj.run(plan, cuda.to_device(a), cuda.to_device(b), c)
    case("h200-geometry", "register", "float32", 33, 130, 9, c.copy_to_host(), a, b)
    # double-buffered shared tiles over five K steps (both buffers, a ragged last step)
    geo = tiledmm.Geometry((16, 16, 4), (4, 4), (("stages", 2), ("unroll_k", True)))
    plan = tiledmm.make_plan(21, 18, 19, dtype="float32", kernel="register",
                             device=be_obj.device(), geometry=geo)
    a = rng.standard_normal((21, 19)).astype("float32")
    b = rng.standard_normal((19, 18)).astype("float32")
    c = cuda.to_device(np.full((21, 18), np.nan, "float32"))
    be_obj.run(plan, cuda.to_device(a), cuda.to_device(b), c)
    case("double-buffered", "register", "float32", 21, 18, 19, c.copy_to_host(), a, b)
    # the same kernel at shapes 9x7, 6x7, 9x7 in a row (the simulator mutates a configured
    # kernel: a kept launcher ran the second grid for the third call), plain and transposed
    for fam in be.kernels:
        for i, (m, n, k) in enumerate([(9, 7, 5), (6, 7, 5), (9, 7, 5)]):
            a = rng.standard_normal((m, k)).astype("float32")
            b = rng.standard_normal((k, n)).astype("float32")
            c = tiledmm.matmul(a, b, backend="numba-cuda", kernel=fam)
            case(f"sequence-{i}", fam, "float32", m, n, k, c, a, b)
            at, bt = np.ascontiguousarray(a.T).T, np.ascontiguousarray(b.T).T
            c = tiledmm.matmul(at, bt, backend="numba-cuda", kernel=fam)
            case(f"sequence-T-{i}", fam, "float32", m, n, k, c, a, b)
    # the result's kind follows the caller's operand passed as like=, in any order
    import types
    fake = types.ModuleType("cupy")
    class ndarray:
        def __init__(self, shape, dtype):
            self.shape, self.dtype = shape, np.dtype(dtype)
    fake.ndarray, fake.empty = ndarray, ndarray
    sys.modules["cupy"] = fake
    nb_arr = cuda.to_device(np.ones((2, 2), "float32"))
    kinds = []
    for like in (ndarray((2, 2), "float32"), nb_arr, ndarray((2, 2), "float32"), nb_arr, None):
        be_obj.asarray(nb_arr, np.dtype("float32"))  # calls between must not matter
        r = be_obj.empty((3, 4), np.dtype("float32"), like=like)
        kinds.append("cupy" if isinstance(r, ndarray) else "numba" if hasattr(r, "copy_to_host")
                     else type(r).__name__)
    del sys.modules["cupy"]
    out["kinds"] = kinds
    # broadcast batches in one launch (grid z), rank 2 and K = 0/1, into poisoned outputs
    batches = [((3, 5, 7), (3, 7, 6)), ((4, 1, 5, 3), (1, 2, 3, 9)), ((5, 9, 1), (1, 6)),
               ((2, 3, 4, 0), (3, 0, 5))]
    for fam in be.kernels:
        for sa, sb in batches:
            a = rng.standard_normal(sa).astype("float32")
            b = rng.standard_normal(sb).astype("float32")
            ref = np.matmul(a.astype(np.float64), b)
            m, k, n = sa[-2], sa[-1], sb[-1]
            plan = tiledmm.plan(m, n, k, backend="numba-cuda", kernel=fam)
            c = cuda.to_device(np.full(ref.shape, np.nan, "float32"))
            done = be_obj.run_batched(plan, cuda.to_device(a), cuda.to_device(b), c)
            case(f"batched-{done}", fam, "float32", m, n, k, c.copy_to_host(), a, b)
            c = tiledmm.matmul(a, b, backend="numba-cuda", kernel=fam)
            case("batched-api", fam, "float32", m, n, k, c, a, b)
    # split-K (K slices into a workspace, then the reduction; every family, K = 0, a broadcast
    # batch) and the gemv path (both orientations, with split-K; float64 once) at odd shapes
    G, dev = tiledmm.Geometry, be_obj.device()
    geos = [("register", G((8, 16, 4), (2, 4), (("split_k", 3), ("stages", 2), ("unroll_k", 1)))),
            ("register", G((16, 16, 4), (4, 4), (("split_k", 2),))),
            ("tiled", G((8, 8, 8), (1, 1), (("split_k", 2),))),
            ("naive", G((4, 8, 1), (1, 1), (("split_k", 3),))),
            ("naive", G((2, 4, 1), (1, 1), (("gemv", 1), ("ks", 4)))),
            ("naive", G((3, 8, 1), (1, 1), (("gemv", 1), ("ks", 2), ("split_k", 2))))]
    for i, (fam, geo) in enumerate(geos):
        for m, n, k, dt in ((1, 37, 45, "float32"), (23, 2, 30, "float64"), (5, 1, 0, "float32")):
            plan = tiledmm.make_plan(m, n, k, dtype=dt, kernel=fam, device=dev, geometry=geo,
                                     backend="numba-cuda")
            a = rng.standard_normal((m, k)).astype(dt)
            b = rng.standard_normal((k, n)).astype(dt)
            c = cuda.to_device(np.full((m, n), np.nan, dt))
            be_obj.run(plan, cuda.to_device(a), cuda.to_device(b), c)
            case(f"sliced-{i}", fam, dt, m, n, k, c.copy_to_host(), a, b)
        a = rng.standard_normal((3, 7, 13)).astype("float32")
        b = rng.standard_normal((1, 13, 2)).astype("float32")
        plan = tiledmm.make_plan(7, 2, 13, dtype="float32", kernel=fam, device=dev, geometry=geo,
                                 backend="numba-cuda")
        c = cuda.to_device(np.full((3, 7, 2), np.nan, "float32"))
        done = be_obj.run_batched(plan, cuda.to_device(a), cuda.to_device(b), c)
        case(f"sliced-batch-{done}", fam, "float32", 7, 2, 13, c.copy_to_host(), a, b)
    # the classes' own paths through the API: 1-D operands (the vector entry: gemv) and a
    # skinny product (register, 3 K slices, the tile turned to the short side)
    x = rng.standard_normal(29).astype("float32")
    big = rng.standard_normal((29, 19)).astype("float32")
    for fam in be.kernels:
        r = tiledmm.matmul(x, big, backend="numba-cuda", kernel=fam)  # (29,) @ (29, 19)
        case("class-vector", fam, "float32", 1, 19, 29, r[None], x[None], big)
        r = tiledmm.matmul(big.T, x * 2, backend="numba-cuda", kernel=fam)  # (19, 29) @ (29,)
        case("class-vector-T", fam, "float32", 19, 1, 29, r[:, None], big.T, x[:, None] * 2)
        a = rng.standard_normal((40, 37)).astype("float32")
        b = rng.standard_normal((37, 3)).astype("float32")
        r = tiledmm.matmul(a, b, backend="numba-cuda", kernel=fam)
        case("class-skinny", fam, "float32", 40, 3, 37, r, a, b)
    out["plans"] = {f"{fam}-{m}x{n}": dict(tile=list(p.block_tile), opts=dict(p.options))
                    for fam in be.kernels for m, n in ((1, 19), (19, 1), (40, 3))
                    for p in [tiledmm.plan(m, n, 37, backend="numba-cuda", kernel=fam)]}
    # NaN and Inf propagate as in numpy
    a = np.array([[np.nan, 1.0], [np.inf, 1.0]], "float32")
    b = np.ones((2, 3), "float32")
    c = tiledmm.matmul(a, b, backend="numba-cuda", kernel="tiled")
    out["special"] = [str(v) for v in c[:, 0]]
    small = [str(w.message) for w in seen if "Grid size" in str(w.message)]
    out["small_grid_configs"], out["small_grid_escaped"] = len(configs), small
    @cuda.jit
    def users_kernel(x):
        x[0] = 1.0
    users_kernel[1, 32]  # the user's own: it shows
    out["small_grid_control"] = sum("Grid size" in str(w.message) for w in seen) - len(small)
    _caught.__exit__(None, None, None)
    print("RESULT" + json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    pytest.importorskip("numba")
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    env["TILEDMM_CACHE_DIR"] = str(tmp_path_factory.mktemp("tiledmm-cache"))
    proc = subprocess.run(
        [sys.executable, "-c", _SIM_SCRIPT], env=env, capture_output=True, text=True, timeout=600
    )
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT")]
    assert line, f"simulator run failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return json.loads(line[0][len("RESULT") :])


def test_simulator_backend_available(sim):
    assert sim["available"], sim["reason"]


@pytest.mark.parametrize("fam", NUMBA_FAMILIES)
def test_simulator_family_correct(sim, fam):
    cases = [c for c in sim["cases"] if c["fam"] == fam and c["tag"] in ("host", "poisoned-out")]
    assert len(cases) == 24
    for c in cases:
        tol = 1e-5 if c["dt"] == "float32" else 1e-12
        assert c["dtype"] == c["dt"], c
        assert not c["nan"], f"unwritten (NaN) outputs: {c}"
        assert c["err"] < tol, c


def test_simulator_strided_and_default_geometry(sim):
    for tag in ("strided", "h200-geometry", "double-buffered"):
        (c,) = [c for c in sim["cases"] if c["tag"] == tag]
        assert not c["nan"] and c["err"] < 1e-5, c


def _written_right(sim: dict, fam: str, tag: str, count: int) -> list[dict]:
    """The simulator's cases of ``fam`` whose tag starts with ``tag``: ``count`` of them, each
    fully written (no NaN left) and within float32 rounding of the reference."""
    cases = [c for c in sim["cases"] if c["fam"] == fam and c["tag"].startswith(tag)]
    assert len(cases) == count
    for c in cases:
        assert not c["nan"] and c["err"] < 1e-5, c
    return cases


@pytest.mark.parametrize("fam", NUMBA_FAMILIES)
def test_simulator_launch_sequence(sim, fam):
    """Issue 16.6: 9x7, 6x7, 9x7 in a row (and transposed) compute every row each time."""
    _written_right(sim, fam, "sequence", 6)


def test_simulator_result_kind_follows_like(sim):
    assert sim["kinds"] == ["cupy", "numba", "cupy", "numba", "numba"]


def test_simulator_nan_inf_propagate(sim):
    assert sim["special"] == [str(np.float32("nan")), str(np.float32("inf"))]


def test_unavailable_reason_numpy_25():
    from tiledmm_backends.numba_cuda.compat import numpy_incompatibility

    msg = numpy_incompatibility("2.5.2", "0.30.4")
    assert msg and "numpy<2.5" in msg and "#907" in msg and "0.30.4" in msg
    assert numpy_incompatibility("2.4.6", "0.30.4") is None
    assert numpy_incompatibility("2.5.0", None) is None


def test_unavailable_reason_from_backend(monkeypatch):
    import tiledmm_backends.numba_cuda as mod

    monkeypatch.delenv("NUMBA_ENABLE_CUDASIM", raising=False)
    monkeypatch.setattr(mod.np, "__version__", "2.5.2")
    monkeypatch.setattr(mod, "_dist_version", lambda name: "0.30.4")
    reason = mod.NumbaCudaBackend().unavailable_reason()
    assert reason and "pip install 'numpy<2.5'" in reason
    monkeypatch.setattr(mod, "_dist_version", lambda name: None)
    reason = mod.NumbaCudaBackend().unavailable_reason()
    assert reason and "pip install" in reason


def test_import_tiledmm_does_not_import_numba():
    code = "import sys, tiledmm; tiledmm.backends(); print('numba.cuda' in sys.modules)"
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    # backends() asks availability (which may import numba.cuda); plain import must not
    code2 = "import sys, tiledmm; print('numba' in sys.modules)"
    proc2 = subprocess.run([sys.executable, "-c", code2], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc2.stdout.strip().splitlines()[-1] == "False"


SIMULATING = os.environ.get("NUMBA_ENABLE_CUDASIM", "") not in ("", "0")


@pytest.mark.gpu
@requires_backend("numba-cuda")
@pytest.mark.skipif(SIMULATING, reason="real GPU shapes are too slow for the simulator")
@pytest.mark.parametrize("fam", NUMBA_FAMILIES)
@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_gpu_family_correct(fam, dt):
    rng = np.random.default_rng()
    for m, n, k in [(1, 1, 1), (129, 257, 67), (300, 100, 0), (511, 513, 255)]:
        a, b = rng.standard_normal((m, k)).astype(dt), rng.standard_normal((k, n)).astype(dt)
        c = tiledmm.matmul(a, b, backend="numba-cuda", kernel=fam)
        assert matmul_error(c, a, b) < (1e-5 if dt == "float32" else 1e-12), (m, n, k)


@pytest.mark.gpu
@requires_backend("numba-cuda")
@pytest.mark.skipif(SIMULATING, reason="real GPU shapes are too slow for the simulator")
@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_gpu_class_paths_correct(dt):
    """``kernel="auto"`` per class on the device's own tiles: 1-D operands (gemv), skinny
    products (split-K, oriented tiles), a small grid (halved tiles), a batch; all written."""
    rng = np.random.default_rng()
    cases = [
        ((1000,), (1000, 777)),
        ((777, 1000), (1000,)),
        ((40, 3001), (3001, 2000)),
        ((3001, 2000), (2000, 24)),
        ((500, 300), (300, 515)),
        ((3, 65, 90), (90, 70)),
    ]
    for sa, sb in cases:
        a, b = rng.standard_normal(sa).astype(dt), rng.standard_normal(sb).astype(dt)
        c = tiledmm.matmul(a, b, backend="numba-cuda")
        want = np.matmul(a.astype(np.float64), b.astype(np.float64))
        err = np.abs(c - want).max() / np.abs(want).max()
        assert c.shape == want.shape and err < (1e-5 if dt == "float32" else 1e-12), (sa, sb)


def test_device_spec_from_driver_attribute_names():
    """Every attribute read is a real CU_DEVICE_ATTRIBUTE_* name (a typo crashed a GPU run)."""
    drv = pytest.importorskip("cuda.bindings.driver")
    from tiledmm_backends.numba_cuda.device import device_spec_from

    values = {"MULTIPROCESSOR_COUNT": 132, "CLOCK_RATE": 1980000, "WARP_SIZE": 32}

    class FakeDevice:
        name = b"NVIDIA H200"
        compute_capability = (9, 0)

        def __getattr__(self, attr):
            if not hasattr(drv.CUdevice_attribute, "CU_DEVICE_ATTRIBUTE_" + attr):
                raise AssertionError(f"not a CUDA device attribute: {attr}")
            return values.get(attr, 65536)

    spec = device_spec_from(FakeDevice())
    assert spec.name == "NVIDIA H200" and spec.compute_units == 132
    assert 60e12 < spec.peak("float32") < 70e12


@pytest.mark.parametrize("fam", NUMBA_FAMILIES)
def test_simulator_out_is_an_operand(sim, fam):
    """out= that is one of the operands (2-D and batched): computed through a temporary, not
    launched into memory that other blocks still read."""
    _written_right(sim, fam, "out-is-operand", 3)


@pytest.mark.parametrize("fam", NUMBA_FAMILIES)
def test_simulator_batched_one_launch(sim, fam):
    """Broadcast batches (rank 2, K = 0 and 1) through run_batched: one launch, all written."""
    for c in _written_right(sim, fam, "batched", 8):
        assert c["tag"] != "batched-False", c


@pytest.mark.parametrize("fam", NUMBA_FAMILIES)
def test_simulator_split_k_and_gemv(sim, fam):
    """Split-K (K slices, the reduction; K = 0; a broadcast batch) and the gemv path (both
    orientations, with split-K) at odd shapes: every output written, float64 reference."""
    count = {"register": 2, "tiled": 1, "naive": 3}[fam] * 4
    for c in _written_right(sim, fam, "sliced", count):
        assert c["tag"] != "sliced-batch-False", c


@pytest.mark.parametrize("fam", NUMBA_FAMILIES)
def test_simulator_class_paths(sim, fam):
    """1-D operands and a skinny product through the API, with each family's class tiles."""
    _written_right(sim, fam, "class-", 3)
    plans = sim["plans"]
    for mn in ("1x19", "19x1"):  # the vector class entry: naive runs the gemv path
        assert plans[f"naive-{mn}"]["opts"] == {"gemv": 1, "ks": 4}
    skinny = plans["register-40x3"]  # the simulator's 8x16 skinny tile, turned to 16x8
    assert skinny["tile"] == [16, 8, 4] and skinny["opts"]["split_k"] == 3


def test_engine_choice_and_mlir_source():
    """numba-cuda where it works (and always under the simulator), numba-cuda-mlir where
    numba-cuda cannot compile with this NumPy and mlir is installed; the env var wins."""
    pytest.importorskip("numba")
    from tiledmm_backends.numba_cuda.codegen import KernelSpec
    from tiledmm_backends.numba_cuda.engine import choose_engine
    from tiledmm_backends.numba_cuda.kernels import source

    assert choose_engine("", False, True, True) == "numba-cuda"
    assert choose_engine("", False, False, True) == "numba-cuda-mlir"
    assert choose_engine("", True, False, True) == "numba-cuda"  # the simulator
    assert choose_engine("", False, False, False) == "numba-cuda"  # its own error message
    assert choose_engine("numba-cuda-mlir", False, True, True) == "numba-cuda-mlir"
    with pytest.raises(ImportError, match="TILEDMM_NUMBA_ENGINE"):
        choose_engine("numba", False, True, True)
    text = source(KernelSpec("naive", "float32", 4, 8), "numba-cuda-mlir")
    assert "from numba_cuda_mlir import cuda" in text and "from numba " not in text
    compile(text, "k.py", "exec")


def test_small_grid_warning_silenced_only_for_tiledmm_launches():
    import warnings

    pytest.importorskip("numba.cuda")
    from tiledmm_backends.numba_cuda import engine as nb

    if nb.SIMULATOR:
        pytest.skip("the simulator does not warn")
    from numba import cuda

    @cuda.jit
    def users_kernel(x):
        x[0] = 1.0

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        users_kernel[1, 32]  # the user's own small launch: numba warns
        with nb.small_grids_on_purpose():  # tiledmm's: silent; other warnings still show
            users_kernel[2, 32]
            warnings.warn(nb.PERF_WARNING("Host array used (another warning)"), stacklevel=1)
            warnings.warn(nb.PERF_WARNING(_HIGHLIGHTED.format(5)), stacklevel=1)
        users_kernel[3, 32]  # the filter ends with the launch
        warnings.warn(nb.PERF_WARNING(_HIGHLIGHTED.format(6)), stacklevel=1)
    msgs = [str(w.message) for w in seen]
    assert sum("Grid size 1 " in m for m in msgs) == 1 and sum("Grid size 3 " in m for m in msgs)
    assert not any("Grid size 2 " in m or "Grid size 5 " in m for m in msgs)
    assert any("another warning" in m for m in msgs) and any("Grid size 6 " in m for m in msgs)


#: numba's low-occupancy warning as numba words it where colorama is installed (highlighted)
_HIGHLIGHTED = (
    "\x1b[1mGrid size {} will likely result in GPU under-utilization due to low occupancy.\x1b[0m"
)


def test_simulated_launch_sites_configure_inside_the_filter(sim):
    """Every launch configuration the simulator script makes (products of each family, out=,
    strided copies, batches, the real-GPU geometry) is inside the scoped filter: the
    script makes the simulator warn as numba does on a GPU (highlighted) for each small grid,
    and counts what escapes; a configuration of its own outside the filter must show."""
    assert sim["small_grid_configs"] > 20, sim["small_grid_configs"]  # the patch saw launches
    assert sim["small_grid_escaped"] == [], sim["small_grid_escaped"][:3]
    assert sim["small_grid_control"] == 1


def test_fast_launch_packs_pointers_sizes_and_cached_scalars(monkeypatch):
    """The fast launch path (real GPUs only) against stand-ins: each operand as Numba's array
    struct (pointer from a Numba array's memory object, not its interface dict), the ten
    uint32 scalars made once per shape and batch."""
    pytest.importorskip("numba.cuda")
    from types import SimpleNamespace

    from tiledmm_backends.numba_cuda import engine as nb

    class FakeND:  # a Numba device array: its address through gpu_data
        def __init__(self, ptr, size):
            self.gpu_data, self.size = SimpleNamespace(device_pointer=ptr), size

        @property
        def __cuda_array_interface__(self):
            raise AssertionError("the interface dict is not needed")

    class Other:  # anything else: its interface
        def __init__(self, ptr, size):
            self.size, self.__cuda_array_interface__ = size, {"data": (ptr, False)}

    monkeypatch.setattr(nb, "_ND_TYPES", (FakeND,))
    calls = []
    lau = nb.Launcher.__new__(nb.Launcher)
    lau._fast = (lambda stream, cfg, fn, *args: calls.append((cfg, args)), "s", "cfg", "fn")
    lau.itemsize, lau._batched, lau._tails = 4, {}, {}
    a, b, c = FakeND(0x1000, 6), Other(0x2000, 12), FakeND(0x3000, 8)
    for _ in range(2):
        lau(a, b, c, 2, 4, 3)
    (cfg, args), (_, again) = calls
    assert cfg == "cfg" and args[:21] == (0, 0, 6, 4, 0x1000, 6, 4, 0, 0, 12, 4, 0x2000, 12, 4,
                                          0, 0, 8, 4, 0x3000, 8, 4)  # fmt: skip
    assert [x.value for x in args[21:]] == [2, 4, 3, 1, 0, 0, 0, 0, 0, 0]
    assert all(x is y for x, y in zip(args[21:], again[21:], strict=True))  # made once
    a.gpu_data = None  # (no memory object: the interface decides)
    a.__class__ = Other
    a.__cuda_array_interface__ = {"data": (0x4000, False)}
    assert nb._ptr(a) == 0x4000
