"""Every ``pip install`` line of the README and the docs works as written, from the checkout's
root on a fresh machine (issue 39): tiledmm and its plugins are not on a package index, so
they go in as paths (``".[dask]"``, ``./plugins/...``, with the core beside a plugin, whose
``tiledmm>=0.1`` an index cannot satisfy); a path must exist and its extras be declared."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
        *sorted(ROOT.glob("plugins/*/README.md"))]  # fmt: skip
#: Paths that stand for the reader's own folder, not one of this checkout's.
PLACEHOLDERS = {"./my-plugin"}
OURS = {"tiledmm", "tiledmm-numba-cpu", "tiledmm-example"}  # on no index
_LINE = re.compile(r"pip install ([^`#&|\n]+)")


def install_lines() -> list[tuple[str, list[str]]]:
    """(where, requirements) for every ``pip install`` in the README, docs and plugin READMEs."""
    found = []
    for doc in DOCS:
        for n, line in enumerate(doc.read_text().splitlines(), 1):
            for m in _LINE.finditer(line):
                words = shlex.split(m.group(1).strip().rstrip(")").strip())
                reqs = [w for w in words if not w.startswith("-")]
                found.append((f"{doc.relative_to(ROOT)}:{n}", reqs))
    return found


def _extras(project: Path) -> set[str]:
    meta = tomllib.loads((project / "pyproject.toml").read_text())["project"]
    return set(meta.get("optional-dependencies", {}))


def problems(where: str, reqs: list[str]) -> list[str]:
    out = []
    paths = [r for r in reqs if r.startswith((".", "/")) or r.startswith("plugins/")]
    for req in reqs:
        if req in PLACEHOLDERS:
            continue
        path, _, extras = req.partition("[")
        if req in paths:
            project = (ROOT / path).resolve()
            if not (project / "pyproject.toml").exists():
                out.append(f"{where}: {req!r} is no project folder of this checkout")
                continue
            unknown = {e.strip() for e in extras.rstrip("]").split(",") if e.strip()}
            unknown -= _extras(project)
            if unknown:
                out.append(f"{where}: {req!r}: no extra {sorted(unknown)} in {path}")
            if project != ROOT and not any(p.split("[")[0] in (".", "./") for p in paths):
                out.append(f"{where}: {req!r} needs tiledmm, on no index: install '.' with it")
        elif re.split(r"[\[<>=!~; ]", req, maxsplit=1)[0].lower() in OURS:
            out.append(f"{where}: {req!r} is on no package index; from the checkout use a path")
    return out


def test_every_install_line_works_from_a_checkout() -> None:
    lines = install_lines()
    assert len(lines) >= 8, lines  # the README's quickstart and backends, docs/dask.md, ...
    bad = [p for where, reqs in lines for p in problems(where, reqs)]
    assert not bad, "\n".join(bad)


def test_the_check_catches_what_a_new_user_hit() -> None:
    assert problems("x", ["tiledmm[dask]"]) and problems("x", ["tiledmm"])
    assert problems("x", [".[nosuchextra]"]) and problems("x", ["./plugins/nope"])
    assert problems("x", ["./plugins/tiledmm-numba-cpu"])  # without the core
    assert not problems("x", [".[dask]"]) and not problems("x", ["numpy<2.5"])
    assert not problems("x", [".", "./plugins/tiledmm-numba-cpu"])
    assert not problems("x", [".[test]", "plugins/tiledmm-example"])
