"""A throwaway PostgreSQL server for tests: its own cluster (initdb) in a temp folder, a free
port on 127.0.0.1 and its unix socket in that folder, stopped by the postmaster's pid and
removed at the end. Without the server binaries or the driver the tests skip; in CI (CI set)
they fail instead, so a broken CI image cannot pass by skipping."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from monitor.ports import free_port

MISSING = "PostgreSQL server binaries not found: install the Debian package 'postgresql' (apt-get install postgresql)"


def _missing(message: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def _bindir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _as_server_user(args: list[str]) -> list[str]:
    # initdb and postgres refuse to run as root: run them as the package's `postgres` user
    return ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else args


def _stop(data: Path) -> None:
    """Immediate shutdown of this cluster's postmaster, by the pid in its pid file."""
    pidfile = data / "postmaster.pid"
    if not pidfile.exists():
        return
    pid = int(pidfile.read_text().split()[0])
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGQUIT)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            os.kill(pid, 0)  # raises once it is gone
            time.sleep(0.05)
        os.kill(pid, signal.SIGKILL)


@contextmanager
def postgres_server() -> Iterator[str]:
    """Yields an SQLAlchemy URL (psycopg) of a fresh server's `postgres` database."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        _missing("psycopg not installed: pip install -e '.[dev]'")
    bindir = _bindir()
    if bindir is None:
        _missing(MISSING)
        raise AssertionError("unreachable")
    root = Path(tempfile.mkdtemp(prefix="infermon-pg-"))
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    data, port = root / "data", free_port()
    initdb = [str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "infermon", "--no-sync"]
    options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
    start = [str(bindir / "pg_ctl"), "-D", str(data), "-o", options, "-w", "-l", str(root / "log"), "start"]
    try:
        subprocess.run(_as_server_user(initdb), check=True, capture_output=True, timeout=120)
        subprocess.run(_as_server_user(start), check=True, capture_output=True, timeout=120)
        yield f"postgresql+psycopg://infermon@127.0.0.1:{port}/postgres"
    finally:
        _stop(data)
        shutil.rmtree(root, ignore_errors=True)


@contextmanager
def fresh_database(server: str, name: str) -> Iterator[str]:
    """A new, empty database on `server` for one test; dropped afterwards."""
    name = "t_" + "".join(c if c.isalnum() else "_" for c in name.lower())[:55]
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        yield server.rsplit("/", 1)[0] + "/" + name
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()
