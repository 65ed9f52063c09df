"""The package's structure, checked from its source: no import cycle, no import hidden inside a
function (except optional dependencies), CuPy imported only by the backend, no print in library
code. These read the code with `ast`; they import nothing."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "kit"

# imported inside functions on purpose: optional at install time, or costly and only for plots
OPTIONAL = {
    "cupy",
    "pynvml",
    "ml_dtypes",
    "pyspark",
    "pyarrow",
    "py4j",
    "ipywidgets",
    "IPython",
    "torch",
    "nbformat",
    "nbconvert",
    "matplotlib",
    "playwright",
    "fsspec",
    "pooch",  # a dependency, but only the download needs it: a Spark executor imports kit.data without it
}


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


MODULES = _modules()


def _targets(node: ast.AST, module: str) -> list[str]:
    """The kit modules one import statement names."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name == "kit" or a.name.startswith("kit.")]
    if isinstance(node, ast.ImportFrom):
        if node.level:  # relative: resolve against this module's package
            package = module.split(".")
            if not MODULES[module].name == "__init__.py":
                package = package[:-1]
            base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
        else:
            base = node.module or ""
        if base != "kit" and not base.startswith("kit."):
            return []
        names = [f"{base}.{a.name}" for a in node.names]
        found = [n for n in names if n in MODULES]  # `from kit import memory`: the module itself
        return found or [base]
    return []


def _module_level_imports(tree: ast.Module) -> list[ast.AST]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.append(node)
    return out


def _function_imports(tree: ast.Module) -> list[ast.AST]:
    found = []
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    found.append(node)
    return found


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        inside = {id(n) for n in _function_imports(tree)}
        edges = set()
        for node in _module_level_imports(tree):
            if id(node) in inside:
                continue
            edges.update(t for t in _targets(node, name) if t in MODULES and t != name)
        graph[name] = edges
    return graph


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_checker_finds_a_cycle_when_there_is_one():
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle_among_kit_modules():
    graph = _graph()
    assert "kit.memory" in graph["kit.ndarray"] and "kit.workspace" in graph["kit.ndarray_copies"]  # real edges
    cycle = _find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_core_layers_point_one_way():
    graph = _graph()
    order = [
        "kit.backend",
        "kit.cpu_threads",
        "kit.device_rng",
        "kit.device_objects",
        "kit.device_transfers",
        "kit.devices",
        "kit.context",
        "kit.memory",
        "kit.workspace_errors",
        "kit.workspace_config",
        "kit.workspace_registry",
        "kit.workspace_cycles",
        "kit.workspace",
        "kit.ndarray_operators",
        "kit.ndarray_host",
        "kit.ndarray_views",
        "kit.ndarray_copies",
        "kit.ndarray",
    ]
    for low_index, low in enumerate(order):
        for high in order[low_index + 1 :]:
            assert high not in graph[low], f"{low} imports {high}, a layer above it"
    assert "kit.creation" not in graph["kit.memory"]
    assert "kit.readings" not in graph["kit.memory"] and "kit.workspace" in graph["kit.readings"]


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_import_inside_a_function_except_optional_dependencies(name):
    tree = ast.parse(MODULES[name].read_text())
    hidden = []
    for node in _function_imports(tree):
        roots = (
            [a.name.split(".")[0] for a in node.names]
            if isinstance(node, ast.Import)
            else [(node.module or "").split(".")[0] if not node.level else "kit"]
        )
        hidden += [f"line {node.lineno}: {r}" for r in roots if r not in OPTIONAL]
    assert not hidden, f"{name} imports inside a function: {hidden}; import at the top of the module"


def test_only_the_backend_imports_cupy():
    offenders = []
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            roots = []
            if isinstance(node, ast.Import):
                roots = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                roots = [(node.module or "").split(".")[0]]
            if "cupy" in roots and name != "kit.backend":
                offenders.append(f"{name}:{node.lineno}")
    assert not offenders, f"cupy is imported outside kit.backend: {offenders}; use kit.backend.cupy()"


def test_no_print_in_library_code():
    offenders = []
    for name, path in MODULES.items():
        if name == "kit.__main__":  # the command line prints; that is its job
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
                offenders.append(f"{name}:{node.lineno}")
    assert not offenders, f"print() in library code: {offenders}; use logging, a stream, or return the text"


def test_no_module_imports_another_module_s_private_name():
    """A module's `_name` is its own: another kit module that needs it asks for a public name (the
    seams issue 25 made: kit.spark.executor, kit.spark.checkpoint_store, NDArray's rooms)."""
    found = []
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "kit":
                found += [f"{name}: from {node.module} import {a.name}" for a in node.names if _private(a.name)]
                if _private(node.module.rsplit(".", 1)[-1]):
                    found.append(f"{name}: from {node.module} (a private module)")
            if isinstance(node, ast.Import):
                found += [
                    f"{name}: import {a.name}"
                    for a in node.names
                    if a.name.startswith("kit.") and _private(a.name.rsplit(".", 1)[-1])
                ]
    assert not found, "private names imported across modules:\n" + "\n".join(found)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")
