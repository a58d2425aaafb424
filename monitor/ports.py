"""A free loopback port for a server that binds it a moment later (the demo's, the tests' and the
benches' helper servers).

Binding port 0 and letting it go hands out a port from the kernel's ephemeral range, the range it
also draws from for every outgoing connection: on a busy machine one of those can take the port in
the seconds before the server binds it, and the server fails with "address already in use". A port
below that range is only ever taken by a bind that names it, so it is picked there, at random, and
checked free by binding it (no SO_REUSEADDR: a port with connections still in TIME-WAIT counts as
taken, as it would for a server that does not set it).
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST = 15000  # above the well-known and the usual fixed service ports (5432, 8080, 9090, 9093 …)
_handed: set[int] = set()  # this process's own picks, never handed out twice
_share = (0, 1)  # (index, count): this process picks from every count-th port of the pool, from index


def share(index: int, count: int) -> None:
    """Pick only every `count`-th port of the pool, starting at the `index`-th: processes that
    pick ports side by side (the test suite's workers) each take a share no other picks from."""
    global _share
    if not 0 <= index < count:
        raise ValueError(f"share {index} of {count}")
    _share = (index, count)


def ephemeral_range() -> tuple[int, int]:
    """The kernel's (first, last) port for outgoing connections; IANA's where it does not say."""
    try:
        first, last = (int(part) for part in EPHEMERAL_RANGE.read_text().split())
    except (OSError, ValueError):
        return 49152, 65535
    return first, last


def _pool() -> range:
    first, last = ephemeral_range()
    if first - LOWEST >= 1000:
        whole = range(LOWEST, first)
    else:
        whole = range(last + 1, 65536) if 65535 - last >= 1000 else range(LOWEST, 65536)
    index, count = _share
    return whole[index::count]


def _binds(host: str, port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing on `host` holds now, outside the ephemeral range where it can be."""
    pool = _pool()
    for _ in range(200):
        port = random.choice(pool)
        if port not in _handed and _binds(host, port):
            _handed.add(port)
            return port
    with socket.socket() as sock:  # a crowded pool: the kernel's pick, race and all
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
