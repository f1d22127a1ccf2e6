"""The CLI checks every numeric and list argument before anything runs (issue 40): a zero, a
negative or an empty value is one line on stderr naming the argument and exit status 2, never a
silent default; a results name is a file name inside the output folder."""

from __future__ import annotations

import types

import pytest

from tiledmm import cli
from tiledmm.bench import results

BAD = [
    (["plan", "64", "64", "64", "--workers", "0"], "--workers", "positive integer"),
    (["plan", "64", "64", "64", "--workers", "-3"], "--workers", "positive integer"),
    (["plan", "64", "-1", "64"], "n", "non-negative integer"),
    (["plan", "64", "64", "x"], "k", "integer"),
    (["plan", "64", "64", "64", "--workers", "2", "--worker-memory", "0GB"], "--worker-memory",
     "positive size"),
    (["plan", "64", "64", "64", "--workers", "2", "--link-bandwidth", "fast"], "--link-bandwidth",
     "expected a size"),
    (["bench", "--dask", "--workers", "0"], "--workers", "positive integer"),
    (["bench", "--dask", "--reps", "-1"], "--reps", "positive integer"),
    (["bench", "--dask", "--reps", "0"], "--reps", "positive integer"),
    (["bench", "--dask", "--link-bandwidth", "0"], "--link-bandwidth", "positive number"),
    (["bench", "--dask", "--worker-memory", "nan"], "--worker-memory", "positive number"),
    (["bench", "--sizes", ""], "--sizes", "no sizes"),
    (["bench", "--sizes", ",,"], "--sizes", "no sizes"),
    (["bench", "--sizes", "0"], "--sizes", "positive integers"),
    (["bench", "--sizes", "64,8x0x8"], "--sizes", "positive integers"),
    (["bench", "--seed", "-1"], "--seed", "non-negative integer"),
    (["bench", "--name", "../escaped"], "--name", "file name inside the output folder"),
    (["bench", "--name", "/some/dir/victim"], "--name", "file name inside the output folder"),
    (["bench", "--name", ""], "--name", "file name inside the output folder"),
    (["bench", "--name", ".."], "--name", "file name inside the output folder"),
    (["tune", "--shapes", ""], "--shapes", "names no shape"),
    (["tune", "--shapes", "0x0x0"], "--shapes", "zero size"),
    (["tune", "--shapes", "squares,tall"], "--shapes", "no shape class"),
    (["tune", "--size", "0"], "--size", "positive integer"),
    (["tune", "--size", "-1"], "--size", "positive integer"),
    (["tune", "--budget", "0"], "--budget", "more than 0 s"),
    (["tune", "--budget", "xyz"], "--budget", "use seconds or a duration"),
    (["tune", "--kernel", "fast"], "--kernel", "give 'all' or families"),
    (["tune", "--kernel", "register,"], "--kernel", "give 'all' or families"),
    (["tune", "--seed", "-2"], "--seed", "non-negative integer"),
]  # fmt: skip


@pytest.mark.parametrize("argv, name, why", BAD, ids=[" ".join(a) for a, _, _ in BAD])
def test_a_bad_argument_is_one_line_naming_it(capsys, argv, name, why):
    assert cli.main(argv) == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"tiledmm {argv[0]}: error: argument {name}"), err
    assert why in lines[0], err
    assert not out


def test_tune_checks_the_budget_before_the_backend(capsys):
    # the budget is parsed first: a backend without a search space is not what is reported
    assert cli.main(["tune", "--backend", "numpy", "--budget", "xyz"]) == 2
    err = capsys.readouterr().err
    assert "--budget" in err and "search space" not in err


def test_a_results_name_never_writes_outside_the_output_folder(tmp_path, capsys):
    out = tmp_path / "out"
    bench = ["bench", "--backend", "numpy", "--kernel", "naive", "--sizes", "8", "--quick",
             "--no-figures", "-o", str(out), "--name"]  # fmt: skip
    for name in ("../escaped", str(tmp_path / "victim")):
        assert cli.main([*bench, name]) == 2
    assert not (tmp_path / "escaped.json").exists() and not (tmp_path / "victim.json").exists()
    res = types.SimpleNamespace(benchmarks=[], backends=[], skipped=[], failures=[])
    for name in ("../escaped", "a/b", ".."):
        with pytest.raises(ValueError, match="not a file name inside"):
            results.write_results(res, out, name)
    (path,) = results.write_results(res, out, "mine.v2")
    assert path == out / "mine.v2.json"
    capsys.readouterr()
    assert cli.main([*bench, "run1.json"]) == 0
    assert (out / "run1.json").exists()


def test_plan_with_valid_cluster_arguments_still_works(capsys):
    assert cli.main(["plan", "256", "256", "256", "--workers", "2", "--worker-memory", "1GiB",
                     "--link-bandwidth", "5GB/s"]) == 0  # fmt: skip
    assert "2 worker(s)" in capsys.readouterr().out
    assert cli.main(["plan", "0", "64", "64"]) == 0  # an empty product plans (numpy's rules)
