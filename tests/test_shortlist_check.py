"""The model-as-shortlister check (issue 37): its default logs, and the criterion it prints (a
candidate within 5% of the measured best in the model's top k for 90% of the tasks), on a
synthetic log whose answer is known."""

from __future__ import annotations

import json

import pytest

from tiledmm import Geometry
from tiledmm.device.nvidia import reference_h200
from tiledmm.planner.make import make_plan
from tiledmm.tune import first_use
from tiledmm.tune import shortlist_check as sc

M = N = K = 2048
# register tiles without the shared sources' options: shapefit leaves them as they are, and
# the reference H200 gives each its own prediction
TILES = [((bm, bn, bk), (tm, tn)) for bm, bn, bk, tm, tn in (
    (128, 128, 8, 8, 8), (128, 64, 8, 8, 8), (256, 64, 8, 8, 8), (64, 64, 8, 8, 8),
    (128, 128, 16, 8, 8), (64, 64, 8, 4, 4), (32, 32, 8, 4, 4), (32, 64, 8, 4, 4),
    (128, 32, 8, 8, 4), (32, 32, 8, 2, 2), (16, 16, 8, 2, 2),
)]  # fmt: skip


def _ranked(dev, task: str, family: str = "register") -> list[dict]:
    """One record per tile of TILES, fastest predicted first (no gflops yet)."""
    out = []
    for bt, tt in TILES:
        g = Geometry(bt, tt)
        plan = make_plan(M, N, K, dtype="float32", kernel=family, device=dev, geometry=g,
                         backend="cupy")  # fmt: skip
        out.append((plan.predicted_seconds, dict(task=task, geometry=g.key(), family=family,
                                                 shape=[1, M, N, K], status="ok")))  # fmt: skip
    preds = [p for p, _ in out]
    assert len(set(preds)) == len(preds), "the test needs distinct predictions"
    return [r for _, r in sorted(out, key=lambda x: x[0])]


def _log(dev) -> list[dict]:
    """Three tasks with known answers for k = 6 (the model's order is TILES' predicted order):
    a: the best is 9th, the model's top 6 reach 0.96 of it (within 5%: passes);
    b: the best is 8th, the top 6 reach 0.90 (fails; top 8 holds the best);
    c: four candidates only, the best last (passes: k covers them all)."""
    recs = []
    a = _ranked(dev, "float32|register|1x2048x2048x2048|a")
    for i, r in enumerate(a):  # model position i+1
        recs.append(dict(r, gflops={8: 100.0, 2: 96.0}.get(i, 50.0 + i)))
    b = _ranked(dev, "float32|register|1x2048x2048x2048|b")
    for i, r in enumerate(b):
        recs.append(dict(r, gflops={7: 100.0, 0: 90.0}.get(i, 40.0 + i)))
    c = _ranked(dev, "float32|register|1x2048x2048x2048|c")[:4]
    for i, r in enumerate(c):
        recs.append(dict(r, gflops=10.0 + i))
    return recs


def test_default_logs_are_the_committed_tuner_logs():
    """With no argument the check reads every committed tuner log (the move to tiledmm/tune/
    once left it looking under tiledmm/ and finding none)."""
    logs = sc.default_logs()
    assert len(logs) >= 11 and all(p.is_file() for p in logs)
    assert {"h200-tune-coldstart-cupy.jsonl", "xeon-tune-coldstart-s7-opencl.jsonl"} <= {
        p.name for p in logs
    }


def test_criterion_on_a_synthetic_log(tmp_path):
    dev = reference_h200()
    log = tmp_path / "h200-tune-synthetic-cupy.jsonl"
    log.write_text("\n".join(map(json.dumps, _log(dev))) + "\n")
    res = sc.check_log(log, dev, "cupy", (6,))
    a, b, c = (res["tasks"][f"float32|register|1x2048x2048x2048|{x}"] for x in "abc")
    assert a["position"] == 9 and a["hit"][8] == 0 and a["hit"][6] == 0
    assert a["reach"][6] == pytest.approx(0.96) and a["within"][6] == 1.0
    assert a["reach"][1] == pytest.approx(0.5) and a["within"][2] == 0.0
    assert a["within"][3] == 1.0  # 0.96 is the model's third
    assert b["position"] == 8 and b["reach"][6] == pytest.approx(0.90)
    assert b["within"][6] == 0.0 and b["within"][7] == 0.0 and b["within"][8] == 1.0
    assert c["candidates"] == 4 and c["within"][6] == 1.0 and c["within"][1] == 0.0
    crit = sc.criterion(list(res["tasks"].values()), 6)
    assert crit["tasks"] == 3 and crit["passed"] == 2.0
    assert crit["fraction"] == pytest.approx(2 / 3) and not crit["meets"]
    assert crit["ranked"] == 2 and crit["ranked_passed"] == 1.0
    crit8 = sc.criterion(list(res["tasks"].values()), 8)
    assert crit8["passed"] == 3.0 and crit8["meets"]


def test_main_prints_the_criterion_at_first_uses_shortlist_size(tmp_path, capsys, monkeypatch):
    dev = reference_h200()
    log = tmp_path / "h200-tune-synthetic-cupy.jsonl"
    log.write_text("\n".join(map(json.dumps, _log(dev))) + "\n")
    monkeypatch.delenv(first_use.SIZE, raising=False)
    assert sc.main([str(log)]) == 0
    out = capsys.readouterr().out
    assert f"model's top {first_use.SHORTLIST} (first use's short list)" in out
    assert line_of(out, log.name)[1:5] == ["3", "2", "67%", "short"]
    monkeypatch.setenv(first_use.SIZE, "8")
    assert sc.main([str(log)]) == 0
    assert line_of(capsys.readouterr().out, log.name)[1:5] == ["3", "3", "100%", "meets"]


def line_of(out: str, name: str) -> list[str]:
    """The words of ``name``'s line in the criterion's table (after its heading)."""
    table = out.split("issue 37's criterion", 1)[1]
    return next(x.split() for x in table.splitlines() if x.strip().startswith(name))


def test_retime_keeps_the_median_of_the_log_and_new_passes(tmp_path):
    """`python -m tiledmm.tune.retime` times a log's correct candidates again (the NumPy
    backend here, a small odd product) and records the median of the logged rate and each
    pass's; failed candidates are left out, and the result reads as a tuner log."""
    from tiledmm.tune import retime

    shape = [1, 37, 29, 41]
    log = tmp_path / "tiny-numpy.jsonl"
    recs = [dict(task="float32|register|1x37x29x41", geometry=Geometry(bt, (1, 1)).key(),
                 family="register", shape=shape, cls="odd", status="ok", gflops=g)
            for bt, g in (((16, 16, 16), 1e-9), ((32, 32, 32), 1e9))]  # fmt: skip
    recs.append(dict(recs[0], geometry=Geometry((8, 8, 8), (1, 1)).key(), status="wrong result"))
    log.write_text("".join(json.dumps(r) + "\n" for r in recs))
    out = tmp_path / "retimed-numpy.jsonl"
    assert retime.main([str(log), "--backend", "numpy", "--passes", "2", "--rounds", "1",
                        "--out", str(out)]) == 0  # fmt: skip
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 2
    low, high = rows
    # three samples each: the logged one and two passes; the median drops the absurd log rate
    assert len(low["gflops_samples"]) == len(high["gflops_samples"]) == 3
    assert 1e-9 < low["gflops"] < 1e9 and 1e-9 < high["gflops"] < 1e9
    assert low["seconds"] * low["gflops"] == pytest.approx(2 * 37 * 29 * 41 / 1e9)
    assert sc.check_log(out, sc.device_from_record(_host_record()))["tasks"] is not None


def _host_record() -> dict:
    from tiledmm.device.host import host_cpu

    return host_cpu().to_dict()
