"""The house's layout, read from the code (docs/architecture.md, "Layers and what may import what").

Every import in `monitor/` counts: module level, inside functions, under `TYPE_CHECKING`. A circle
is a pair of modules a reader cannot understand one before the other; a settings model or a store
that imports a layer is the layer below reaching up.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "monitor"
LAYERS = ("service", "infra", "quality", "cost", "canary")
ABOVE_LAYERS = ("alerting", "web", "runtime", "layer", "schema", "settings_check", "app", "cli", "demo", "sim",
                "loadtest", "dashboards")
# The levels of docs/architecture.md's picture, top first; a package or module not named is the base.
# An import goes to a lower level, or stays inside its own package; of the layers, none imports another
# of its own level (service, infra and quality stand alone; cost and canary read them).
LEVELS = (
    ("cli", "app", "demo", "sim", "loadtest", "dashboards"),
    ("runtime", "layer", "schema", "settings_check"),
    ("alerting", "web"),
    ("cost", "canary"),
    ("service", "infra", "quality"),
    ("history",),
    ("store", "rulefiles"),
)
ALONE_AT_LEVEL = {("cost", "canary"), ("service", "infra", "quality")}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(tree: ast.AST, package: str, modules: set[str]) -> Iterator[str]:
    """The modules of `monitor` that `tree` imports (`from a import b` counts `a.b` when it is a module)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                name = alias.name
                while name and name not in modules:
                    name = name.rpartition(".")[0]
                if name:
                    yield name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            for alias in node.names:
                if f"{base}.{alias.name}" in modules:
                    yield f"{base}.{alias.name}"
                elif base in modules:
                    yield base


def import_graph() -> dict[str, set[str]]:
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    modules = set(paths)
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        graph[name] = set(imports(ast.parse(path.read_text(), str(path)), package, modules)) - {name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph()


def _reaching(graph: dict[str, set[str]], prefix: str, forbidden: tuple[str, ...]) -> dict[str, list[str]]:
    bad = tuple(f"monitor.{name}" for name in forbidden)
    return {module: sorted(d for d in deps if _under(d, bad))
            for module, deps in graph.items() if _under(module, (prefix,)) and any(_under(d, bad) for d in deps)}


def _under(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def test_the_graph_reader_sees_every_kind_of_import() -> None:
    """The reader itself: a function-level import, a TYPE_CHECKING one, a relative one, `from pkg import mod`."""
    source = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from monitor.b import X\n"
              "def f():\n    import monitor.c.d\nfrom . import e\nfrom .c import d\n")
    modules = {"monitor.a", "monitor.b", "monitor.c", "monitor.c.d", "monitor.e"}
    assert set(imports(ast.parse(source), "monitor", modules)) == {"monitor.b", "monitor.c.d", "monitor.e"}
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circles(graph: dict[str, set[str]]) -> None:
    assert circles(graph) == []


def test_the_settings_model_imports_no_layer(graph: dict[str, set[str]]) -> None:
    assert _reaching(graph, "monitor.config", LAYERS + ABOVE_LAYERS + ("store",)) == {}


def test_the_store_imports_no_layer(graph: dict[str, set[str]]) -> None:
    """`monitor/store` is the session, the worker, the base model and the migrations; each layer's
    tables and queries live with the layer."""
    assert _reaching(graph, "monitor.store", LAYERS + ABOVE_LAYERS) == {}


def top(module: str) -> str:
    """`monitor.service.target` -> `service`; `monitor` itself is the package's `__init__`."""
    return module.split(".")[1] if "." in module else ""


def level(module: str) -> int:
    """0 for the top of the picture; the base (every module not named in LEVELS) is the lowest."""
    return next((i for i, names in enumerate(LEVELS) if top(module) in names), len(LEVELS))


def upward(graph: dict[str, set[str]]) -> list[str]:
    wrong = []
    for module, deps in graph.items():
        for dep in sorted(deps):
            if top(dep) == top(module) or module == "monitor":
                continue
            here = level(module)
            if level(dep) < here or (level(dep) == here < len(LEVELS) and LEVELS[here] in ALONE_AT_LEVEL):
                wrong.append(f"{module} -> {dep}")
    return wrong


def test_imports_only_point_down(graph: dict[str, set[str]]) -> None:
    """A layer reads its sources and derives; alerting, the pages, the runtime and the CLI read the layers."""
    assert upward(graph) == []


def test_the_levels_check_catches_an_import_up() -> None:
    assert upward({"monitor.service.target": {"monitor.alerting.evaluator"}}) == [
        "monitor.service.target -> monitor.alerting.evaluator"]
    assert upward({"monitor.quality.run": {"monitor.service.view"}}) == ["monitor.quality.run -> monitor.service.view"]
    assert upward({"monitor.config": {"monitor.store.session"}}) == ["monitor.config -> monitor.store.session"]
    assert upward({"monitor.cost.derive": {"monitor.service.view", "monitor.config"},
                   "monitor.web.page": {"monitor.alerting.embedded"}}) == []
