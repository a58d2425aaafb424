"""The real app (create_app(monitor)) under uvicorn in a thread, on a free loopback port."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

from monitor.app import create_app
from monitor.runtime import Monitor


@contextmanager
def serve_app(monitor: Monitor) -> Iterator[str]:
    """Yields the base URL once uvicorn has started; stops it (and asserts it stopped) after."""
    with serve_asgi(create_app(monitor)) as url:
        yield url


@contextmanager
def serve_asgi(app: Any) -> Iterator[str]:
    """Any ASGI app under uvicorn in a thread; yields its base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(app, loop="asyncio", http="h11", ws="none", lifespan="on",
                            log_level="warning", log_config=None, access_log=False, timeout_graceful_shutdown=2)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.01)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
    assert not thread.is_alive(), "uvicorn did not stop"
