"""tiledmm on Dask: numpy semantics through chunked products, the cluster planner, a
distributed LocalCluster with processes, and a worker that dies mid-computation."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

da = pytest.importorskip("dask.array")

import tiledmm  # noqa: E402
import tiledmm.dask as td  # noqa: E402
from tiledmm.dask import product as dask_product  # noqa: E402
from tiledmm.dask.cluster import cluster_plan  # noqa: E402
from tiledmm.dask.cluster_model import Cluster  # noqa: E402
from tiledmm.util.accuracy import matmul_error  # noqa: E402

RNG = np.random.default_rng(20261201)


def rand(shape, dtype=np.float32):
    return (RNG.random(shape) * 2 - 1).astype(dtype)


def tol(dtype, k):
    return 64 * float(np.finfo(dtype).eps) * math.sqrt(max(k, 1))


@pytest.fixture(autouse=True)
def _sync_scheduler():
    """Most tests run on dask's default threaded scheduler (no set-up)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", td.RechunkWarning)
        yield


def test_is_dask_array_does_not_import_dask():
    code = (
        "import sys, numpy as np, tiledmm, tiledmm.dask as td\n"
        "assert not td.is_dask_array(np.ones(3)) and not td.is_dask_array([1])\n"
        "assert 'dask' not in sys.modules, 'dask imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    assert td.is_dask_array(da.ones(3)) and not td.is_dask_array(np.ones(3))


@pytest.mark.parametrize(
    "m,n,k,chunks_a,chunks_b",
    [
        (37, 53, 29, (10, 13), (13, 20)),  # matching K chunks, odd everywhere
        (61, 17, 45, (30, 7), (11, 17)),  # different K chunks (B follows A)
        (1, 9, 1, (1, 1), (1, 4)),
        (64, 48, 96, (64, 96), (96, 48)),  # one chunk
    ],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matches_numpy_odd_shapes_and_chunks(m, n, k, chunks_a, chunks_b, dtype):
    a, b = rand((m, k), dtype), rand((k, n), dtype)
    for rechunk in (False, "auto"):
        c = td.matmul(da.from_array(a, chunks_a), da.from_array(b, chunks_b), rechunk=rechunk)
        assert isinstance(c, da.Array) and c.shape == (m, n) and c.dtype == dtype
        got = c.compute()
        assert type(got) is np.ndarray and got.dtype == dtype
        assert matmul_error(got, a, b) < tol(dtype, k), rechunk


def test_out_numpy_poisoned_and_dask_out_refused():
    a, b = rand((23, 31)), rand((31, 19))
    out = np.full((23, 19), np.nan, np.float32)
    res = td.matmul(da.from_array(a, (7, 8)), da.from_array(b, (8, 5)), out=out)
    assert res is out and matmul_error(out, a, b) < tol(np.float32, 31)
    with pytest.raises(TypeError, match="immutable"):
        td.matmul(da.from_array(a), b, out=da.zeros((23, 19)))
    with pytest.raises(ValueError) as ours:
        td.matmul(da.from_array(a), b, out=np.empty((23, 18), np.float32))
    with pytest.raises(ValueError) as theirs:
        np.matmul(a, b, out=np.empty((23, 18), np.float32))
    assert str(ours.value) == str(theirs.value)


@pytest.mark.parametrize(
    "sa,sb,ca,cb",
    [
        ((3, 1, 11, 13), (4, 13, 7), (2, 1, 6, 5), (3, 5, 4)),  # broadcast batch, ndim differ
        ((2, 9, 14), (14, 6), (1, 4, 7), (7, 3)),
        ((14,), (2, 14, 5), (5,), (1, 5, 5)),  # 1-D left
        ((2, 3, 9, 14), (14,), (1, 2, 9, 7), (7,)),  # 1-D right
        ((17,), (17,), (6,), (6,)),  # dot product: a 0-d result
    ],
)
def test_batched_and_1d(sa, sb, ca, cb):
    a, b = rand(sa, np.float64), rand(sb, np.float64)
    c = td.matmul(da.from_array(a, ca), da.from_array(b, cb))
    ref = np.matmul(a, b)
    assert c.shape == ref.shape and c.dtype == ref.dtype
    np.testing.assert_allclose(c.compute(), ref, rtol=1e-12, atol=1e-12)


def test_mixed_dask_and_plain_operands():
    a, b = rand((20, 33)), rand((33, 12))
    for x, y in ((da.from_array(a, (7, 10)), b), (a, da.from_array(b, (10, 5)))):
        c = td.matmul(x, y)
        assert isinstance(c, da.Array)
        assert matmul_error(c.compute(), a, b) < tol(np.float32, 33)
    c = td.matmul(a.tolist(), da.from_array(b, (10, 5)))  # a nested list
    assert c.dtype == np.float64


@pytest.mark.parametrize(
    "da_, db_",
    [(np.int8, np.int16), (np.int64, np.int64), (bool, bool), (np.complex64, np.float32),
     (np.float16, np.float16), (np.float32, np.float64)],
)  # fmt: skip
def test_dtypes_follow_numpy(da_, db_):
    a = (RNG.random((19, 23)) * 8 - 4).astype(da_)
    b = (RNG.random((23, 11)) * 8 - 4).astype(db_)
    if da_ is bool:
        a, b = RNG.random((19, 23)) > 0.7, RNG.random((23, 11)) > 0.7
    c = td.matmul(da.from_array(a, (7, 6)), da.from_array(b, (6, 4)), rechunk=False)
    ref = np.matmul(a, b)
    assert c.dtype == ref.dtype
    got = c.compute()
    assert got.dtype == ref.dtype
    if ref.dtype.kind in "biu":
        np.testing.assert_array_equal(got, ref)
    else:
        rtol = 1e-2 if ref.dtype == np.float16 else 1e-5
        np.testing.assert_allclose(got, ref, rtol=rtol, atol=rtol)


@pytest.mark.parametrize(
    "sa,sb", [((5, 4), (3, 2)), ((2, 5, 4), (3, 4, 2)), ((), (3,)), ((4,), (5,))]
)
def test_errors_are_numpys(sa, sb):
    a, b = np.ones(sa, np.float32), np.ones(sb, np.float32)
    with pytest.raises((ValueError, TypeError)) as theirs:
        np.matmul(a, b)
    with pytest.raises(type(theirs.value)) as ours:
        td.matmul(da.from_array(a), da.from_array(b))
    assert str(ours.value) == str(theirs.value)


@pytest.mark.parametrize("sa,sb", [((), (3,)), ((3,), ()), ((), (2, 3)), ((4, 2), ())])
@pytest.mark.parametrize("which", ["a", "b"])
def test_a_0d_operand_mixed_with_plain_gives_numpys_error(sa, sb, which):
    """Issue 33: a 0-d dask array with a NumPy operand of 1+ dims (or the other way round)
    raised IndexError in the chunk matching; numpy's own ValueError is the answer."""
    a, b = np.ones(sa, np.float32), np.ones(sb, np.float32)
    with pytest.raises(ValueError) as theirs:
        np.matmul(a, b)
    x, y = (da.from_array(a), b) if which == "a" else (a, da.from_array(b))
    with pytest.raises(ValueError) as ours:
        td.matmul(x, y)
    assert str(ours.value) == str(theirs.value)
    with pytest.raises(ValueError, match="does not have enough dimensions"):
        tiledmm.matmul(x, y)


def test_numpy_replay_only_when_numpy_would_raise(monkeypatch):
    """The replay on stand-ins computes a product as large as the real one when numpy accepts
    the call (35 s at 32768^3 on the client, inside every call): valid calls skip it."""
    from tiledmm.core import semantics

    calls = []
    real = semantics._replay
    monkeypatch.setattr(semantics, "_replay", lambda *a: calls.append(a) or real(*a))
    x, y = da.ones((3, 50, 40), chunks=20), da.ones((40, 30), chunks=20)
    td.matmul(x, y)
    td.matmul(x[0, 0], y)  # 1-D promotion
    td.matmul(x[0], y, out=np.empty((50, 30)))
    hx, hy = td.from_host(rand((9, 7))), td.from_host(rand((7, 5)))
    td.explain(hx, hy)
    td.release(hx), td.release(hy)
    assert calls == []
    with pytest.raises(ValueError):
        td.matmul(x, y[:30])
    with pytest.raises(ValueError):
        td.matmul(x[0], y, out=np.empty((50, 31)))
    assert len(calls) == 2


def test_rechunk_is_explicit_and_reported():
    a, b = rand((300, 280)), rand((280, 260))
    x, y = da.from_array(a, (30, 28)), da.from_array(b, (28, 26))  # 1000 tiny products
    plan = td.explain(x, y)
    assert plan.rechunked and plan.rechunked["from"] == (30, 26, 28)
    assert plan.rechunked["to"] == plan.chunks
    with pytest.warns(td.RechunkWarning, match="rechunked the operands from chunks"):
        c = td.matmul(x, y)
    assert c.chunks[0][0] == plan.chunks[0]
    kept = td.matmul(x, y, rechunk=False)
    assert kept.chunks == ((30,) * 10, (26,) * 10)
    assert td.explain(x, y, rechunk=False).rechunked is None
    forced = td.matmul(x, y, rechunk=(100, 130, 140))
    assert forced.chunks == ((100,) * 3, (130,) * 2)
    assert matmul_error(forced.compute(), a, b) < tol(np.float32, 280)
    with pytest.raises(ValueError, match="rechunk must be"):
        td.matmul(x, y, rechunk="sometimes")


# --------------------------------------------------------------------------- the cluster planner


def test_plan_fits_memory_and_beats_its_alternatives():
    gpu = Cluster(workers=2, worker_memory=2 * 2**30, link_bandwidth=20e9, task_overhead=1e-3)
    p = cluster_plan(16384, 16384, 16384, cluster=gpu, flops_per_worker=40e12)
    assert p.fits and p.working_bytes <= 0.5 * gpu.worker_memory
    assert p.grid[0] * p.grid[1] >= 2  # both workers get output blocks
    assert p.alternatives and all(
        p.predicted_seconds <= 1.03 * alt.predicted_seconds for _, alt in p.alternatives
    )
    assert "cluster intensity" in str(p) and p.to_dict()["chunks"] == p.chunks
    big = cluster_plan(16384, 16384, 16384, cluster=gpu, flops_per_worker=40e12,
                       worker_memory=64 * 2**30)  # fmt: skip
    assert big.tasks <= p.tasks  # more memory never forces more, smaller chunks


def test_plan_traffic_is_the_tile_formula_one_level_up():
    m, n, k = 4096, 2048, 1024
    one = cluster_plan(m, n, k, workers=1, link_bandwidth=10e9, chunks=(1024, 1024, k))
    assert one.bytes_moved == 4 * k * (m + n)  # each input crosses the link once
    four = cluster_plan(m, n, k, workers=4, link_bandwidth=10e9, chunks=(1024, 1024, k))
    assert four.worker_grid == (2, 2)
    assert four.bytes_moved == 4 * k * (m * 2 + n * 2)
    assert four.intensity == pytest.approx(2 * m * n * k / four.bytes_moved)
    local = cluster_plan(m, n, k, chunks=(1024, 1024, k))  # threads share memory
    assert local.bytes_moved == 0 and math.isinf(local.intensity)


# --------------------------------------------------------------------------- distributed


def _die_once(x, marker):
    """Kill this worker process the first time any worker runs it (the marker file says);
    never the test process (dask calls it on empty stand-ins there for meta)."""
    from distributed import get_worker

    try:
        get_worker()
    except ValueError:
        return x
    if x.size and not os.path.exists(marker):
        with open(marker, "w") as f:
            f.write(str(os.getpid()))
        os._exit(1)
    return x


@pytest.fixture(scope="module")
def client():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
        silence_logs=50,
    ) as cluster, distributed.Client(cluster) as c:  # fmt: skip
        yield c


def test_local_cluster_processes(client):
    cl = td.current_cluster()
    assert cl.workers == 2 and cl.inputs == "workers"
    a, b = rand((3, 70, 45), np.float64), rand((45, 33), np.float64)
    c = td.matmul(da.from_array(a, (2, 25, 20)), da.from_array(b, (20, 11)), rechunk=False)
    got = c.compute()
    np.testing.assert_allclose(got, a @ b, rtol=1e-12, atol=1e-12)
    who = client.run(lambda: __import__("os").getpid())
    assert len(set(who.values())) == 2  # two worker processes did it


def test_worker_dies_mid_computation(client, tmp_path):
    marker = tmp_path / "killed"
    a, b = rand((60, 50)), rand((50, 40))
    x = da.from_array(a, (20, 25)).map_blocks(
        _die_once, marker=str(marker), dtype=a.dtype, meta=np.empty((0, 0), a.dtype)
    )
    c = td.matmul(x, da.from_array(b, (25, 20)), rechunk=False)
    got = c.compute()
    assert marker.exists()  # a worker really died; dask re-ran its tasks
    assert matmul_error(got, a, b) < tol(np.float32, 50)
    client.wait_for_workers(2, timeout=30)


def test_plan_from_cli_arguments():
    from argparse import Namespace

    from tiledmm.dask.cluster import plan_from_args
    from tiledmm.util.args import parse_size

    assert parse_size("80GiB") == 80 * 2**30 and parse_size("25GB/s") == 25e9
    with pytest.raises(ValueError, match="expected a size"):
        parse_size("lots")
    args = Namespace(m=3000, n=2000, k=1000, workers=3, worker_memory="1GiB",
                     link_bandwidth="5GB/s", dtype="float64", backend="auto",
                     kernel="auto")  # fmt: skip
    p = plan_from_args(args)
    assert p.cluster.workers == 3 and p.cluster.link_bandwidth == 5e9 and p.dtype == "float64"
    assert p.fits and p.bytes_moved > 0 and "3 worker(s)" in str(p)


# --------------------------------------------------------------------------- inputs on the host


@pytest.mark.parametrize(
    "m,n,k,ca,cb,rechunk",
    [
        (67, 45, 91, (20, 30), (30, 17), False),  # odd chunks kept: 3 K chunks streamed
        (67, 45, 91, (67, 91), (91, 45), (23, 11, 13)),  # odd chunks chosen
        (33, 1, 40, (10, 7), (7, 1), "auto"),  # the planner's chunks
        (40, 30, 2100, (40, 1024), (1024, 30), False),  # K chunks led by 128, 256, 512
    ],
)
def test_from_host_staged_on_local_cluster(client, tmp_path, m, n, k, ca, cb, rechunk):
    a, b = rand((m, k), np.float64), rand((k, n), np.float64)
    path = tmp_path / "b.npy"
    np.save(path, b)
    x, y = td.from_host(a, ca), td.from_host(str(path), cb)  # an array, and a .npy path
    assert np.array_equal(x.compute(), a)  # ordinary chunks: loaded by the workers
    plan = td.explain(x, y, rechunk=rechunk)
    assert plan.placement == "staged" and "staged by each worker" in str(plan)
    c = td.matmul(x, y, rechunk=rechunk)
    assert c.shape == (m, n) and c.dtype == np.float64
    if isinstance(rechunk, tuple):
        assert c.chunks[0][0] == rechunk[0] and plan.chunks == rechunk
    np.testing.assert_allclose(c.compute(), a @ b, rtol=1e-12, atol=1e-12)
    workers = td.Cluster(workers=2, link_bandwidth=1e9, inputs="workers")
    plain = td.matmul(x, y, cluster=workers, rechunk=False)  # the ordinary blockwise graph
    np.testing.assert_allclose(plain.compute(), a @ b, rtol=1e-12, atol=1e-12)
    td.release(x)


def test_planner_weighs_the_two_links():
    kw = dict(workers=2, worker_memory=140 * 2**30, task_overhead=1e-3, inputs="any",
              flops_per_worker=44e12, backend="numpy")  # fmt: skip
    slow_workers = cluster_plan(32768, 32768, 32768, link_bandwidth=1.2e9, host_bandwidth=20e9,
                                **kw)  # fmt: skip
    assert slow_workers.placement == "staged"
    assert slow_workers.to_dict()["placement_text"].startswith("inputs start on the host")
    assert "replicated" in slow_workers.replication  # one operand whole on every worker
    other = [p for name, p in slow_workers.alternatives if p.placement == "workers"]
    assert other and other[0].predicted_seconds > slow_workers.predicted_seconds
    assert slow_workers.link_seconds == pytest.approx(slow_workers.bytes_moved / 2 / 20e9)
    fast_workers = cluster_plan(32768, 32768, 32768, link_bandwidth=200e9, host_bandwidth=2e9,
                                **kw)  # fmt: skip
    assert fast_workers.placement == "workers" and "between workers" in str(fast_workers)
    fixed = td.Cluster(workers=2, link_bandwidth=1e9, host_bandwidth=50e9, inputs="workers")
    assert cluster_plan(4096, 4096, 4096, cluster=fixed, backend="numpy").placement == "workers"
    with pytest.raises(ValueError, match="inputs must be"):
        td.Cluster(inputs="cloud")


def test_staged_time_terms(monkeypatch):
    """Staged on 2 workers: compute and the host->device copy overlap; the first K chunk's load,
    the tasks and the call's fixed overhead add; C's copy to the host is reported apart. The
    workers are GPU-like whatever this machine is: the measured rate as it is and 2 TB/s for
    adding partial products (from the numpy backend's model of this CPU, the K-chunk sums alone
    took 6 s on a 2-core Xeon, enough to flip the bound)."""
    from tiledmm.dask import cluster_model

    monkeypatch.setattr(cluster_model, "_chunk_seconds", lambda m, n, k, *a: 2 * m * n * k / 1e12)
    monkeypatch.setattr(cluster_model, "_device_bandwidth", lambda *a: 2e12)
    cl = td.Cluster(workers=2, worker_memory=140 * 2**30, host_bandwidth=15e9, link_bandwidth=1e9,
                    task_overhead=1e-3, call_overhead=0.02, inputs="staged")  # fmt: skip
    p = cluster_plan(32768, 32768, 32768, cluster=cl, chunks=(32768, 16384, 2048),
                     flops_per_worker=40e12, backend="numpy")  # fmt: skip
    assert p.tasks == 2 and p.link_seconds == pytest.approx(4 * 32768 * (32768 + 16384) / 15e9)
    first = 4 * 256 * (32768 + 16384) / 15e9  # the K chunks are led by ck/8, ck/4, ck/2
    assert [b - a for a, b in td.k_bounds(32768, 2048)][:4] == [256, 512, 1024, 2048]
    assert p.overhead_seconds == pytest.approx(2e-3 + 0.02)
    assert p.predicted_seconds == pytest.approx(
        max(p.compute_seconds, p.link_seconds) + first + p.overhead_seconds
    )
    assert p.result_seconds == pytest.approx(4 * 32768 * 16384 / 15e9)
    slow = cluster_plan(32768, 32768, 32768, cluster=cl, chunks=(32768, 16384, 2048),
                        flops_per_worker=40e12, backend="numpy", host_bandwidth=1e9)  # fmt: skip
    assert slow.bound == "link" and slow.link_seconds > slow.compute_seconds
    chunk = slow.compute_seconds * 2048 / 32768  # one product: the loads show, products hide
    base = slow.link_seconds + slow.overhead_seconds
    assert base < slow.predicted_seconds < base + 2 * chunk
    assert "to the host: +" in str(p) and p.to_dict()["result_seconds"] == p.result_seconds


def test_bench_writes_rows_as_it_goes(tmp_path, monkeypatch):
    import json

    from tiledmm.bench import dask_bench

    seen = []
    add = dask_bench._Rows.add

    def spy(self, info, times, pred):
        add(self, info, times, pred)
        doc = json.loads(self.path.read_text())
        seen.append(len(doc["benchmarks"]))
        assert doc["benchmarks"][-1]["extra_info"]["inputs"] == info["inputs"]

    monkeypatch.setattr(dask_bench._Rows, "add", spy)
    args = dask_bench.build_parser().parse_args(
        ["--device", "cpu", "--sizes", "96x80x112", "--reps", "1", "--alternatives", "1",
         "--vendor", "rows", "--host-bandwidth", "1e12", "-o", str(tmp_path), "--name", "q"]
    )  # fmt: skip
    assert dask_bench.bench_dask(args) == 0
    assert seen == [1, 2, 3, 4]  # one device, the plan, one alternative, dask.array.matmul
    rows = json.loads((tmp_path / "q.json").read_text())["benchmarks"]
    cluster_rows = [r["extra_info"] for r in rows[1:]]
    ours = [r for r in cluster_rows if r["engine"] == "tiledmm"]
    assert len(ours) == 2 and all(r["predicted_seconds"] > 0 for r in ours)
    assert all(r["seconds"] > 0 and r["inputs"] in ("host", "workers") for r in cluster_rows)
    assert cluster_rows[-1]["engine"] == "dask-numpy" and cluster_rows[-1]["chunks"][2] == 112
    assert max(r["rel_error"] for r in cluster_rows) < 1e-5
    staged = [r for r in ours if r["placement"] == "staged"]
    assert staged and all(r["phases"]["outside_tasks"] >= 0 for r in staged)
    assert all(0 < r["phases"]["graph"] < r["seconds"] for r in cluster_rows)
    for r in staged:  # every output block was computed once, by some worker, and timed
        work = [w for k, w in r["phases"].items() if k.startswith("w") and w["tasks"]]
        assert sum(w["tasks"] for w in work) == math.prod(
            -(-d // c) for d, c in zip((96, 80), r["chunks"][:2], strict=True)
        )
        assert all(w["product"] > 0 and w["busy"] <= r["seconds"] for w in work)


class _Client:
    """A distributed client stand-in whose scheduler has no workers until it is waited on."""

    def __init__(self, arrive: bool):
        self.arrive, self.workers, self.waited = arrive, {}, []

    def scheduler_info(self):
        return {"workers": self.workers}

    def wait_for_workers(self, n, timeout=None):
        self.waited.append((n, timeout))
        if not self.arrive:
            raise TimeoutError("no worker came")
        self.workers = {"tcp://w1": {"memory_limit": 2**30}, "tcp://w2": {"memory_limit": 2**30}}


def test_current_cluster_waits_for_workers_that_are_starting():
    """A client whose workers are (re)starting: planning waits for one instead of failing (CI
    once caught the scheduler with none, between a nanny's restart and the next test)."""
    c = _Client(arrive=True)
    cl = td.current_cluster(c)
    assert cl.workers == 2 and c.waited == [(1, dask_product.WORKER_WAIT_S)]
    with pytest.raises(RuntimeError, match="no workers .*cluster=tiledmm.dask.Cluster"):
        td.current_cluster(_Client(arrive=False))
