"""The import graph of the course's two packages, read from their syntax trees (nothing is imported): the student-facing
``gpucourse`` never imports the grader, and the packages' modules hold at most one import loop (issue 50).

Every ``import`` and ``from ... import`` statement counts, those inside functions too: a lazy import is still a
dependency. ``from package import name`` is an edge to the module ``package.name`` where there is one, else to
``package``.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("gpucourse", "autograder")


def modules() -> dict[str, Path]:
    """Every module of the packages: dotted name -> file (a package is its ``__init__.py``)."""
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _nearest(name: str, known) -> str | None:
    """``name`` or the module it is an attribute of (``gpucourse.check.njit_only`` -> ``gpucourse.check``), if it is the packages'."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(name: str, path: Path, known) -> set[str]:
    """The packages' modules that module ``name`` (at ``path``) imports, anywhere in its text."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    edges = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            edges |= {_nearest(alias.name, known) for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            edges |= {_nearest(f"{base}.{alias.name}", known) if f"{base}.{alias.name}" in known else _nearest(base, known)
                      for alias in node.names}
    return {edge for edge in edges if edge is not None and edge != name}


@functools.cache
def import_graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports_of(name, path, known) for name, path in known.items()}


def loops(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import loops: each strongly connected component of more than one module (Tarjan's algorithm), sorted."""
    index, low, stack, on_stack, components = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for neighbour in sorted(graph.get(node, ())):
            if neighbour not in index:
                visit(neighbour)
                low[node] = min(low[node], low[neighbour])
            elif neighbour in on_stack:
                low[node] = min(low[node], index[neighbour])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(components)


def test_the_graph_reads_relative_and_lazy_imports():
    """The reading itself: a relative import, a lazy one inside a function, and ``from package import module``."""
    graph = import_graph()
    assert {"gpucourse.gates.syntax", "gpucourse.gates.ops"} <= set(graph)
    assert "gpucourse.gates.syntax" in graph["gpucourse.gates.njit_gate"]  # from .syntax import ...
    assert "gpucourse.gates.njit_gate" in graph["gpucourse.check"]  # inside njit_only
    assert any("gpucourse.gates.kernel_gate" in graph[name] for name in graph if name.startswith("autograder."))  # from gpucourse.gates import kernel_gate
    assert loops({"a": {"b"}, "b": {"c", "a"}, "c": set(), "d": {"d"}}) == [["a", "b"]]


def test_the_student_package_never_imports_the_grader():
    """``gpucourse`` ships to students and works without ``autograder``: what both sides need lives in gpucourse (the gates)."""
    graph = import_graph()
    upward = sorted(f"{name} -> {target}" for name, targets in graph.items() if name.partition(".")[0] == "gpucourse"
                    for target in targets if target.partition(".")[0] == "autograder")
    assert upward == [], upward


def test_at_most_one_import_loop():
    found = loops(import_graph())
    print("import loops:", *(" <-> ".join(loop) for loop in found), sep="\n  ")
    assert len(found) <= 1, f"{len(found)} import loops: {found}"
