"""The monitor's own HTTP server: uvicorn, with the limits that keep it answering under a flood.

- `server.max_connections`: at the cap, the connection that has waited longest without sending
  a request is closed to make room (a slow-connection flood evicts itself; a probe that sends
  its request at once gets in). Capped below the process's descriptor limit minus
  `server.fd_reserve`, so scrapes and the database always have descriptors left.
- `server.header_timeout`: a connection that has not sent a whole request head by then is
  closed (uvicorn has no such timeout; a byte every few seconds would hold one forever).
- `server.timeout_keep_alive`, `server.max_header_bytes`: uvicorn's and h11's own limits.
- the soft RLIMIT_NOFILE is raised to the hard one at start-up.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import resource
import socket
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from monitor.config import ServerSettings

log = logging.getLogger("monitor.server")


class CannotListen(Exception):
    """The server's address cannot be bound; the message says which setting to change."""


def listening_socket(host: str, port: int, name: str, fix: str) -> socket.socket:
    """The server's socket, bound before anything else starts (uvicorn binds after the monitor's
    start-up, and a port in use ended it with a traceback per task). `name` leads the message (the
    key, `server.port`), `fix` says how to pick another port."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn: TIME-WAIT does not block a restart
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise CannotListen(f"{name}: port {port} on {host} is already in use (another infermon serve or "
                               f"demo?): stop it, or {fix}") from None
        if exc.errno == errno.EACCES:
            raise CannotListen(f"{name}: port {port} on {host}: permission denied (below 1024 needs root): "
                               f"{fix}") from None
        raise CannotListen(f"server.host: cannot listen on {host}:{port}: {exc.strerror or exc}: set server.host "
                           "(INFERMON_SERVER__HOST, --host) to an address of this machine, or 0.0.0.0") from None
    sock.set_inheritable(True)
    return sock


def raise_fd_limit() -> int:
    """The soft limit on open descriptors raised to the hard one; returns the limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 16)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass  # not permitted here: the soft limit stays, and the connection cap is sized from it
    return soft


def connection_cap(settings: ServerSettings, fd_limit: int) -> int:
    """`max_connections`, lowered so `fd_reserve` descriptors stay free for everything else."""
    return max(8, min(settings.max_connections, fd_limit - settings.fd_reserve))


def guarded_protocol(cap: int, header_timeout: float) -> type[H11Protocol]:
    """uvicorn's h11 protocol with a connection cap and a request-head timeout."""

    class Guarded(H11Protocol):
        waiting: dict[Guarded, float] = {}  # noqa: RUF012  (connections without a request, since when)

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > cap:
                self._evict()
            self._await_head()

        def _evict(self) -> None:
            oldest = min(self.waiting.items(), key=lambda item: item[1], default=None)
            if oldest is not None:
                oldest[0].transport.close()  # the longest idle one, never this new one
                self.waiting.pop(oldest[0], None)
            else:
                self.transport.close()  # every connection is busy with a request: refuse this one

        def _await_head(self) -> None:
            self._stop_waiting()
            self.waiting[self] = self.loop.time()
            self._head_timer = self.loop.call_later(header_timeout, self._head_timed_out)

        def _stop_waiting(self) -> None:
            self.waiting.pop(self, None)
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_timed_out(self) -> None:
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.transport.close()
            self.waiting.pop(self, None)

        def handle_events(self) -> None:
            super().handle_events()
            if self.conn.their_state is not h11.IDLE:
                self._stop_waiting()  # a request head arrived

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._await_head()  # keep-alive: the next request has the same time to arrive

        def connection_lost(self, exc: Exception | None) -> None:
            self._stop_waiting()
            super().connection_lost(exc)

    return Guarded


def uvicorn_config(app: Any, settings: ServerSettings) -> uvicorn.Config:
    limit = raise_fd_limit()
    cap = connection_cap(settings, limit)
    if cap < settings.max_connections:
        log.warning("server.max_connections lowered to %d: %d descriptors allowed, %d kept for scrapes",
                    cap, limit, settings.fd_reserve)
    # loop="asyncio", not uvicorn's "auto" (uvloop wherever it is installed, as in vLLM's and
    # SGLang's images): the scrape path, the parse workers' pipes and the loop's turns are built and
    # measured on asyncio's own loop. Under uvloop, on a large fleet, the schedule fell far behind
    # with no derived series, and the parse workers did not start (docs/history/measurements-2026.md, tenth stop).
    return uvicorn.Config(
        app, host=settings.host, port=settings.port, log_level=settings.log_level, access_log=False,
        loop="asyncio",
        http=guarded_protocol(cap, settings.header_timeout.seconds),
        timeout_keep_alive=max(1, int(settings.timeout_keep_alive.seconds)),
        h11_max_incomplete_event_size=settings.max_header_bytes,
    )
