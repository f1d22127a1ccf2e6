"""The structure, checked from the source. Every module of ``tiledmm`` and the built-in
backends, and every import edge that can run: module level, function-local, type-only (an
``if TYPE_CHECKING:`` import is still a dependency), and edges to the face (``tiledmm``).

- one acyclic import graph;
- the rank table: a module imports its own wing or a lower one; wings of equal rank do not
  import each other; the backends and plugins import only the face, util, device, model and
  planner; nothing in ``tiledmm`` names ``tiledmm_backends``;
- re-exports only in the faces (``tiledmm``, ``tiledmm.dask``, ``tiledmm_backends.kernels``), no
  ``import X as X`` shim elsewhere; a wing's ``__init__`` is a docstring, and a module imports
  its sibling, not its own package; elsewhere ``__all__`` lists only names its module defines,
  and a name is imported from the module that defines it;
- no module reaches into another module's ``_private`` names (relative aliases included), in
  tiledmm, the backends, plugins and benches;
- at most 400 lines per module; no ``sys.path`` edit in benches/.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"tiledmm": ROOT / "tiledmm", "tiledmm_backends": ROOT / "backends"}

#: lowest first: a module may import its own wing (without a cycle) or a lower rank
RANKS = {
    "util": 0, "device": 1, "model": 2, "planner": 3, "core": 4, "interop": 5, "dask": 5,
    "tune": 5,  # the tuner and first-use tuning, which the front door wires into the engine
    "api": 6, "face": 7, "bench": 8, "report": 9, "cli": 10, "__main__": 11,
    "modelcheck": 11,  # `python -m tiledmm.modelcheck`: report.modelcheck under a short name
}  # fmt: skip
#: what the backends and plugins may import of tiledmm
BACKEND_MAY = {"face", "util", "device", "model", "planner"}
#: the only __init__ modules that re-export
FACES = {"tiledmm", "tiledmm.dask", "tiledmm_backends.kernels"}
MAX_LINES = 400


def _module_name(path: Path) -> str:
    for pkg, folder in PACKAGES.items():
        if path.is_relative_to(folder):
            parts = path.relative_to(folder).with_suffix("").parts
            parts = parts[:-1] if parts[-1] == "__init__" else parts
            return ".".join((pkg, *parts))
    return path.stem


def _files() -> list[Path]:
    return [p for folder in PACKAGES.values() for p in sorted(folder.rglob("*.py"))]


MODULES = {_module_name(f) for f in _files()}


def _imports(path: Path) -> list[tuple[str, list[str], int]]:
    """(absolute module, imported names, line) for every import in ``path``: nested and
    type-only ones too."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(a.name, [], node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            found.append(_import_from(node, path))
    return found


def _targets(mod: str, names: list[str]) -> list[str]:
    """The modules an import runs: ``from pkg import sub`` is ``pkg.sub``; a name that is not
    a module is its module's (``from tiledmm import Backend`` is the face)."""
    out = []
    for n in names or [""]:
        full = f"{mod}.{n}" if n else mod
        if full in MODULES:
            out.append(full)
        else:
            m = mod
            while m and m not in MODULES:
                m = m.rpartition(".")[0]
            if m:
                out.append(m)
    return out


def _graph() -> dict[str, dict[str, int]]:
    graph: dict[str, dict[str, int]] = {}
    for f in _files():
        me = _module_name(f)
        edges = graph.setdefault(me, {})
        for mod, names, line in _imports(f):
            for t in _targets(mod, names):
                if t != me:
                    edges.setdefault(t, line)
    return graph


def _wing(mod: str) -> str:
    """The rank table's name for a tiledmm module."""
    parts = mod.split(".")
    if parts == ["tiledmm"]:
        return "face"
    return parts[1]


def test_one_acyclic_import_graph():
    graph = _graph()
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


def test_every_module_has_a_rank():
    wings = {_wing(m) for m in MODULES if m.startswith("tiledmm.") or m == "tiledmm"}
    assert wings <= set(RANKS), f"modules outside the rank table: {sorted(wings - set(RANKS))}"


def test_imports_follow_the_rank_table():
    bad = []
    for me, edges in _graph().items():
        for t, line in edges.items():
            if me.startswith("tiledmm_backends"):
                if t.split(".")[0] == "tiledmm" and _wing(t) not in BACKEND_MAY:
                    bad.append(f"{me}:{line} -> {t} (backends import {sorted(BACKEND_MAY)})")
                continue
            if t.startswith("tiledmm_backends"):
                bad.append(f"{me}:{line} -> {t} (tiledmm never imports the backends)")
                continue
            a, b = _wing(me), _wing(t)
            if a != b and RANKS[a] <= RANKS[b]:
                bad.append(f"{me}:{line} ({a}, rank {RANKS[a]}) -> {t} ({b}, rank {RANKS[b]})")
    assert not bad, "\n".join(bad)


def test_plugins_import_only_the_lower_wings():
    bad = []
    for f in sorted((ROOT / "plugins").rglob("*.py")):
        for mod, names, line in _imports(f):
            for t in _targets(mod, names):
                if t.split(".")[0] == "tiledmm" and _wing(t) not in BACKEND_MAY:
                    bad.append(f"{f.relative_to(ROOT)}:{line} -> {t}")
    assert not bad, "\n".join(bad)


def test_tiledmm_never_names_the_backends():
    """No import of ``tiledmm_backends`` and no reading of its files (docstrings may say
    where things are)."""
    bad = []
    for f in sorted((ROOT / "tiledmm").rglob("*.py")):
        tree = ast.parse(f.read_text())
        docs = {
            id(n.body[0].value)
            for n in ast.walk(tree)
            if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and n.body and isinstance(n.body[0], ast.Expr)
            and isinstance(n.body[0].value, ast.Constant)
        }  # fmt: skip
        for n in ast.walk(tree):
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs:
                if "tiledmm_backends" in n.value or "backends/" in n.value:
                    bad.append(f"{f.relative_to(ROOT)}:{n.lineno}")
        bad += [f"{f.relative_to(ROOT)}:{line}" for mod, _, line in _imports(f)
                if mod.startswith("tiledmm_backends")]  # fmt: skip
    assert not bad, "\n".join(bad)


def test_wing_faces_are_docstrings_and_siblings_are_imported_directly():
    bad = []
    for f in _files():
        me = _module_name(f)
        tree = ast.parse(f.read_text())
        if f.name == "__init__.py" and me.startswith("tiledmm") and me not in FACES:
            if me.startswith("tiledmm.") and [type(n) for n in tree.body] != [ast.Expr]:
                bad.append(f"{f.relative_to(ROOT)}: a wing's __init__ holds only its docstring")
        if f.name == "__init__.py":
            continue
        package = me.rpartition(".")[0]
        for mod, names, line in _imports(f):
            if mod == package and any(f"{mod}.{n}" not in MODULES for n in names):
                bad.append(f"{f.relative_to(ROOT)}:{line} imports from its own package's "
                           "__init__: import the sibling module")  # fmt: skip
    assert not bad, "\n".join(bad)


def _sources() -> list[Path]:
    roots = [ROOT / "tiledmm", ROOT / "backends", ROOT / "benches", ROOT / "plugins"]
    return [p for r in roots for p in sorted(r.rglob("*.py"))]


def _ours(mod: str) -> bool:
    return mod.split(".")[0] in (*PACKAGES, "tiledmm_numba_cpu", "tiledmm_example")


def test_no_module_reaches_into_private_names():
    offences = []
    for f in _sources():
        me = _module_name(f)
        tree = ast.parse(f.read_text())
        aliases: dict[str, str] = {}
        for node in ast.walk(tree):  # every name bound to one of our modules, relative too
            if isinstance(node, ast.ImportFrom):
                mod = _import_from(node, f)[0]
                for a in node.names:
                    full = f"{mod}.{a.name}"
                    aliases[a.asname or a.name] = full if full in MODULES or not _ours(mod) \
                        else mod  # fmt: skip
                    if (_ours(mod) and mod != me and a.name.startswith("_")
                            and not a.name.startswith("__")):  # fmt: skip
                        offences.append(f"{f.relative_to(ROOT)}:{node.lineno} imports "
                                        f"{mod}.{a.name}")  # fmt: skip
            if isinstance(node, ast.Import):
                for a in node.names:
                    aliases[a.asname or a.name.split(".")[0]] = a.name
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and isinstance(node.value, ast.Name)
                and _ours(aliases.get(node.value.id, ""))
                and aliases.get(node.value.id) != me
            ):
                offences.append(
                    f"{f.relative_to(ROOT)}:{node.lineno} uses {node.value.id}.{node.attr}"
                )
    assert not offences, "\n".join(offences)


def _import_from(node: ast.ImportFrom, path: Path) -> tuple[str, list[str], int]:
    """(absolute module, imported names, line) of one ``from ... import`` in ``path``."""
    here = _module_name(path)
    base = here if path.name == "__init__.py" else here.rpartition(".")[0]
    for _ in range(max(node.level - 1, 0)):
        base = base.rpartition(".")[0]
    if node.level:
        mod = f"{base}.{node.module}" if node.module else base
    else:
        mod = node.module or ""
    return mod, [a.name for a in node.names], node.lineno


def test_modules_are_short():
    long = [f"{f.relative_to(ROOT)}: {n} lines" for f in _files()
            if (n := len(f.read_text().splitlines())) > MAX_LINES]  # fmt: skip
    assert not long, "\n".join(long)


def test_benches_do_not_edit_sys_path():
    bad = []
    for f in sorted((ROOT / "benches").rglob("*.py")):
        for node in ast.walk(ast.parse(f.read_text())):
            if (
                isinstance(node, ast.Attribute)
                and node.attr == "path"
                and isinstance(node.value, ast.Name)
                and node.value.id == "sys"
            ):
                bad.append(f"{f.relative_to(ROOT)}:{node.lineno}")
    assert not bad, "\n".join(bad)


def test_no_same_name_reexport_shims():
    """``from m import X as X`` (a re-export shim) only in the three faces; everywhere else a
    name is imported from the module that defines it."""
    faces = {ROOT / "tiledmm" / "__init__.py", ROOT / "tiledmm" / "dask" / "__init__.py",
             ROOT / "backends" / "kernels" / "__init__.py"}  # fmt: skip
    bad = []
    for f in _sources():
        if f in faces:
            continue
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Import | ast.ImportFrom):
                bad += [f"{f.relative_to(ROOT)}:{node.lineno} imports {a.name} as {a.asname}"
                        for a in node.names
                        if a.asname and a.asname == a.name.rpartition(".")[2]]  # fmt: skip
    assert not bad, "\n".join(bad)


def _defined(tree: ast.Module) -> set[str]:
    """The names a module defines at its top level (``def``, ``class``, an assignment), also
    under a module-level ``if``/``try``/``with``; not the names it imports."""
    names: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for n in body:
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(n.name)
            elif isinstance(n, ast.Assign | ast.AugAssign | ast.AnnAssign):
                targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                names.update(x.id for t in targets for x in ast.walk(t) if isinstance(x, ast.Name))
            elif isinstance(n, ast.If | ast.Try | ast.With):
                visit(n.body)
                visit(getattr(n, "orelse", []))
                visit(getattr(n, "finalbody", []))
                for h in getattr(n, "handlers", []):
                    visit(h.body)

    visit(tree.body)
    return names


def _all_of(tree: ast.Module) -> list[tuple[str, int]]:
    """``__all__``'s entries, with their lines (``__all__ = [...]`` and ``+= [...]``)."""
    out = []
    for n in tree.body:
        targets = n.targets if isinstance(n, ast.Assign) else [n.target] \
            if isinstance(n, ast.AugAssign | ast.AnnAssign) else []  # fmt: skip
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets) and n.value:
            out += [(e.value, e.lineno) for e in ast.walk(n.value)
                    if isinstance(e, ast.Constant) and isinstance(e.value, str)]  # fmt: skip
    return out


def test_all_lists_only_names_the_module_defines():
    """Outside the three faces a module's ``__all__`` names what it defines, never a name it
    imports: a caller imports a name from its one home."""
    bad = []
    for f in _files():
        if _module_name(f) in FACES:
            continue
        tree = ast.parse(f.read_text())
        defined = _defined(tree)
        bad += [f"{f.relative_to(ROOT)}:{line} lists {name!r}, which it only imports"
                for name, line in _all_of(tree) if name not in defined]  # fmt: skip
    assert not bad, "\n".join(bad)


def test_names_are_imported_from_their_home():
    """``from m import X`` where ``m`` (not a face) only imports ``X`` from another module of
    ours: import it from the module that defines it (tiledmm, the backends, tests, benches
    and plugins)."""
    homes = {_module_name(f): _defined(ast.parse(f.read_text())) for f in _files()}
    bad = []
    for f in [*_sources(), *sorted((ROOT / "tests").rglob("*.py"))]:
        for mod, names, line in _imports(f):
            if mod not in homes or mod in FACES:
                continue
            theirs = {n for m, ns, _ in _imports(_path_of(mod)) if _ours(m) for n in ns}
            bad += [f"{f.relative_to(ROOT)}:{line} imports {n} from {mod}, which imports it"
                    for n in names if n in theirs and n not in homes[mod]
                    and f"{mod}.{n}" not in MODULES]  # fmt: skip
    assert not bad, "\n".join(bad)


def _path_of(mod: str) -> Path:
    pkg, _, rest = mod.partition(".")
    base = PACKAGES[pkg].joinpath(*rest.split(".")) if rest else PACKAGES[pkg]
    return base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
