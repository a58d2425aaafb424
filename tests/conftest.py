import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist each worker picks its loopback ports from a slice of its own of the
    pool (`monitor.ports`), so two workers never hand out the same port in the moment between
    the check and the server's bind."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER"), os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if worker and count:
        from monitor.ports import share

        share(int(worker.removeprefix("gw")), int(count))


# How `make test` shares the suite out on pytest-xdist workers. The controller sees only the
# tests' ids, so the files that go another way than as a whole are named here; the workers, which
# see the marks, check the names against them (pytest_collection_modifyitems).
# - SPREAD: test by test, on any worker: minutes of independent worlds each (no module fixture).
# - ALONE: marked `alone` (a latency or timing bar the neighbours' load would break): first, on one worker,
#   while the others wait.
SPREAD = frozenset({"tests/alerting/test_scorecard.py", "tests/service/test_scale_bench.py"})
ALONE = frozenset({"tests/test_connections.py", "tests/test_hostile_bodies.py",
                   "tests/alerting/test_store_off_loop.py", "tests/canary/test_sim_timings.py",
                   "tests/loadtest/test_run_sim.py", "tests/loadtest/test_compare.py",
                   "tests/loadtest/test_hypotheses.py", "tests/loadtest/test_capacity.py",
                   "tests/integration/test_vs_prometheus.py"})


def _file(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`make test`'s scheduling (pytest -n N): a test file is one unit of work, run on one worker
    in its own order, so a module-scoped fixture (a demo, a Prometheus, a llama-server, a browser)
    starts once, as it does alone; SPREAD's files go test by test, ALONE's first with nothing beside.
    The units are handed out in the collection's order (the long tests first), not xdist's
    most-tests-first."""
    if config.getvalue("dist") != "load":  # another --dist asked for by hand
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ByFile(LoadScopeScheduling):  # type: ignore[misc]  # xdist ships no type hints
        def _split_scope(self, nodeid: str) -> str:
            return nodeid if _file(nodeid) in SPREAD else _file(nodeid)

        def _assign_work_unit(self, node: Any) -> None:
            if self._alone_elsewhere(node):
                return  # handed out once the tests marked alone have ended (every completion reschedules)
            super()._assign_work_unit(node)

        def mark_test_complete(self, node: Any, item_index: int, duration: float = 0) -> None:
            super().mark_test_complete(node, item_index, duration)
            for other in self.nodes:
                if other is not node:
                    self._reschedule(other)

        def _alone_elsewhere(self, node: Any) -> bool:
            """Whether another worker has tests of ALONE still to run. The worker running them gets
            its next unit meanwhile: a worker holds its last test back until it knows the next."""
            return any(not done for other, work in self.assigned_work.items() if other is not node
                       for scope, tests in work.items() if _file(scope) in ALONE for done in tests.values())

    config.option.loadscopereorder = False
    return ByFile(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On an xdist worker (the controller hands out the workers' collection in its order): ALONE's
    files first, then the tests marked `long` (a minute of a world or a real server), so none of
    them starts last and holds the run's end. Alone, pytest keeps the files' order."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    for item in items:
        path, alone = _file(item.nodeid), item.get_closest_marker("alone") is not None
        if path in SPREAD and _uses_a_module_fixture(item):
            raise pytest.UsageError(f"{item.nodeid}: a file in SPREAD (tests/conftest.py) runs test by test "
                                    "on several workers and must hold no module-scoped fixture")
        if alone != (path in ALONE):
            raise pytest.UsageError(f"{item.nodeid}: a test marked `alone` is in a file of ALONE (tests/conftest.py), "
                                    "and every test of such a file is marked (pytestmark)")
    items.sort(key=lambda item: (_file(item.nodeid) not in ALONE, item.get_closest_marker("long") is None))


def _uses_a_module_fixture(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    return info is not None and any(defs[-1].scope == "module" for defs in info.name2fixturedefs.values())


def require_binary(name: str) -> str:
    """The path of a real binary (prometheus, promtool); in CI a missing one fails the run."""
    path = shutil.which(name)
    if path is None:
        message = f"{name} not found: install the Debian package 'prometheus' (apt-get install prometheus)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path


@pytest.fixture(autouse=True)
def _memory_store(monkeypatch: pytest.MonkeyPatch) -> None:
    """Monitors built by tests keep their history in memory, not in ./infermon.db."""
    monkeypatch.setenv("INFERMON_STORAGE__URL", "sqlite://")


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """One private PostgreSQL cluster for the whole run, started on first use (tests/support/postgres.py)."""
    from tests.support.postgres import postgres_server

    with postgres_server() as url:
        yield url


@pytest.fixture
def pg_url(pg_server: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh, empty database on the tests' PostgreSQL server."""
    from tests.support.postgres import fresh_database

    with fresh_database(pg_server, request.node.name) as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The storage tests run on both databases: a SQLite file and a real PostgreSQL server.
    Also set as INFERMON_STORAGE__URL, which wins over the tests' default in-memory store."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'history.db'}"
    else:
        url = str(request.getfixturevalue("pg_url"))
    monkeypatch.setenv("INFERMON_STORAGE__URL", url)
    return url
