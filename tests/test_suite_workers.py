"""`make test` runs the suite on pytest-xdist workers (tests/conftest.py): a test file is one unit,
so a module-scoped fixture starts once, except the files of SPREAD, which go test by test; the
files of ALONE run first with nothing beside them; the tests marked `long` are handed out next;
each worker picks its loopback ports from a share of its own. A toy suite run by a real pytest
in a process of its own, with the same hooks, shows each of these."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CONFTEST = '''
import tests.conftest
from tests.conftest import pytest_collection_modifyitems, pytest_configure, pytest_xdist_make_scheduler  # noqa: F401

tests.conftest.SPREAD = frozenset({"test_spread.py"})
tests.conftest.ALONE = frozenset({"test_alone.py"})
'''

SHARED = '''
import os, time
import pytest

def record(name):
    with open(os.environ["RECORD"], "a") as out:
        out.write(f"{time.monotonic()} {os.environ.get('PYTEST_XDIST_WORKER', 'main')} {name}\\n")

@pytest.fixture(scope="module")
def server():
    record("server-started")
    yield "server"

@pytest.mark.parametrize("n", range(4))
def test_uses_the_server(server, n):
    record(f"shared-{n}")
'''

PLAIN = '''
import os, time
import pytest
from monitor import ports
from tests.test_suite_workers_toy import record

@pytest.mark.parametrize("n", range(6))
def test_quick(n):
    record(f"quick-{n}-share-{ports._share[0]}-of-{ports._share[1]}")
    time.sleep(0.2)

@pytest.mark.long
def test_a_long_one():
    record("long")
    time.sleep(0.2)
'''

SPREAD_TESTS = '''
import time
import pytest
from test_shared import record

@pytest.mark.parametrize("n", range(3))
def test_a_world(n):
    record(f"world-{n}")
    time.sleep(1.0)
'''

ALONE_TESTS = '''
import time
import pytest
from test_shared import record

pytestmark = pytest.mark.alone

def test_a_latency_bar():
    record("alone-started")
    time.sleep(0.3)
    record("alone-ended")
'''


def run_toy(tmp_path: Path, *args: str) -> list[tuple[float, str, str]]:
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    long: first\n    alone: first, alone\n")
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_shared.py").write_text(SHARED)
    (tmp_path / "test_plain.py").write_text(PLAIN.replace("tests.test_suite_workers_toy", "test_shared"))
    (tmp_path / "test_spread.py").write_text(SPREAD_TESTS)
    (tmp_path / "test_alone.py").write_text(ALONE_TESTS)
    record = tmp_path / "record.txt"
    record.unlink(missing_ok=True)
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{tmp_path}", "RECORD": str(record)}
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_ADDOPTS"):
        env.pop(name, None)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "error",
                           "--rootdir", str(tmp_path), *args, str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line.split(" ", 2) for line in record.read_text().splitlines()]
    return sorted((float(at), worker, name) for at, worker, name in rows)


def test_on_workers_a_module_fixture_starts_once_the_spread_file_spreads_and_the_long_test_goes_first(
        tmp_path: Path) -> None:
    rows = run_toy(tmp_path, "-n", "3")
    assert [name for _, _, name in rows].count("server-started") == 1
    assert len({worker for _, worker, name in rows if name.startswith(("shared-", "server-"))}) == 1
    assert len({worker for _, worker, name in rows if name.startswith("world-")}) >= 2
    # the file marked alone ran first, and every other test started after it had ended
    ended = next(at for at, _, name in rows if name == "alone-ended")
    assert rows[0][2] == "alone-started" and rows[1][2] == "alone-ended"
    assert all(at > ended for at, _, name in rows[2:])
    long_worker = next(worker for _, worker, name in rows if name == "long")
    assert next(name for _, worker, name in rows if worker == long_worker and not name.startswith("alone")) == "long"
    shares = {worker: name.split("-share-")[1] for _, worker, name in rows if name.startswith("quick-")}
    assert set(shares) <= {"gw0", "gw1", "gw2"}
    assert all(share == f"{worker[2:]}-of-3" for worker, share in shares.items())


def test_alone_pytest_keeps_the_files_order_and_the_whole_port_pool(tmp_path: Path) -> None:
    names = [name for _, _, name in run_toy(tmp_path, "-p", "no:xdist")]
    assert names.count("server-started") == 1
    assert names.index("long") > max(names.index(f"quick-{n}-share-0-of-1") for n in range(6))
    assert all(name.endswith("-share-0-of-1") for name in names if name.startswith("quick-"))
