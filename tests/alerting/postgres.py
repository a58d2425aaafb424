"""A throwaway PostgreSQL server for tests: its own cluster in a temp folder, a free port,
stopped by its pid file (pg_ctl). Skips when the server binaries or the driver are missing."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


def _bindir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _as_server_user(args: list[str]) -> list[str]:
    # initdb and postgres refuse to run as root
    return ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else args


@contextmanager
def postgres_server() -> Iterator[str]:
    """Yields an SQLAlchemy URL (psycopg) of a fresh server's `postgres` database."""
    pytest.importorskip("psycopg")
    bindir = _bindir()
    if bindir is None:
        pytest.skip("PostgreSQL server binaries not found (Debian package 'postgresql')")
    root = Path(tempfile.mkdtemp(prefix="infermon-pg-"))
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    data = root / "data"
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    initdb = [str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "infermon", "--no-sync"]
    subprocess.run(_as_server_user(initdb), check=True, capture_output=True, timeout=60)
    options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off"
    start = [str(bindir / "pg_ctl"), "-D", str(data), "-o", options, "-w", "-l", str(root / "log"), "start"]
    subprocess.run(_as_server_user(start), check=True, capture_output=True, timeout=60)
    try:
        yield f"postgresql+psycopg://infermon@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(_as_server_user([str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]),
                       capture_output=True, timeout=30, check=False)
        shutil.rmtree(root, ignore_errors=True)
