"""The layers, read from the source: every import counts, those inside functions too. The planner
and the kinds' traits import nothing that runs a model; the engine knows no Airflow; the arena
knows no model; and no two modules import each other, however far round."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"quail": ROOT / "engine" / "quail", "airflow_quail": ROOT / "airflow_quail"}


def _modules() -> dict[str, Path]:
    out = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = path.relative_to(folder.parent).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


MODULES = _modules()


def imports(name: str) -> set[str]:
    """What a module imports, anywhere in it: module names, external ones included."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + [base]).strip(".")
            submodules = {f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in MODULES}
            found |= submodules if len(submodules) == len(node.names) else submodules | {base}
    return found


def reached(start: str) -> set[str]:
    """Every module `start` reaches through imports, its own package's `__init__`s included."""
    seen, todo = set(), [start]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        parents = [".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)]
        todo += [m for m in imports(name) | set(parents) if m in MODULES] if name in MODULES else []
        todo += [m for m in imports(name) if m not in MODULES] if name in MODULES else []
    return seen


def _under(names: set[str], prefixes: tuple[str, ...]) -> list[str]:
    return sorted(n for n in names if any(n == p or n.startswith(p + ".") for p in prefixes))


RUNS = ("quail.executor", "quail.ops", "quail.session", "quail.pipeline", "quail.model", "quail.kernels",
        "quail.runtime", "quail.worker", "torch", "pyarrow", "triton", "airflow", "airflow_quail")


@pytest.mark.parametrize("layer", sorted(m for m in MODULES if m.startswith(("quail.planner", "quail.kinds"))))
def test_the_planner_and_the_traits_import_nothing_that_runs(layer):
    assert _under(reached(layer), RUNS) == []


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("quail")))
def test_the_engine_knows_no_airflow(module):
    assert _under(imports(module), ("airflow", "airflow_quail")) == []


def test_the_arena_knows_no_model():
    for module in (m for m in MODULES if m.startswith("quail.kv")):
        assert _under(reached(module), ("quail.model", "quail.ops", "quail.executor")) == [], module


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan)."""
    index, low, stack, on, cycles = {}, {}, [], set(), []

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = set()
            while True:
                w = stack.pop()
                on.discard(w)
                part.add(w)
                if w == v:
                    break
            if len(part) > 1:
                cycles.append(sorted(part))

    for v in graph:
        if v not in index:
            visit(v)
    return cycles


def test_no_import_cycles():
    assert _cycles({m: {i for i in imports(m) if i in MODULES and i != m} for m in MODULES}) == []


def _package(module: str) -> str:
    """quail.planner.plan -> quail.planner; quail.session -> quail.session."""
    return ".".join(module.split(".")[:2])


def test_no_package_imports_one_that_imports_it_back():
    graph: dict[str, set[str]] = {}
    for m in MODULES:
        graph.setdefault(_package(m), set()).update(
            _package(i) for i in imports(m) if i in MODULES and _package(i) != _package(m))
    assert _cycles(graph) == []
