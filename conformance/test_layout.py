"""How the source is laid out (spec/layout.toml): the Python package's import graph has no cycle.

The graph is read from the source with ``ast`` (nothing is imported): every import of a module of
the package, at module level or inside a function, is an edge. A cycle is reported as the path of
module names around it (``a -> b -> a``).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "skirr"
NAME = "skirr"


def import_graph(package: Path, name: str) -> dict[str, set[str]]:
    """``{module: modules it imports}`` for the ``*.py`` files of ``package`` (imported as
    ``name``), from every ``import``/``from ... import`` anywhere in each file. ``__init__`` is the
    package itself; ``from . import x`` names module ``x`` when ``x.py`` exists, else an attribute
    of ``__init__``. Extension modules (``_native``, known by their ``.pyi``) and other packages
    are not nodes."""
    modules = {p.stem for p in package.glob("*.py")}
    extensions = {p.name.split(".")[0] for p in package.glob("*.pyi")} - modules
    graph: dict[str, set[str]] = {m: set() for m in modules}

    def target(parts: list[str], names: list[str]) -> set[str]:
        # parts: the module path below the package ([] for the package itself)
        if parts:
            return {parts[0]} & modules
        return {n if n in modules else "__init__" for n in names if n not in extensions}

    for mod in modules:
        tree = ast.parse((package / f"{mod}.py").read_text(), filename=f"{mod}.py")
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                names = [a.name for a in node.names]
                if node.level == 1:
                    parts = node.module.split(".") if node.module else []
                elif node.level == 0 and node.module and node.module.split(".")[0] == name:
                    parts = node.module.split(".")[1:]
                else:
                    continue
                graph[mod] |= target(parts, names)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    parts = alias.name.split(".")
                    if parts[0] == name:
                        graph[mod] |= target(parts[1:], ["__init__"])
        graph[mod].discard(mod)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (``[a, b, ..., a]``) per strongly connected component that has one (Tarjan),
    each starting from its smallest name, sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def path_within(component: set[str], start: str) -> list[str]:
        # breadth-first from start back to start inside the component: a shortest cycle
        prev: dict[str, str] = {}
        frontier = [start]
        while frontier:
            nxt = []
            for node in frontier:
                for dep in sorted(graph[node] & component):
                    if dep == start:
                        path = [node]
                        while path[-1] != start:
                            path.append(prev[path[-1]])
                        return [start] + path[::-1][1:] + [start] if len(path) > 1 else [start, start]
                    if dep not in prev:
                        prev[dep] = node
                        nxt.append(dep)
            frontier = nxt
        raise AssertionError("a strongly connected component without a cycle")

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for dep in sorted(graph[node]):
            if dep not in index:
                visit(dep)
                low[node] = min(low[node], low[dep])
            elif dep in on_stack:
                low[node] = min(low[node], index[dep])
        if low[node] == index[node]:
            component = set()
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.add(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(path_within(component, min(component)))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def _write(root: Path, files: dict[str, str]) -> Path:
    pkg = root / "pkg"
    pkg.mkdir()
    for name, text in files.items():
        (pkg / name).write_text(text)
    return pkg


@pytest.mark.rule("skirr-layout-python-imports-acyclic")
def test_package_import_graph_has_no_cycle():
    graph = import_graph(PACKAGE, NAME)
    # The reader sees what the package does, lazy imports included (else it could pass blind).
    assert {"server", "supervisor"} <= graph["main"]  # both inside main()
    assert "_pipe" in graph["supervisor"] and "_pipe" in graph["_worker"]
    assert "server" in graph["_worker"]  # inside _worker.main()
    assert "metrics" in graph["_worker"]  # inside a method
    assert "__init__" in graph["main"]  # from . import __version__
    found = cycles(graph)
    assert found == [], "import cycles in src/skirr: " + "; ".join(" -> ".join(c) for c in found)


@pytest.mark.rule("skirr-layout-python-imports-acyclic")
def test_a_lazy_import_cycle_is_found_and_named(tmp_path):
    pkg = _write(tmp_path, {
        "__init__.py": "from .a import run\n",
        "a.py": "from .b import helper\n\ndef run():\n    return helper()\n",
        "b.py": "def helper():\n    from .c import deep\n    return deep()\n",
        "c.py": "import pkg.a\n\ndef deep():\n    return 1\n",
        "d.py": "from . import a, __version__\n",
        "_native.pyi": "",
        "e.py": "from pkg import d\nimport json\nfrom json import dumps\nfrom . import _native\n",
    })
    graph = import_graph(pkg, "pkg")
    assert graph == {"__init__": {"a"}, "a": {"b"}, "b": {"c"}, "c": {"a"},
                     "d": {"a", "__init__"}, "e": {"d"}}
    assert cycles(graph) == [["a", "b", "c", "a"]]
    # Taking the lazy import out breaks the circle.
    (pkg / "b.py").write_text("def helper():\n    return 1\n")
    assert cycles(import_graph(pkg, "pkg")) == []


@pytest.mark.rule("skirr-layout-python-imports-acyclic")
def test_two_module_cycle_through_a_method_is_named(tmp_path):
    pkg = _write(tmp_path, {
        "__init__.py": "",
        "access.py": "from .config import Formatter\n",
        "config.py": ("class Config:\n    def check(self):\n"
                      "        from .access import check_format\n"),
    })
    assert cycles(import_graph(pkg, "pkg")) == [["access", "config", "access"]]
