"""The package's import graph, read from the source: no circles (counting imports inside
functions and under TYPE_CHECKING), the cores free of Tornado and Jupyter Server, the store below
the sync, and the app imported only by the extension's entry point (README: Architecture)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import networkx as nx
import pytest

import jupyter_gpu_ws

PACKAGE = Path(jupyter_gpu_ws.__file__).parent
# The folders with "no Tornado inside": the CLI and the magic reuse them without a server.
CORES = ("monitor", "runtime", "sync", "envsnap", "checkpoints", "training", "store", "userjobs")
WEB = {"tornado", "jupyter_server"}
APP = "jupyter_gpu_ws.app"
# The one import of the app: `_jupyter_server_extension_points`, which Jupyter Server calls.
APP_IMPORTERS = {"jupyter_gpu_ws"}


@dataclass
class ImportGraph:
    """The package's modules and which of them each imports (an edge a → b: a imports b), and
    the top-level names of the outside packages each imports."""

    inside: nx.DiGraph = field(default_factory=nx.DiGraph)
    outside: dict[str, set[str]] = field(default_factory=dict)


def module_name(root: Path, path: Path) -> str:
    parts = [root.name, *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_names(tree: ast.AST, module: str, is_package: bool) -> Iterator[str]:
    """Every dotted name the module imports anywhere: at the top, in functions, under
    TYPE_CHECKING. `from a import b` yields `a.b`: b is a module or a name in module a."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                # A package's `.` is itself; a module's `.` is the package holding it.
                parts = module.split(".")
                keep = len(parts) - node.level + (1 if is_package else 0)
                base = ".".join(parts[:keep] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            yield from (base if a.name == "*" else f"{base}.{a.name}" for a in node.names)


def build_graph(root: Path) -> ImportGraph:
    """The import graph of the package in `root` (a folder with an __init__.py)."""
    files = {module_name(root, p): p for p in sorted(root.rglob("*.py"))}
    graph = ImportGraph()
    for module, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        inside: set[str] = set()
        outside: set[str] = set()
        for name in imported_names(tree, module, path.name == "__init__.py"):
            if name.split(".")[0] != root.name:
                outside.add(name.split(".")[0])
                continue
            # The longest prefix that is a module: `pkg.mod.func` is an import of `pkg.mod`.
            parts = name.split(".")
            while parts and ".".join(parts) not in files:
                parts.pop()
            target = ".".join(parts)
            if target and target != module:
                inside.add(target)
        graph.inside.add_node(module)
        graph.inside.add_edges_from((module, target) for target in sorted(inside))
        graph.outside[module] = outside
    return graph


def circles(imports: nx.DiGraph) -> list[list[str]]:
    """Each set of modules that import one another round a circle (a strongly connected
    component of more than one module), sorted."""
    found = nx.strongly_connected_components(imports)
    return sorted(sorted(component) for component in found if len(component) > 1)


def describe(found: list[list[str]], imports: nx.DiGraph) -> str:
    """Each circle's modules, and one closed path through them: `a → b → a`."""
    lines = []
    for component in found:
        edges = nx.find_cycle(imports.subgraph(component), source=component[0])
        path = [edges[0][0], *(v for _, v in edges)]
        lines.append(f"{len(component)} modules: {', '.join(component)}")
        lines.append("  e.g. " + " → ".join(path))
    return "\n".join(lines)


@pytest.fixture(scope="module")
def graph() -> ImportGraph:
    return build_graph(PACKAGE)


def test_the_package_has_no_import_circle(graph: ImportGraph) -> None:
    found = circles(graph.inside)
    assert not found, "import circles:\n" + describe(found, graph.inside)


def folder(module: str) -> str:
    """`jupyter_gpu_ws.sync.engine` → `sync`; a module at the top → its own name."""
    return module.split(".")[1] if "." in module else ""


def test_the_cores_never_reach_tornado_or_jupyter_server(graph: ImportGraph) -> None:
    cores = [m for m in graph.inside.nodes if folder(m) in CORES]
    assert len(cores) > 40, "the cores were not found"
    offending = []
    for module in cores:
        for reached in sorted({module} | nx.descendants(graph.inside, module)):
            web = graph.outside[reached] & WEB
            if web:
                offending.append(f"{module} → {reached} imports {', '.join(sorted(web))}")
    assert not offending, "\n".join(offending)


def test_the_store_imports_nothing_of_the_sync(graph: ImportGraph) -> None:
    offending = sorted(
        f"{module} → {target}"
        for module, target in graph.inside.edges
        if folder(module) == "store" and folder(target) == "sync"
    )
    assert not offending, "\n".join(offending)


def test_only_the_extension_entry_point_imports_the_app(graph: ImportGraph) -> None:
    importers = set(graph.inside.predecessors(APP))
    assert importers == APP_IMPORTERS, f"app.py imported by {sorted(importers - APP_IMPORTERS)}"


def write_package(root: Path, files: dict[str, str]) -> Path:
    """A package `pkg` of the given files (path → source) under `root`."""
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "pkg"


def test_a_circle_hidden_in_a_function_or_type_checking_is_reported(tmp_path: Path) -> None:
    pkg = write_package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from . import b\n",
            "pkg/b.py": "def f():\n    from .sub import c\n",
            "pkg/sub/__init__.py": "",
            "pkg/sub/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..a import X\n",
            "pkg/d.py": "from pkg.a import thing\nimport tornado.web\n",
        },
    )
    graph = build_graph(pkg)
    found = circles(graph.inside)
    assert found == [["pkg.a", "pkg.b", "pkg.sub.c"]]
    assert "pkg.a → pkg.b → pkg.sub.c → pkg.a" in describe(found, graph.inside)
    assert set(graph.inside.successors("pkg.d")) == {"pkg.a"}
    assert graph.outside["pkg.d"] == {"tornado"}


def test_a_package_without_circles_reports_none(tmp_path: Path) -> None:
    pkg = write_package(
        tmp_path,
        {
            "pkg/__init__.py": "from .a import f\n",
            "pkg/a.py": "from .b import g\n",
            "pkg/b.py": "import json\n",
        },
    )
    graph = build_graph(pkg)
    assert circles(graph.inside) == []
    assert nx.descendants(graph.inside, "pkg") == {"pkg.a", "pkg.b"}
