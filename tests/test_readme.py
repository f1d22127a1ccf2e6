"""The README's quickstart is what CI runs."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def quickstart_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    return [line.strip() for line in section.splitlines() if line.startswith("    ")]


def test_quickstart_has_exactly_two_commands():
    cmds = quickstart_commands()
    assert len(cmds) == 2, cmds
    assert "tiledmm bench --quick" in cmds[0]
    assert "pytest" in cmds[1]


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()
    assert ci[-1].strip() == quickstart_commands()[1]


def test_readme_results_table_is_regenerated_from_committed_files(tmp_path):
    from tiledmm.report.render import README_BEGIN, README_END, headline_markdown, render

    files = sorted(str(p) for p in (ROOT / "benches" / "results").glob("*.json"))
    text = render(files, tmp_path, figures=False)
    readme = (ROOT / "README.md").read_text()
    block = readme.split(README_BEGIN, 1)[1].split(README_END, 1)[0].strip() + "\n"
    assert block == headline_markdown(text), (
        "run: tiledmm report benches/results/*.json -o docs/results --readme README.md"
    )
