"""The airvisor package has no import cycles, between modules or between its sub-packages.

The graph is read statically (ast) from every module's source: every `import` and `from ...
import` statement anywhere in the module, function-local ones and those under
`if TYPE_CHECKING:` included (a deferred import does not make a dependency go away; it only
hides it from the interpreter). An edge points at the module named: `from airvisor.daemon.web
import install` is an edge to `airvisor.daemon.web` (its `__init__`), `from airvisor.cli import
_run` one to `airvisor.cli._run`.

KNOWN_BACK_EDGES lists the imports that close a cycle today and are not fixed yet. With them left
out the graph must be acyclic, so the tests pass today, fail on any NEW cycle (naming it, with
file:line of each import), and fail when a listed import is gone (delete it from the list: the
list only shrinks). Most of them are in folders other engineers were changing when this test was
written (engine/, primerl/, proc/, reaper/, cli/_reap.py), which is why they are listed rather
than fixed; each says what the fix is.

No import is function-local to hide a dependency either: outside the CLI entry (airvisor/cli/)
and the demo stand-ins (airvisor/demo/), each function-local import of an airvisor module says
why with a `# lazy: <why>` comment (an optional dependency, a heavy one on one path only).
"""

from __future__ import annotations

import ast
import graphlib
import itertools
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import airvisor

Edge = tuple[str, str]

# (importer, imported) -> why it is still here / what fixes it.
KNOWN_BACK_EDGES: dict[Edge, str] = {
    # None left: every cycle the issue listed is fixed (the list only shrinks; a new cycle fails).
}


@dataclass(frozen=True)
class Import:
    target: str
    path: Path
    line: int


def modules(root: Path, package: str) -> dict[str, Path]:
    """Every module of the package under `root`, by dotted name (a package by its own name)."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    """The module `name` is, or is inside of; None outside the package."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(name: str, path: Path, known: dict[str, Path]) -> list[Import]:
    """The package's modules that `name` imports, anywhere in its source."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    here = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            if node.level:
                parts = here.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1]
                                + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                       for alias in node.names]
        for target in targets:
            resolved = _resolve(target, known)
            if resolved is not None and resolved != name:
                found.append(Import(resolved, path, node.lineno))
    return found


def import_graph(root: Path, package: str) -> dict[Edge, list[Import]]:
    """Edges (importer, imported) between the package's modules, each with its statements."""
    known = modules(root, package)
    edges: dict[Edge, list[Import]] = {}
    for name, path in known.items():
        for found in imports_of(name, path, known):
            edges.setdefault((name, found.target), []).append(found)
    return edges


def package_of(module: str, root: Path, package: str) -> str:
    """`airvisor.runs._manager` -> `airvisor.box`; top-level modules stay themselves."""
    parts = module.split(".")
    if len(parts) > 1 and (root / parts[1]).is_dir():
        return ".".join(parts[:2])
    return module


def cycles(edges: Iterable[Edge]) -> list[list[str]]:
    """Cycles covering every cyclic part of the graph: each found (graphlib names one at a
    time) is recorded and broken at its last edge, until the graph sorts."""
    graph: dict[str, set[str]] = {}
    for importer, imported in edges:
        graph.setdefault(importer, set()).add(imported)
    found = []
    while True:
        try:
            tuple(graphlib.TopologicalSorter(graph).static_order())
        except graphlib.CycleError as err:
            # graphlib lists each node before the one that depends on it; reversed, each
            # module imports the next: [a, b, ..., a].
            cycle: list[str] = list(reversed(err.args[1]))
            found.append(cycle)
            graph[cycle[0]].discard(cycle[1])
            continue
        return found


def _describe(cycle: list[str], where: dict[Edge, list[Import]], root: Path) -> str:
    lines = [" -> ".join(cycle)]
    for edge in itertools.pairwise(cycle):
        found = where[edge][0]
        lines.append(f"    {edge[0]} imports {edge[1]} at "
                     f"{found.path.relative_to(root.parent)}:{found.line}")
    return "\n".join(lines)


ROOT = Path(airvisor.__file__).parent
PACKAGE = "airvisor"


def _package_edges(graph: dict[Edge, list[Import]]) -> dict[Edge, list[Import]]:
    collapsed: dict[Edge, list[Import]] = {}
    for (importer, imported), found in graph.items():
        if (importer, imported) in KNOWN_BACK_EDGES:
            continue
        edge = (package_of(importer, ROOT, PACKAGE), package_of(imported, ROOT, PACKAGE))
        if edge[0] != edge[1]:
            collapsed.setdefault(edge, []).extend(found)
    return collapsed


def test_no_new_import_cycle_between_modules() -> None:
    graph = import_graph(ROOT, PACKAGE)
    edges = {e: found for e, found in graph.items() if e not in KNOWN_BACK_EDGES}
    found = cycles(edges)
    assert not found, "import cycles between modules:\n" + "\n".join(
        _describe(c, edges, ROOT) for c in found)


def test_no_new_import_cycle_between_packages() -> None:
    edges = _package_edges(import_graph(ROOT, PACKAGE))
    found = cycles(edges)
    assert not found, "import cycles between airvisor's packages:\n" + "\n".join(
        _describe(c, edges, ROOT) for c in found)


def test_each_known_back_edge_is_still_there() -> None:
    """A fixed cycle leaves the list (it only shrinks)."""
    graph = import_graph(ROOT, PACKAGE)
    gone = [f"{a} -> {b} ({why})" for (a, b), why in KNOWN_BACK_EDGES.items()
            if (a, b) not in graph]
    assert not gone, "fixed, delete from KNOWN_BACK_EDGES:\n" + "\n".join(gone)


def test_each_known_back_edge_still_closes_a_cycle() -> None:
    """An import listed as known that no longer closes a cycle (the other direction went
    away) leaves the list too: left in, it would hide a new cycle through it."""
    graph = import_graph(ROOT, PACKAGE)
    module_edges = [e for e in graph if e not in KNOWN_BACK_EDGES]
    package_edges = list(_package_edges(graph))
    stale = []
    for importer, imported in KNOWN_BACK_EDGES:
        if (importer, imported) not in graph:
            continue  # reported by test_each_known_back_edge_is_still_there
        as_packages = (package_of(importer, ROOT, PACKAGE), package_of(imported, ROOT, PACKAGE))
        if not (cycles([*module_edges, (importer, imported)])
                or (as_packages[0] != as_packages[1]
                    and cycles([*package_edges, as_packages]))):
            stale.append(f"{importer} -> {imported}")
    assert not stale, ("no longer part of a cycle, delete from KNOWN_BACK_EDGES:\n"
                       + "\n".join(stale))



# -- function-local imports ---------------------------------------------------------------------
# A function-local import of an airvisor module hides a dependency from the module's top (and
# once hid the cycles this file now forbids). Each one stays only in the CLI entry (heavy
# subsystems per subcommand, so `airvisor --help` starts fast) or the demo stand-ins (leaf
# programs), or with a `# lazy: <why>` comment on its line or the line above it (or above the
# block of imports it is part of): an optional dependency that may be absent, or a heavy one
# used on one path only.
LAZY_MARK = "lazy:"
LAZY_ANYWHERE_UNDER = ("cli", "demo")

# (file under airvisor/, module imported) -> why it is still local without a comment.
KNOWN_UNMARKED_LOCAL_IMPORTS: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class LocalImport:
    path: Path
    line: int
    module: str


def _imported_module(node: ast.Import | ast.ImportFrom, here: str) -> str:
    if isinstance(node, ast.Import):
        return node.names[0].name
    if not node.level:
        return node.module or ""
    parts = here.split(".")
    return ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))


def unmarked_local_imports(root: Path, package: str) -> list[LocalImport]:
    """Imports of the package's modules inside a function, outside LAZY_ANYWHERE_UNDER, with
    no LAZY_MARK comment on their line, the line above, or above their block of imports."""
    found = []
    for name, path in modules(root, package).items():
        relative = path.relative_to(root)
        if relative.parts[0] in LAZY_ANYWHERE_UNDER:
            continue
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        lines = path.read_text(encoding="utf-8").splitlines()
        tree = ast.parse("\n".join(lines), filename=str(path))
        local: dict[int, ast.Import | ast.ImportFrom] = {}
        for function in ast.walk(tree):
            if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(function):
                    if isinstance(node, (ast.Import, ast.ImportFrom)):
                        local[node.lineno] = node
        covered = {line for node in local.values()
                   for line in range(node.lineno, (node.end_lineno or node.lineno) + 1)}
        for line, node in sorted(local.items()):
            module = _imported_module(node, here)
            if module != package and not module.startswith(package + "."):
                continue
            above = line - 1
            while above in covered:  # the comment over a block of imports covers each
                above -= 1
            marks = [lines[line - 1], lines[above - 1].strip() if above >= 1 else ""]
            if not (LAZY_MARK in marks[0].partition("#")[2]
                    or (marks[1].startswith("#") and LAZY_MARK in marks[1])):
                found.append(LocalImport(relative, line, module))
    return found


def test_every_function_local_import_says_why_it_is_local() -> None:
    found = [i for i in unmarked_local_imports(ROOT, PACKAGE)
             if (i.path.as_posix(), i.module) not in KNOWN_UNMARKED_LOCAL_IMPORTS]
    assert not found, (
        "function-local imports of airvisor modules without a `# lazy: <why>` comment (move "
        "each to the module's top; a cycle that makes that fail is fixed, not hidden):\n"
        + "\n".join(f"    airvisor/{i.path}:{i.line}: {i.module}" for i in found))


def test_each_known_unmarked_local_import_is_still_there() -> None:
    """One moved to its module's top (or marked) leaves the list (it only shrinks)."""
    left = {(i.path.as_posix(), i.module) for i in unmarked_local_imports(ROOT, PACKAGE)}
    gone = [f"airvisor/{path}: {module}" for path, module in KNOWN_UNMARKED_LOCAL_IMPORTS
            if (path, module) not in left]
    assert not gone, "fixed, delete from KNOWN_UNMARKED_LOCAL_IMPORTS:\n" + "\n".join(gone)


def test_an_unmarked_local_import_is_reported_and_a_marked_one_is_not(tmp_path: Path) -> None:
    root = tmp_path / "pkg"
    _write(root, {
        "__init__.py": "",
        "a.py": "import os\n",
        "b.py": ("def plain():\n    from pkg import a\n"
                 "def said():\n    # lazy: heavy\n    from pkg import a\n    from . import c\n"
                 "def same_line():\n    from pkg.a import os  # lazy: heavy\n"
                 "def other():\n    import json\n"
                 "def after_code():\n    x = 1  # lazy: no\n    y = x\n    import pkg.a\n"),
        "c.py": "",
        "cli/__init__.py": "def main():\n    from pkg import a\n",
    })
    found = unmarked_local_imports(root, "pkg")
    assert [(i.path.as_posix(), i.line, i.module) for i in found] == [
        ("b.py", 2, "pkg"), ("b.py", 14, "pkg.a")]


# -- the graph itself, on a package written for the test ------------------------------------------
def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_function_local_relative_and_type_checking_imports_are_edges(tmp_path: Path) -> None:
    root = tmp_path / "pkg"
    _write(root, {
        "__init__.py": "",
        "a.py": "def f():\n    from pkg import b\n",
        "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .sub import c\n",
        "sub/__init__.py": "from pkg.sub.c import name\n",
        "sub/c.py": "import pkg.a\nimport os\nname = 1\n",
    })
    graph = import_graph(root, "pkg")
    assert set(graph) == {("pkg.a", "pkg.b"), ("pkg.b", "pkg.sub.c"),
                          ("pkg.sub", "pkg.sub.c"), ("pkg.sub.c", "pkg.a")}
    assert graph[("pkg.a", "pkg.b")][0].line == 2
    (cycle,) = cycles(graph)
    assert cycle in (["pkg.a", "pkg.b", "pkg.sub.c", "pkg.a"], ["pkg.b", "pkg.sub.c", "pkg.a",
                                                                 "pkg.b"],
                     ["pkg.sub.c", "pkg.a", "pkg.b", "pkg.sub.c"])  # each imports the next


def test_an_acyclic_graph_has_no_cycles() -> None:
    assert cycles([("a", "b"), ("b", "c"), ("a", "c")]) == []
