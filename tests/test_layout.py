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
ABOVE_LAYERS = ("alerting", "web", "runtime", "schema", "settings_check", "app", "cli", "demo", "sim",
                "loadtest", "dashboards")
# The levels of docs/architecture.md's picture, top first; a package or module not named is the base.
# An import goes to a lower level, or stays inside its own package; of the layers, none imports another
# of its own level (service, infra and quality stand alone; cost and canary read them).
LEVELS = (
    ("cli", "app", "demo", "sim", "loadtest", "dashboards"),
    ("runtime", "schema", "settings_check"),
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


def test_each_layer_adapts_itself_and_layer_py_holds_only_the_shape(graph: dict[str, set[str]]) -> None:
    """`monitor/layer.py` is the shared `Layer` protocol and `Job`, at the base: it imports no layer,
    so no layer's adapter can live there; each layer's is its `part.py`, built on that protocol."""
    assert _reaching(graph, "monitor.layer", LAYERS + ABOVE_LAYERS) == {}
    for layer in LAYERS:
        assert "monitor.layer" in graph.get(f"monitor.{layer}.part", set()), f"monitor/{layer}/part.py"
    adapters = [node.name for node in ast.parse((PACKAGE / "layer.py").read_text()).body
                if isinstance(node, ast.ClassDef) and node.name not in ("Job", "Part", "Layer", "OwnPart")]
    assert adapters == []


# What the alert tick does with the evaluator (monitor/alerting/tick.py): the runtime only schedules it.
_ALERT_TICK_ONLY = {"lock", "history_days", "take_history_days", "keep_history_days", "advance", "advance_page",
                    "advance_samples", "changes", "write"}


def test_the_runtime_leaves_the_alert_tick_to_alerting() -> None:
    """The runtime wires and schedules: it never takes the evaluator's lock, advances the rules, or
    writes or re-queues the history's days itself."""
    tree = ast.parse((PACKAGE / "runtime.py").read_text())
    touched = sorted({node.attr for node in ast.walk(tree)
                      if isinstance(node, ast.Attribute) and node.attr in _ALERT_TICK_ONLY
                      and isinstance(node.value, ast.Attribute) and node.value.attr == "alerting"})
    assert touched == []


TESTS = ROOT / "tests"


def bench_imports(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """(line, module) of each import of `bench` or a module under it: `import bench.x`, `from bench
    import x`, `from bench.x import y`, and `importlib.import_module("bench.x")` with a literal name."""
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute | ast.Name)
              and getattr(node.func, "attr", getattr(node.func, "id", "")) in ("import_module", "__import__")
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            names = [node.args[0].value]
        for name in names:
            if name == "bench" or name.startswith("bench."):
                yield node.lineno, name


def bench_importers(tests: Path) -> list[str]:
    """`tests/<path>:<line> imports <module>` for every file under `tests` that imports the benchmarks."""
    return [f"{path.relative_to(tests.parent)}:{line} imports {name}"
            for path in sorted(tests.rglob("*.py"))
            for line, name in bench_imports(ast.parse(path.read_text(), str(path)))]


def test_no_test_imports_a_benchmark() -> None:
    """The suite owns its support (tests/support/); `bench/` may use it, never the other way round.
    A test of a bench runs it as its operator does (tests/support/bench_process.py)."""
    assert bench_importers(TESTS) == []


def test_the_bench_check_names_the_file_and_the_import(tmp_path: Path) -> None:
    source = ("import bench\nimport bench.scale as s\nfrom bench import gpu_check\nfrom bench.pages import x\n"
              "def f():\n    importlib.import_module('bench.fleet_view')\n"
              "from tests.loadtest.conftest import bench\nfrom .bench import y\nimport benchmarks\n")
    assert list(bench_imports(ast.parse(source))) == [
        (1, "bench"), (2, "bench.scale"), (3, "bench"), (4, "bench.pages"), (6, "bench.fleet_view")]
    (tmp_path / "tests" / "service").mkdir(parents=True)
    (tmp_path / "tests" / "service" / "test_x.py").write_text("import os\n\nfrom bench.scale import run\n")
    (tmp_path / "tests" / "test_y.py").write_text("from tests.support.pages import v1_page\n")
    assert bench_importers(tmp_path / "tests") == ["tests/service/test_x.py:3 imports bench.scale"]


# -- one wire (docs/architecture.md, "One wire") ---------------------------------------------------
# An HTTP/1.1 client of the monitor's own is the wire's (monitor/wire/): the scrapes of `infermon
# serve` and the bench's stream. httpx is the client of everything else, each user named here with
# what it talks to; a new one is a line in this table and a reason, never a third client.
WIRE = "monitor/wire/"
HTTPX_USERS = {
    "monitor/runtime.py": "the injected client: dcgm-exporter, version probes, `infermon check`, the receivers",
    "monitor/cli.py": "`infermon` commands that read a Prometheus (the history import)",
    "monitor/quality/judge_http.py": "the judge's SDK client, its answers through the wire's byte cap",
    "monitor/quality/sources/langfuse.py": "Langfuse's public API",
    "monitor/loadtest/load.py": "the SDK path (`--client openai`), its answers through the wire's byte cap",
    "monitor/loadtest/run.py": "the bench's engine-page and GPU reads during a window",
    "monitor/loadtest/cli.py": "the bench's dcgm-exporter source",
    "monitor/sim/load.py": "the simulator's load generator",
    "monitor/sim/quality_feed.py": "the demo's request-log feed",
}
SERVER_SIDE = {"monitor/server.py": "the monitor's own server: uvicorn's h11 protocol, server side"}
_HTTPX_CLIENTS = {"Client", "AsyncClient", "HTTPTransport", "AsyncHTTPTransport"}
_PARSERS = {"h11", "httptools"}


def http_clients(path: str, tree: ast.AST) -> Iterator[str]:
    """`path:line what` for each HTTP client made in `tree`: an httpx client or transport built, an
    HTTP parser imported, an asyncio protocol or connection of its own."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for name in names:
                if name.split(".")[0] in _PARSERS and path not in SERVER_SIDE:
                    yield f"{path}:{node.lineno} imports {name}"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            if isinstance(owner, ast.Name) and owner.id == "httpx" and node.func.attr in _HTTPX_CLIENTS \
                    and path not in HTTPX_USERS:
                yield f"{path}:{node.lineno} builds httpx.{node.func.attr}"
            elif node.func.attr == "create_connection":
                yield f"{path}:{node.lineno} opens a connection of its own (create_connection)"
        elif isinstance(node, ast.ClassDef):
            for base in node.bases:
                if isinstance(base, ast.Attribute) and base.attr in ("Protocol", "BufferedProtocol") \
                        and isinstance(base.value, ast.Name) and base.value.id == "asyncio":
                    yield f"{path}:{node.lineno} defines an asyncio protocol ({node.name})"


def test_one_wire_every_http_client_is_the_wires_or_a_named_httpx_user() -> None:
    found = []
    for file in sorted(PACKAGE.rglob("*.py")):
        path = file.relative_to(ROOT).as_posix()
        if not path.startswith(WIRE):
            found += http_clients(path, ast.parse(file.read_text(), path))
    assert found == [], "HTTP clients outside monitor/wire/ and the named httpx users:\n" + "\n".join(found)
    for path in [*HTTPX_USERS, *SERVER_SIDE]:
        assert (ROOT / path).exists(), f"{path} is named in HTTPX_USERS/SERVER_SIDE but is gone"


def test_the_wire_check_names_file_and_line() -> None:
    source = ("import httptools\nimport httpx\nc = httpx.AsyncClient()\nclass P(asyncio.Protocol):\n    pass\n"
              "loop.create_connection(P, 'h', 1)\n")
    assert sorted(http_clients("monitor/x.py", ast.parse(source))) == [
        "monitor/x.py:1 imports httptools", "monitor/x.py:3 builds httpx.AsyncClient",
        "monitor/x.py:4 defines an asyncio protocol (P)",
        "monitor/x.py:6 opens a connection of its own (create_connection)"]
    assert list(http_clients("monitor/runtime.py", ast.parse("import httpx\nhttpx.AsyncClient()\n"))) == []


def promql_parsers(root: Path) -> list[str]:
    """The modules outside `monitor/rulefiles/` that import the PromQL parser, `file:line`."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if "rulefiles" in path.relative_to(root).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(name.split(".")[0] == "promql_parser" for name in names):
                found.append(f"{path.relative_to(root.parent)}:{node.lineno}")
    return found


def test_one_rule_language_only_rulefiles_parses_promql(tmp_path: Path) -> None:
    """Every expression, instant and trend, is parsed by `rulefiles/promql.py`; a second front end
    elsewhere is a twin to keep equal."""
    assert promql_parsers(PACKAGE) == []
    assert not (PACKAGE / "rulefiles" / "expr.py").exists()
    (tmp_path / "monitor" / "web").mkdir(parents=True)
    (tmp_path / "monitor" / "web" / "x.py").write_text("import os\nfrom promql_parser import parse\n")
    assert promql_parsers(tmp_path / "monitor") == ["monitor/web/x.py:2"]
