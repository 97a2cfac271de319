"""The house has floors: runner → methods → core, imports only go down, and no file imports itself
back through a circle. Every import counts (module level, inside functions, under TYPE_CHECKING).

Run alone to see the floors: ``python -m pytest tests/test_layers.py -q``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FLOORS = {"core": 0, "methods": 1, "runner": 2}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules() -> dict[str, Path]:
    files = [*ROOT.glob("harness/**/*.py"), *ROOT.glob("methods/**/*.py"), ROOT / "run_bench.py"]
    return {module_name(path): path for path in files}


def floor(module: str) -> int:
    if module == "harness.core" or module.startswith("harness.core."):
        return FLOORS["core"]
    if module == "methods" or module.startswith("methods."):
        return FLOORS["methods"]
    return FLOORS["runner"]  # harness.runner.*, the harness package itself, run_bench


def imports_of(path: Path, known: set[str]) -> set[str]:
    """Project modules ``path`` imports: ``from a.b import c`` counts as a.b.c when that is a module."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                child = f"{node.module}.{alias.name}"
                if child in known:
                    found.add(child)
                elif node.module in known:
                    found.add(node.module)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = project_modules()
    known = set(modules)
    return {name: imports_of(path, known) - {name} for name, path in modules.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_graph_sees_the_project():
    graph = import_graph()
    assert {"harness.core.api", "harness.runner.scheduler", "methods.dse", "run_bench"} <= set(graph)
    assert "harness.core.api" in graph["methods.pooling"]
    assert "harness.runner.config" in graph["run_bench"] or "harness" in graph["run_bench"]


def test_imports_only_go_down():
    upward = [f"{source} (floor {floor(source)}) imports {target} (floor {floor(target)})"
              for source, targets in import_graph().items() for target in sorted(targets)
              if floor(target) > floor(source)]
    assert not upward, "imports that go up a floor:\n" + "\n".join(upward)


def test_no_import_circles():
    found = circles(import_graph())
    assert not found, "import circles:\n" + "\n".join(" ⇄ ".join(c) for c in found)


@pytest.mark.parametrize(("graph", "expected"), [
    ({"a": {"b"}, "b": {"a"}, "c": {"a"}}, [["a", "b"]]),
    ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
])
def test_circle_finder_finds_circles(graph, expected):
    assert circles(graph) == expected


def test_methods_never_see_the_run_config():
    """The method API is MethodContext; BenchConfig belongs to the runner alone."""
    offenders = [name for name, path in project_modules().items()
                 if floor(name) < FLOORS["runner"] and "BenchConfig" in path.read_text(encoding="utf-8")]
    assert not offenders, f"BenchConfig named below the runner: {offenders}"
