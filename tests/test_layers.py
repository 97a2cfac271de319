"""The house has floors: runner → methods → core, imports only go down, and no file imports itself
back through a circle. Every import counts (module level, inside functions, under TYPE_CHECKING).
The runner's floor has rooms (subpackages) that are floors of their own, in the order of
``harness.runner.ROOMS``: a room imports only the rooms below it.

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
    assert {"harness.core.api", "harness.runner.execution.run", "methods.dse", "run_bench"} <= set(graph)
    assert "harness.core.api" in graph["methods.pooling"]
    assert "harness.runner.cli.commands" in graph["run_bench"]


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


def room(module: str) -> int | None:
    """The index of a runner module's room in ``harness.runner.ROOMS`` (None: not in a room)."""
    from harness.runner import ROOMS

    parts = module.split(".")
    if parts[:2] != ["harness", "runner"] or len(parts) < 3:
        return None
    return ROOMS.index(parts[2]) if parts[2] in ROOMS else None


def test_every_runner_module_is_in_a_room():
    from harness.runner import ROOMS

    loose = [name for name in project_modules() if name.startswith("harness.runner.") and room(name) is None]
    assert not loose, f"runner modules outside the rooms {ROOMS}: {loose}"
    folders = {p.name for p in (ROOT / "harness" / "runner").iterdir() if (p / "__init__.py").is_file()}
    assert folders == set(ROOMS)


def test_rooms_import_only_the_rooms_below():
    from harness.runner import ROOMS

    upward = [f"{source} ({ROOMS[room(source)]}) imports {target} ({ROOMS[room(target)]})"
              for source, targets in import_graph().items() if room(source) is not None
              for target in sorted(targets) if room(target) is not None and room(target) > room(source)]
    assert not upward, "imports that go up a room (order: " + " < ".join(ROOMS) + "):\n" + "\n".join(upward)


def test_each_room_says_what_it_holds_and_what_it_may_import():
    from harness.runner import ROOMS

    for name in ROOMS:
        doc = ast.get_docstring(ast.parse((ROOT / "harness" / "runner" / name / "__init__.py").read_text()))
        assert doc and ("May import" in doc or "may import" in doc or "imports only" in doc), name


def test_no_two_modules_differ_by_a_letter():
    """``report``/``reports`` or ``records``/``results`` side by side make a reader guess."""
    import difflib

    stems = sorted({name.rsplit(".", 1)[-1] for name in project_modules()} - {"__init__", "harness", "runner"})
    close = [(a, b) for i, a in enumerate(stems) for b in stems[i + 1:]
             if len(a) > 3 and (a.rstrip("s") == b.rstrip("s") or difflib.SequenceMatcher(None, a, b).ratio() > 0.92)]
    assert not close, close


def test_methods_never_see_the_run_config():
    """The method API is MethodContext; BenchConfig belongs to the runner alone."""
    offenders = [name for name, path in project_modules().items()
                 if floor(name) < FLOORS["runner"] and "BenchConfig" in path.read_text(encoding="utf-8")]
    assert not offenders, f"BenchConfig named below the runner: {offenders}"


# -- the engine's front door ------------------------------------------------------------------------

ENGINE = "harness.core.encoding"
# Registry machinery of the methods floor: how classes come in, not methods (they may use the core's
# error types that method_api does not re-export).
METHOD_REGISTRY = {"methods", "methods.plugins", "methods.guests", "methods.wall"}


def engine_imports(path: Path, source: str) -> list[str]:
    """``source`` imports of engine submodules (``harness.core.encoding.X``), each as written."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                 else [node.module] if isinstance(node, ast.ImportFrom) and node.module and node.level == 0
                 else [])
        found += [f"{source} imports {name}" for name in names if name.startswith(ENGINE + ".")]
        if isinstance(node, ast.ImportFrom) and node.module == ENGINE:
            from harness.core import encoding

            found += [f"{source} imports {ENGINE}.{alias.name}, a submodule or a private name"
                      for alias in node.names if alias.name not in encoding.__all__]
    return found


def outside_the_engine() -> dict[str, Path]:
    """Every module outside the engine: harness/, methods/, run_bench.py and benchmarks/ (its groups
    too: peers/, studies/, tools/)."""
    modules = {name: path for name, path in project_modules().items()
               if name != ENGINE and not name.startswith(ENGINE + ".")}
    modules.update({module_name(path): path for path in (ROOT / "benchmarks").rglob("*.py")})
    return modules


def test_outside_the_engine_only_its_front_door_is_imported():
    """Methods, the runner, the method API, the rest of the core and the benchmarks use the engine
    through ``harness.core.encoding``'s names alone, so everything behind them may move."""
    reaching_in = [line for name, path in sorted(outside_the_engine().items()) for line in engine_imports(path, name)]
    assert not reaching_in, "imports past the engine's front door:\n" + "\n".join(reaching_in)


def test_the_layering_check_catches_a_module_reaching_into_the_engine(tmp_path):
    """The check above on a module written to break it, and on one that keeps it."""
    bad = tmp_path / "bad.py"
    bad.write_text("from harness.core.encoding.forward import ForwardPass\n"
                   "import harness.core.encoding.kernels\n"
                   "from harness.core.encoding import make_windows\n")
    good = tmp_path / "good.py"
    good.write_text("from harness.core.encoding import ForwardPass, View\nimport harness.core.encoding\n")
    assert engine_imports(bad, "bad") == [
        "bad imports harness.core.encoding.forward", "bad imports harness.core.encoding.kernels",
        "bad imports harness.core.encoding.make_windows, a submodule or a private name"]
    assert engine_imports(good, "good") == []


def test_the_front_door_is_small_and_holds_what_it_names():
    from harness.core import encoding

    assert len(encoding.__all__) <= 10, encoding.__all__
    assert all(getattr(encoding, name, None) is not None for name in encoding.__all__)
    documented = ast.get_docstring(ast.parse((ROOT / "harness/core/encoding/__init__.py").read_text()))
    assert all(f"``{name}``" in documented for name in encoding.__all__)


def test_built_in_methods_use_nothing_the_method_api_does_not_expose():
    """method_api's promise: a plugin can do whatever a built-in does. Every name a built-in method
    module imports from ``harness`` is one of ``harness.method_api``'s, and the same object."""
    import importlib

    import harness.method_api as api

    beyond = []
    for name, path in sorted(project_modules().items()):
        if floor(name) != FLOORS["methods"] or name in METHOD_REGISTRY:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                beyond += [f"{name}: import {alias.name}" for alias in node.names
                           if alias.name.split(".")[0] == "harness"]
            if not (isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "harness"):
                continue
            module = importlib.import_module(node.module)
            for alias in node.names:
                exposed = alias.name in api.__all__ and getattr(api, alias.name) is getattr(module, alias.name)
                if not exposed:
                    beyond.append(f"{name}: {alias.name} from {node.module}")
    assert not beyond, "built-in methods use names harness.method_api does not expose:\n" + "\n".join(beyond)


KIND_MODULES = "harness/core/kinds/"


def kind_comparisons(path: Path, kinds: set[str]) -> list[str]:
    """Comparisons of a task kind's name in ``path``: ``x == "pairclass"``, ``kind in ("sts", ...)``,
    ``case "sts"``, where the other side of the comparison reads a kind (its text says ``kind``).
    A string that only declares a kind (``TaskSpec(kind="pairclass")``) is no comparison."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []

    def names_a_kind(node: ast.AST) -> bool:
        values = node.elts if isinstance(node, ast.Tuple | ast.List | ast.Set) else [node]
        return any(isinstance(v, ast.Constant) and v.value in kinds for v in values)

    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(names_a_kind(side) for side in sides) and "kind" in ast.unparse(node):
                found.append(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{node.lineno}")
        elif (isinstance(node, ast.Match) and "kind" in ast.unparse(node.subject)
              and any(names_a_kind(getattr(case.pattern, "value", None) or ast.Constant(None)) for case in node.cases)):
            found.append(f"{path.name}:{node.lineno}")
    return found


def test_no_kind_name_is_compared_outside_the_kind_modules():
    """A kind owns everything that differs by kind (harness.core.kinds): everywhere else asks the
    kind (``kind_of(task).labelled``, ``.metrics``, ``.extra_splits``...) and never compares its name."""
    from harness.core.kinds import KINDS

    kinds = set(KINDS)
    found = [hit for path in project_modules().values() if KIND_MODULES not in path.as_posix()
             for hit in kind_comparisons(path, kinds)]
    assert found == [], "kind names compared outside harness/core/kinds/: " + ", ".join(found)


def test_the_kind_comparison_check_finds_each_form(tmp_path):
    source = tmp_path / "branchy.py"
    source.write_text(
        'if spec.kind == "pairclass":\n    pass\n'
        'if task.get("kind") in ("sts", "x"):\n    pass\n'
        'match spec.kind:\n    case "sts":\n        pass\n'
        'layout = "sts" if layout == "sts" else ""\n'  # not a kind: no "kind" in the comparison
        'declared = dict(kind="pairclass")\n'
    )
    assert sorted(hit.rsplit(":", 1)[1] for hit in kind_comparisons(source, {"sts", "pairclass"})) == ["1", "3", "5"]
