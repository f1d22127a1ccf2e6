"""The core's structure, checked: the import graph of ``tiledmm`` has no cycle (function-local
imports included, so no cycle hides behind a late import), and no module reaches into another
module's ``_private`` names (tiledmm, the built-in backends, plugins, benches)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"tiledmm": ROOT / "tiledmm", "tiledmm_backends": ROOT / "backends"}


def _module_name(path: Path) -> str:
    for pkg, folder in PACKAGES.items():
        if path.is_relative_to(folder):
            parts = path.relative_to(folder).with_suffix("").parts
            parts = parts[:-1] if parts[-1] == "__init__" else parts
            return ".".join((pkg, *parts))
    return path.stem


def _imports(path: Path) -> list[tuple[str, list[str], int]]:
    """(absolute module, imported names, line) for every import in ``path``, nested ones too."""
    here = _module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    found = []
    tree = ast.parse(path.read_text())
    typing_only = {  # `if TYPE_CHECKING:` imports are for annotations, not run: no edge
        id(n)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and getattr(block.test, "id", "") == "TYPE_CHECKING"
        for stmt in block.body
        for n in ast.walk(stmt)
    }
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found += [(a.name, [], node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(max(node.level - 1, 0)):
                base = base.rpartition(".")[0]
            mod = f"{base}.{node.module}" if node.level and node.module else base
            mod = mod if node.level else node.module or ""
            found.append((mod, [a.name for a in node.names], node.lineno))
    return found


def _core_graph() -> dict[str, set[str]]:
    files = sorted((ROOT / "tiledmm").glob("*.py"))
    names = {_module_name(f) for f in files}
    graph: dict[str, set[str]] = {}
    for f in files:
        me = _module_name(f)
        edges = set()
        for mod, what, _ in _imports(f):
            for target in [mod] + [f"{mod}.{w}" for w in what]:
                if target in names and target != me and target != "tiledmm":
                    edges.add(target)
        graph[me] = edges
    return graph


def test_core_import_graph_is_acyclic():
    graph = _core_graph()
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycle = path[path.index(nxt) :] + [nxt]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt)
        path.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)


def test_planner_is_pure():
    """The planner imports no registry, dispatch, API or device library."""
    graph = _core_graph()
    pure = {"tiledmm.core.backend", "tiledmm.device.spec", "tiledmm.model.hierarchy", "tiledmm.model.tensorcore"}
    assert graph["tiledmm.planner.make"] <= pure | {"tiledmm.planner.plans", "tiledmm.planner.mma"}
    assert graph["tiledmm.planner.mma"] <= pure | {"tiledmm.planner.plans"}
    assert graph["tiledmm.planner.plans"] <= pure
    assert graph["tiledmm.model.tensorcore"] <= {"tiledmm.device.spec", "tiledmm.model.dram", "tiledmm.model.hierarchy"}
    assert graph["tiledmm.model.hierarchy"] <= {"tiledmm.device.spec", "tiledmm.model.dram", "tiledmm.model.warps",
                                          "tiledmm.model.levels", "tiledmm.model.cpu"}  # fmt: skip
    assert graph["tiledmm.model.cpu"] <= {"tiledmm.device.spec", "tiledmm.model.levels"}
    assert not graph["tiledmm.model.levels"]
    assert not graph["tiledmm.model.warps"]
    assert graph["tiledmm.model.dram"] <= {"tiledmm.device.spec"}


def _sources() -> list[Path]:
    roots = [ROOT / "tiledmm", ROOT / "backends", ROOT / "benches", ROOT / "plugins"]
    return [p for r in roots for p in sorted(r.rglob("*.py"))]


def test_no_module_reaches_into_private_names():
    offences = []
    for f in _sources():
        me = _module_name(f)
        tree = ast.parse(f.read_text())
        aliases = {}
        for mod, what, line in _imports(f):
            ours = mod.split(".")[0] in PACKAGES or mod.startswith("tiledmm_")
            if not ours or mod == me:
                continue
            offences += [f"{f.relative_to(ROOT)}:{line} imports {mod}.{w}" for w in what
                         if w.startswith("_") and not w.startswith("__")]  # fmt: skip
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                for a in node.names:
                    aliases[a.asname or a.name] = node.module
            if isinstance(node, ast.Import):
                for a in node.names:
                    aliases[a.asname or a.name.split(".")[0]] = a.name
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and isinstance(node.value, ast.Name)
                and aliases.get(node.value.id, "").split(".")[0] in (*PACKAGES, "tiledmm_numba_cpu")
            ):
                offences.append(
                    f"{f.relative_to(ROOT)}:{node.lineno} uses {node.value.id}.{node.attr}"
                )
    assert not offences, "\n".join(offences)
