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
    assert (
        "kit.core.memory" in graph["kit.arrays.ndarray"]
        and "kit.workspaces.workspace" in graph["kit.arrays.ndarray_copies"]
    )  # real edges
    cycle = _find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_core_layers_point_one_way():
    graph = _graph()
    order = [
        "kit.core.backend",
        "kit.core.cpu_threads",
        "kit.core.device_rng",
        "kit.core.device_objects",
        "kit.core.device_transfers",
        "kit.core.devices",
        "kit.core.context",
        "kit.core.memory",
        "kit.workspaces.workspace_errors",
        "kit.workspaces.workspace_config",
        "kit.workspaces.workspace_registry",
        "kit.workspaces.workspace_cycles",
        "kit.workspaces.workspace",
        "kit.arrays.ndarray_operators",
        "kit.arrays.ndarray_host",
        "kit.arrays.ndarray_views",
        "kit.arrays.ndarray_copies",
        "kit.arrays.ndarray",
    ]
    for low_index, low in enumerate(order):
        for high in order[low_index + 1 :]:
            assert high not in graph[low], f"{low} imports {high}, a layer above it"
    assert "kit.arrays.creation" not in graph["kit.core.memory"]
    assert (
        "kit.monitor.readings" not in graph["kit.core.memory"]
        and "kit.workspaces.workspace" in graph["kit.monitor.readings"]
    )


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
            if "cupy" in roots and name != "kit.core.backend":
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


# ---- the house: rooms (a top-level module, or a wing: a sub-package) and their floors ----------

TOP_LEVEL_LIMIT = 15  # issue 42: 51 loose modules at the top before the wings, 6 after
FLOOR_LIMIT = 12  # issue 42: 19 floors before the wings, 11 after
WINGS_BOTTOM_UP = ["kit.core", "kit.workspaces", "kit.arrays", "kit.data", "kit.nn", "kit.parallel", "kit.training"]


def _room(module: str) -> str:
    return ".".join(module.split(".")[:2])


def _rooms(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The import graph with each wing folded into one room; kit's own __init__ (the facade that
    re-exports every room) is left out, as nothing below it may import it."""
    rooms: dict[str, set[str]] = {}
    for module, targets in graph.items():
        if module == "kit":
            continue
        room = _room(module)
        rooms.setdefault(room, set()).update(_room(t) for t in targets if t != "kit" and _room(t) != room)
    return rooms


def _floors(rooms: dict[str, set[str]]) -> dict[str, int]:
    """Each room's floor: 1 for a room that imports no other, else one above the highest it imports."""
    floor: dict[str, int] = {}

    def visit(room: str) -> int:
        if room not in floor:
            floor[room] = 1 + max((visit(r) for r in rooms[room]), default=0)
        return floor[room]

    for room in rooms:
        visit(room)
    return floor


def test_the_floor_counter_counts_the_longest_chain():
    assert _floors({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == {"a": 3, "b": 2, "c": 1}
    assert _rooms({"kit": {"kit.x"}, "kit.x.a": {"kit.x.b", "kit.y"}, "kit.x.b": set(), "kit.y": {"kit"}}) == {
        "kit.x": {"kit.y"},
        "kit.y": set(),
    }


def test_no_import_cycle_among_rooms():
    rooms = _rooms(_graph())
    cycle = _find_cycle(rooms)
    assert cycle is None, "rooms import each other in a circle: " + " -> ".join(cycle or [])


def test_the_top_level_is_a_few_modules_and_the_wings():
    top = sorted(name for name, path in MODULES.items() if name.count(".") == 1 and path.name != "__init__.py")
    assert "kit.settings" in top and "kit.state" in top  # real names: the walk saw the top level
    assert len(top) <= TOP_LEVEL_LIMIT, f"{len(top)} modules at the top of kit/: {top}; put each in its wing"


def test_the_house_has_at_most_twelve_floors():
    rooms = _rooms(_graph())
    floors = _floors(rooms)
    assert floors["kit.settings"] == 1 and floors["kit.core"] > floors["kit.state"]  # real rooms, real edges
    highest = max(floors.values())
    tower = sorted(floors, key=floors.get, reverse=True)[:3]
    assert highest <= FLOOR_LIMIT, f"{highest} floors (the highest rooms: {tower}); flatten the import chain"


def test_the_wings_point_one_way():
    """The array core is three wings, each built on the ones below: a reader starts at kit.core."""
    rooms = _rooms(_graph())
    for low_index, low in enumerate(WINGS_BOTTOM_UP):
        above = set(WINGS_BOTTOM_UP[low_index + 1 :]) & rooms[low]
        assert not above, f"{low} imports {sorted(above)}, a wing above it"
    assert not rooms["kit.measurement"] & {"kit.arrays", "kit.workspaces", "kit.monitor", "kit.training"}
