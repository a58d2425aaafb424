"""What the migrations add to a start: `Store(url)` on a fresh database (every table created) and
on one already at head (one version check), SQLite file and a private PostgreSQL cluster.

    python -m bench.store_migrate [--repeat 5]

Needs the Debian `postgresql` binaries and psycopg for the PostgreSQL half (tests/support/postgres.py).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack

from monitor.store.session import Store
from tests.support.postgres import fresh_database, postgres_server


def timed(url: Callable[[int], str], repeat: int) -> tuple[float, float]:
    """Median milliseconds: (fresh database, the same database at head)."""
    fresh: list[float] = []
    again: list[float] = []
    for i in range(repeat):
        target = url(i)
        for into in (fresh, again):
            start = time.perf_counter()
            Store(target).close()
            into.append((time.perf_counter() - start) * 1000)
    return statistics.median(fresh), statistics.median(again)


def report(name: str, medians: tuple[float, float]) -> None:
    print(f"{name:<12} fresh {medians[0]:.1f} ms, at head {medians[1]:.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    repeat = parser.parse_args().repeat
    folder = tempfile.mkdtemp(prefix="infermon-bench-")
    report("sqlite file", timed(lambda i: f"sqlite:///{folder}/{i}.db", repeat))
    with ExitStack() as stack:
        server = stack.enter_context(postgres_server())
        report("postgresql", timed(lambda i: stack.enter_context(fresh_database(server, f"bench_{i}")), repeat))


if __name__ == "__main__":
    main()
