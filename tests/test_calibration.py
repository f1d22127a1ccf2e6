"""The calibration cache is validated: a corrupt file or record is ignored with one warning
that says why, plans and matmul keep working on estimated ceilings, `tiledmm calibrate` repairs
it."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import warnings
from pathlib import Path

import numpy as np
import pytest

import tiledmm
from tiledmm import cli
from tiledmm.device.calibration import CalibrationWarning, load_calibration, save_calibration
from tiledmm.tune import calibrate

GOOD = {"peak_flops": {"float32": 2e11, "float64": 1e11}, "bandwidth": 3e10, "date": "2026-01-01"}


def _record(**change) -> dict:
    rec = json.loads(json.dumps(GOOD))
    for key, value in change.items():
        if value is _DROP:
            rec.pop(key)
        else:
            rec[key] = value
    return rec


_DROP = object()
HOST = tiledmm.host_cpu().name

# (file text, what the warning must say); each is valid for json.loads or deliberately not
CORRUPT_FILES = {
    "list": ("[]", "JSON list"),
    "null": ("null", "JSON NoneType"),
    "string": ('"calibrated"', "JSON str"),
    "number": ("42", "JSON int"),
    "not json": ("{oops", "not valid JSON"),
    "empty": ("", "not valid JSON"),
    "binary": (b"\xff\xfe\x00", "cannot be read"),
}
CORRUPT_RECORDS = {
    "record is a list": ([], "list, not an object"),
    "record is null": (None, "NoneType"),
    "bandwidth missing": (_record(bandwidth=_DROP), "bandwidth is missing"),
    "bandwidth a string": (_record(bandwidth="30 GB/s"), "bandwidth is '30 GB/s'"),
    "bandwidth NaN": (_record(bandwidth=math.nan), "bandwidth is nan"),
    "bandwidth zero": (_record(bandwidth=0), "bandwidth is 0"),
    "bandwidth bool": (_record(bandwidth=True), "bandwidth is True"),
    "peak negative": (_record(peak_flops={"float32": -1e11}), "peak_flops['float32'] is -1"),
    "peak infinite": (_record(peak_flops={"float32": math.inf}), "is inf"),
    "peak zero": (_record(peak_flops={"float32": 0.0}), "is 0.0"),
    "peaks a list": (_record(peak_flops=[1e11]), "peak_flops is missing"),
    "peaks empty": (_record(peak_flops={}), "peak_flops is missing"),
    "peaks missing": (_record(peak_flops=_DROP), "peak_flops is missing"),
    "date a number": (_record(date=20260101), "date is 20260101"),
}


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TILEDMM_CACHE_DIR", str(tmp_path))
    return tmp_path / "calibration.json"


def _plans_and_matmul_work() -> None:
    dev = tiledmm.host_cpu()
    assert not dev.ceilings_measured and dev.bandwidth > 0
    assert all(v > 0 and math.isfinite(v) for _, v in dev.peak_flops)
    p = tiledmm.plan(33, 17, 9, backend="numpy", kernel="tiled")
    assert 0 < p.predicted_seconds < math.inf
    rng = np.random.default_rng()
    a, b = rng.random((5, 7)), rng.random((7, 3))
    np.testing.assert_allclose(tiledmm.matmul(a, b, backend="numpy"), a @ b, rtol=1e-12)


def _write(path: Path, text: str | bytes) -> None:
    path.write_bytes(text if isinstance(text, bytes) else text.encode())


@pytest.mark.parametrize("case", CORRUPT_FILES)
def test_corrupt_file_is_ignored_with_one_warning(cache: Path, case: str) -> None:
    text, why = CORRUPT_FILES[case]
    _write(cache, text)
    with pytest.warns(CalibrationWarning, match="ignored, because") as rec:
        _plans_and_matmul_work()
    assert len(rec) == 1, [str(w.message) for w in rec]
    msg = str(rec[0].message)
    assert why in msg and "tiledmm calibrate" in msg and str(cache) in msg
    with warnings.catch_warnings():  # the same file state warns once, not on every plan
        warnings.simplefilter("error")
        _plans_and_matmul_work()


@pytest.mark.parametrize("case", CORRUPT_RECORDS)
def test_corrupt_record_is_ignored(cache: Path, case: str) -> None:
    bad, why = CORRUPT_RECORDS[case]
    cache.write_text(json.dumps({HOST: bad}))  # NaN/inf written as JSON's NaN/Infinity
    with pytest.warns(CalibrationWarning, match="ignored") as rec:
        _plans_and_matmul_work()
    assert len(rec) == 1
    assert why in str(rec[0].message) and repr(HOST) in str(rec[0].message)


def test_bad_record_does_not_hide_good_ones(cache: Path) -> None:
    cache.write_text(json.dumps({"Other CPU": _record(bandwidth=-1), HOST: GOOD}))
    with pytest.warns(CalibrationWarning, match="'Other CPU' is ignored: bandwidth is -1"):
        dev = tiledmm.host_cpu()
    assert dev.ceilings_measured and dev.bandwidth == 3e10 and dev.peak("float32") == 2e11
    assert set(load_calibration()) == {HOST}


def test_save_rejects_an_invalid_record_and_repairs_the_file(cache: Path) -> None:
    with pytest.raises(ValueError, match="bandwidth is nan"):
        save_calibration(HOST, _record(bandwidth=math.nan))
    assert not cache.exists()
    cache.write_text(json.dumps({"Other CPU": "junk", "Third CPU": GOOD}))
    save_calibration(HOST, GOOD)
    assert json.loads(cache.read_text()) == {"Third CPU": GOOD, HOST: GOOD}


def test_per_backend_probes_survive_another_backends_calibration(cache: Path) -> None:
    """Several backends share the host's record: numba-cpu's register loop costs and PoCL's
    accumulator count stay when the other backend calibrates afterwards (each record holds only
    its own probe), and both reach the host's spec; a loop cost that is not two positive
    seconds is refused with the reason."""
    loop = {"step": 3.7e-8, "column": 9.5e-10}
    save_calibration(HOST, _record(loop_costs={"numba-cpu": loop}))
    save_calibration(HOST, _record(fma_accumulators=10))
    saved = json.loads(cache.read_text())[HOST]
    assert saved["loop_costs"] == {"numba-cpu": loop} and saved["fma_accumulators"] == 10
    save_calibration(HOST, _record(loop_costs={"numba-cpu": {"step": 4e-8, "column": 1e-9}}))
    saved = json.loads(cache.read_text())[HOST]
    assert saved["loop_costs"]["numba-cpu"]["step"] == 4e-8 and saved["fma_accumulators"] == 10
    dev = tiledmm.host_cpu()
    assert dev.loop_cost("numba-cpu") == (4e-8, 1e-9) and dev.fma_accumulators == 10
    assert dev.loop_cost("opencl") is None
    with pytest.raises(ValueError, match="loop_costs\\['numba-cpu'\\]"):
        save_calibration(HOST, _record(loop_costs={"numba-cpu": {"step": -1.0, "column": 1e-9}}))


@pytest.mark.parametrize("text", ["[]", "null", json.dumps({HOST: {"peak_flops": 1}})])
def test_calibrate_repairs_a_corrupt_cache(
    cache: Path, text: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    cache.write_text(text)
    monkeypatch.setitem(calibrate._SIZES, ("cpu", True), (48,))
    monkeypatch.setitem(calibrate._COPY_BYTES, ("cpu", True), 1 << 18)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CalibrationWarning)
        assert cli.main(["calibrate", "--quick"]) == 0
    assert str(cache) in capsys.readouterr().out
    saved = json.loads(cache.read_text())
    assert list(saved) == [HOST] and saved[HOST]["bandwidth"] > 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tiledmm.host_cpu().ceilings_measured


def test_cache_dir_below_a_regular_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv("TILEDMM_CACHE_DIR", str(blocker / "cache"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _plans_and_matmul_work()  # nothing to read: estimates, silently
    with pytest.raises(OSError, match="TILEDMM_CACHE_DIR"):
        next(calibrate.calibrate("numpy", quick=True))


# ----------------------------------------------------------------------- GPU level probes


def test_stream_layout_rounds_to_whole_unrolled_steps():
    step = calibrate.PROBE_THREADS * calibrate.PROBE_UNROLL
    for nbytes in (15 << 20, 240 << 20, 1 << 10):
        chunk, chunks = calibrate.stream_layout(nbytes, 1056)
        assert chunks == 1056 and chunk % step == 0 and chunk >= step
        if nbytes > 1 << 20:
            assert abs(chunk * chunks * 16 - nbytes) <= chunks * step * 16


class _ProbeRecorder(tiledmm.Backend):
    """A backend whose probes take known times: measure_gpu_levels must turn the launches it
    makes into bytes (or FLOPs) over those times."""

    name = "probe-recorder"
    kernels = ("naive",)

    def __init__(self, seconds: dict[str, float]) -> None:
        self.seconds, self.launches, self.current = seconds, [], None

    def run(self, plan, a, b, out):  # pragma: no cover - never planned
        raise NotImplementedError

    def device(self):
        return tiledmm.DeviceSpec(name="fake gpu", kind="gpu", compute_units=3,
                                  caches=(("L2", 4 << 20),))  # fmt: skip

    def compile_probe(self, kernel, defines, source=None):
        assert source is None and defines["THREADS"] == calibrate.PROBE_THREADS

        def launch(groups, args):
            self.launches.append((kernel, defines["REAL_BYTES"], groups, args))
            self.current = kernel

        return launch

    def timings(self, fn, *, repeat=10, warmup=2):
        fn()
        return [self.seconds[self.current]] * repeat


def test_measure_gpu_levels_counts_what_the_probes_read():
    be = _ProbeRecorder({"stream_probe": 1e-3, "shared_probe": 2e-3, "fma_probe": 4e-3})
    got = calibrate.measure_gpu_levels(be, quick=False)
    groups = 3 * calibrate.PROBE_GROUPS_PER_UNIT
    streams = [a for k, _, g, a in be.launches if k == "stream_probe"]
    assert len(streams) == 2 and all(g == groups for k, _, g, _ in be.launches)
    for level, args in zip(("DRAM", "L2"), streams, strict=True):
        chunk, chunks, reps, src = int(args[0]), int(args[1]), int(args[2]), args[3]
        assert chunks == groups and src.size == chunk * chunks * 4  # 16-byte vectors
        assert got["levels"][level] == pytest.approx(reps * chunk * chunks * 16 / 1e-3)
    dram_bytes, l2_bytes = (int(a[0]) * int(a[1]) * 16 for a in streams)
    assert dram_bytes > (4 << 20) * 3 and l2_bytes < (4 << 20) / 2  # beyond / inside the L2
    items = groups * calibrate.PROBE_THREADS
    shared = items * calibrate.SHARED_REPS * calibrate.PROBE_UNROLL * 16 / 2e-3
    assert got["levels"]["shared memory"] == pytest.approx(shared)
    fma = items * calibrate.FMA_REPS * 16 / 4e-3
    assert got["fma_peaks"] == pytest.approx({"float32": fma, "float64": fma})
    assert {rb for k, rb, _, _ in be.launches if k == "fma_probe"} == {4, 8}


def _cuobjdump() -> str | None:
    """cuobjdump on PATH, else beside nvcc or in the nvidia wheels of a Python environment."""
    found = shutil.which("cuobjdump")
    if found or not shutil.which("nvcc"):
        return found
    wheels = Path("/tmp").glob("*/lib/python3*/site-packages/nvidia/cu*/bin")
    for root in (Path(shutil.which("nvcc")).resolve().parent, *wheels):
        if (root / "cuobjdump").exists():
            return str(root / "cuobjdump")
    return None


@pytest.mark.skipif(_cuobjdump() is None, reason="nvcc and cuobjdump not installed")
@pytest.mark.parametrize("real_bytes", [4, 8])
def test_probes_compile_to_16_byte_loads_in_a_loop(real_bytes, tmp_path):
    """The probes as CuPy compiles them (header inlined, defines first), built by nvcc for
    sm_90: the stream probe's loads are LDG.E.128 and the shared probe's LDS.128, each in a
    loop (a backward branch after them), so neither level is measured by scalar loads or a
    folded loop."""
    from tiledmm_backends.kernels.probe import probe_source

    defs = {"REAL_BYTES": real_bytes, "THREADS": 256, "PROBE_UNROLL": calibrate.PROBE_UNROLL}
    (tmp_path / "p.cu").write_text(probe_source(calibrate._probe_source(), defs))
    cubin = tmp_path / "p.cubin"
    subprocess.run(["nvcc", "-arch=sm_90", "-cubin", "-o", str(cubin), str(tmp_path / "p.cu")],
                   check=True, capture_output=True, timeout=180)  # fmt: skip
    sass = subprocess.run([_cuobjdump(), "-sass", str(cubin)], check=True,
                          capture_output=True, text=True).stdout  # fmt: skip
    funcs = dict(re.findall(r"Function : (\w+)\n(.*?)(?=\n\s+Function : |\Z)", sass, re.S))
    for name, load, plain in (("stream_probe", "LDG.E.128", "LDG.E "),
                              ("shared_probe", "LDS.128", "LDS ")):  # fmt: skip
        body = funcs[name]
        assert body.count(load) >= calibrate.PROBE_UNROLL, name
        assert plain not in body, name  # no scalar loads
        code = [(int(a, 16), ins) for a, ins in re.findall(r"/\*([0-9a-f]{4})\*/\s+([^;]*);", body)]
        loads = [a for a, ins in code if load in ins]
        back = [(a, int(t, 16)) for a, ins in code for t in re.findall(r"BRA (0x[0-9a-f]+)", ins)]
        # a backward branch from after a load to at or before it: the loads run in a loop
        assert any(t <= x < a for a, t in back for x in loads), name


def test_bandwidth_copy_uses_each_array_kinds_device_copy():
    """The copy the bandwidth probe times: NumPy in place, a CuPy-style buffer by a raw
    device-to-device copy, numba-cuda's DeviceNDArray by ``copy_to_device`` (it has no
    ``copy()``: ``tiledmm calibrate --backend numba-cuda`` failed on the H100, session 20),
    anything else by its own ``copy()``."""
    import types

    from tiledmm.tune.calibrate import _copy_fn

    src, dst = np.arange(8.0), np.zeros(8)
    _copy_fn(src, dst)()
    assert (dst == src).all()
    calls = []

    class NumbaLike:
        def copy_to_device(self, other):
            calls.append(("copy_to_device", other))

    s = object()
    _copy_fn(s, NumbaLike())()
    assert calls == [("copy_to_device", s)]
    buf = types.SimpleNamespace(copy_from_device_async=lambda d, n: calls.append(("raw", n)))
    _copy_fn(types.SimpleNamespace(data="src", nbytes=64), types.SimpleNamespace(data=buf))()
    assert calls[-1] == ("raw", 64)
    other = types.SimpleNamespace(copy=lambda: calls.append(("copy",)))
    _copy_fn(other, object())()
    assert calls[-1] == ("copy",)


def test_loop_probe_separates_a_k_steps_cost_from_its_columns(cache: Path) -> None:
    """numba-cpu's ``register_block`` probe timed at a narrow and a wide micro-tile gives both
    costs positive; a backend without the probe (numpy) gives None at once."""
    pytest.importorskip("tiledmm_numba_cpu")
    from tiledmm.tune.loop_probe import measure_loop_costs

    cost = measure_loop_costs(tiledmm.get_backend("numba-cpu"), quick=True)
    assert cost is not None and cost["step"] > 0 and cost["column"] > 0
    assert measure_loop_costs(tiledmm.get_backend("numpy"), quick=True) is None


def test_calibrating_numba_cpu_records_its_loop_costs(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("tiledmm_numba_cpu")
    monkeypatch.setitem(calibrate._SIZES, ("cpu", True), (48,))
    monkeypatch.setitem(calibrate._COPY_BYTES, ("cpu", True), 1 << 18)
    [(name, rec, _)] = list(calibrate.calibrate("numba-cpu", quick=True))
    assert set(rec["loop_costs"]) == {"numba-cpu"}
    assert tiledmm.host_cpu().loop_cost("numba-cpu") == tuple(
        rec["loop_costs"]["numba-cpu"][k] for k in ("step", "column")
    )


def test_cpu_levels_drop_a_level_no_faster_than_the_kept_one_behind_it(monkeypatch) -> None:
    """A cache level whose copy measured no faster than the nearest *kept* level behind it is
    dropped (the planner keeps its estimate): in a session-24 EPYC calibration the L2 copy
    came out below the L3's, was dropped, and the L1 copy (8.9 GB/s: NumPy's per-call cost,
    not the cache) was then compared with nothing and kept, pricing every L1 access at it."""
    rates = iter([8.9e9, 40e9, 51.7e9])  # L1, L2, L3 bytes/s, as measured

    class Clock:
        t = 0.0

    def fake_perf_counter():
        return Clock.t

    def fake_copyto(dst, src):
        Clock.t += 2 * src.nbytes / current[0]

    current = [0.0]
    real_ones = np.ones

    def ones(n, dtype):  # each level's buffers: its rate for the copies that follow
        current[0] = next(rates)
        return real_ones(n, dtype)

    monkeypatch.setattr("time.perf_counter", fake_perf_counter)
    monkeypatch.setattr(calibrate.np, "copyto", fake_copyto)
    monkeypatch.setattr(calibrate.np, "ones", ones)
    caches = {"L1": 32 << 10, "L2": 512 << 10, "L3": 32 << 20}
    out = calibrate.measure_cpu_levels(caches, quick=True, cores=1, dram=30e9)
    assert out == pytest.approx({"L3": 51.7e9})
