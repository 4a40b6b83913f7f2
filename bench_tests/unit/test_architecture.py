"""The harness package's import graph has no cycle and no upward arrow: every module can be read
(and tested) with only the modules below it, and each package imports only from its own layer or
the layers below (docs/architecture.md, "Architecture"). Every import statement counts: those at
module level, those inside functions (a framework imported lazily, the worker composing a rank) and
those under ``TYPE_CHECKING``, since a function's import runs when it is called and a type names a
dependency as surely as a call does. A registry's entries name their modules as strings
(``Entry("harness.rank.frameworks.ddp:DDPAdapter")``): those are not import statements, and not
counted."""
from __future__ import annotations

import ast
from pathlib import Path

HARNESS = Path(__file__).resolve().parents[2] / "harness"
LAYERS = ("common", "machine", "data", "rank", "config", "judging", "launch", "store", "session", "report", "tasks")
"""The packages from the bottom up."""
ON_TOP = ("plugin", "bench")
"""Above them all: the pytest entry point and the suite's own test modules."""


def module_name(path: Path) -> str:
    parts = path.relative_to(HARNESS.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """The harness modules ``path`` imports, wherever the import statement stands in it."""
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    found = set()
    for statement in ast.walk(ast.parse(path.read_text())):
        if isinstance(statement, ast.ImportFrom) and statement.level:
            base = package.split(".")[:len(package.split(".")) - statement.level + 1]
            target = ".".join(base + ([statement.module] if statement.module else []))
            names = [f"{target}.{alias.name}" for alias in statement.names] if not statement.module else [target]
            found.update(names)
        elif isinstance(statement, ast.ImportFrom) and (statement.module or "").startswith("harness"):
            found.add(statement.module)  # and each name, where it is a module (``from harness.store import history``)
            found.update(f"{statement.module}.{alias.name}" for alias in statement.names)
        elif isinstance(statement, ast.Import):
            found.update(alias.name for alias in statement.names if alias.name.split(".")[0] == "harness")
    return found


def graph() -> dict[str, set[str]]:
    modules = {module_name(path): path for path in HARNESS.rglob("*.py")}
    return {name: {target for target in imports(path) if target in modules and target != name}
            for name, path in modules.items()}


def cycle_in(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, str] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        stack.append(node)
        for target in sorted(edges.get(node, ())):
            if state.get(target) == "open":
                return stack[stack.index(target):] + [target]
            if target not in state and (found := visit(target)):
                return found
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(edges):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_cycle_finder_finds_one():
    assert cycle_in({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle_in({"a": {"b"}, "b": set()}) is None


def test_the_harness_has_no_import_cycle():
    edges = graph()
    assert "harness.judging.verdicts" in edges["harness.session.evaluation"]  # the graph is read at all
    assert cycle_in(edges) is None, " -> ".join(cycle_in(edges))


def layer_of(module: str) -> int:
    """The layer of a module: ``harness`` itself is below every package, :data:`ON_TOP` above."""
    if module == "harness":
        return -1
    package = module.split(".")[1]
    return LAYERS.index(package) if package in LAYERS else len(LAYERS)


def upward_imports(edges: dict[str, set[str]]) -> list[str]:
    return sorted(f"{source} -> {target}" for source, targets in edges.items() for target in targets
                  if layer_of(target) > layer_of(source))


def test_every_harness_module_lives_in_a_layer():
    loose = [name for name in graph() if name != "harness" and name.split(".")[1] not in (*LAYERS, *ON_TOP)]
    assert loose == []


def test_no_package_imports_from_a_layer_above_it():
    assert upward_imports({"harness.rank.x": {"harness.session.y"}}) == ["harness.rank.x -> harness.session.y"]
    assert upward_imports(graph()) == []
