"""`free_port`: a port below the kernel's ephemeral range, free now, never handed out twice."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from monitor import ports


def test_the_port_is_outside_the_ephemeral_range_and_binds():
    first, last = ports.ephemeral_range()
    picked = [ports.free_port() for _ in range(20)]
    assert len(set(picked)) == 20
    for port in picked:
        assert not first <= port <= last
        assert port >= ports.LOWEST
        with socket.socket() as server:
            server.bind(("127.0.0.1", port))
            server.listen()


def test_a_held_port_is_skipped(monkeypatch):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        taken = held.getsockname()[1]
        draws = iter([taken, taken, 23456])
        monkeypatch.setattr(ports.random, "choice", lambda pool: next(draws))
        monkeypatch.setattr(ports, "_handed", set())
        assert ports.free_port() == 23456
        # and once handed out, it is not handed out again, free as it still is
        draws = iter([23456, 23457])
        assert ports.free_port() == 23457


def test_the_range_is_read_from_the_kernel_and_defaults_to_ianas(monkeypatch, tmp_path: Path):
    monkeypatch.setattr(ports, "_share", (0, 1))  # the whole pool, under pytest-xdist too
    table = tmp_path / "ip_local_port_range"
    table.write_text("40000\t50000\n")
    monkeypatch.setattr(ports, "EPHEMERAL_RANGE", table)
    assert ports.ephemeral_range() == (40000, 50000)
    assert ports._pool() == range(ports.LOWEST, 40000)
    table.write_text("1024 30000\n")  # nothing left below it: above it
    assert ports._pool() == range(30001, 65536)
    table.write_text("1024 65000\n")  # nothing left on either side: anywhere from LOWEST
    assert ports._pool() == range(ports.LOWEST, 65536)
    monkeypatch.setattr(ports, "EPHEMERAL_RANGE", tmp_path / "absent")
    assert ports.ephemeral_range() == (49152, 65535)


@pytest.mark.parametrize("text", ["", "junk", "1 2 3"])
def test_an_unreadable_range_is_ianas(monkeypatch, tmp_path: Path, text: str):
    table = tmp_path / "ip_local_port_range"
    table.write_text(text)
    monkeypatch.setattr(ports, "EPHEMERAL_RANGE", table)
    assert ports.ephemeral_range() == (49152, 65535)


def test_processes_sharing_the_pool_pick_from_parts_that_do_not_meet(monkeypatch, tmp_path: Path):
    table = tmp_path / "ip_local_port_range"
    table.write_text("40000\t50000\n")
    monkeypatch.setattr(ports, "EPHEMERAL_RANGE", table)
    monkeypatch.setattr(ports, "_share", (0, 1))  # restored after the test: this process's share
    parts = []
    for index in range(3):
        ports.share(index, 3)
        parts.append(set(ports._pool()))
    ports.share(0, 1)
    assert parts[0] | parts[1] | parts[2] == set(ports._pool())
    assert not parts[0] & parts[1] and not parts[1] & parts[2] and not parts[0] & parts[2]
    ports.share(1, 3)
    monkeypatch.setattr(ports, "_handed", set())
    assert all(port in parts[1] for port in (ports.free_port() for _ in range(20)))
    with pytest.raises(ValueError):
        ports.share(3, 3)
