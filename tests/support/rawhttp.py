"""HTTP/1.1 written by hand on loopback, in the running loop: for what happens on a connection
(kept alive, closed without an answer, closed by the client) that a framework's server hides."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from abc import ABC, abstractmethod


class RawHttpServer(ABC):
    """Counts connections (all, and open now) and requests. Subclasses say what to answer to the
    `served`-th request of a connection; None closes it unanswered."""

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.tls = tls  # a server context: HTTPS
        self.connections = 0
        self.open = 0
        self.requests = 0
        self.server: asyncio.Server | None = None

    @abstractmethod
    def answer(self, served: int) -> bytes | None:
        """The bytes to send for the `served`-th request of a connection (0 first); None: close it."""

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls)
        scheme = "https" if self.tls else "http"
        return f"{scheme}://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.open += 1
        served = 0
        try:
            # The client closing the connection is the end these servers wait for, and count.
            with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
                while True:
                    await reader.readuntil(b"\r\n\r\n")
                    self.requests += 1
                    answer = self.answer(served)
                    if answer is None:
                        break
                    writer.write(answer)
                    await writer.drain()
                    served += 1
        finally:
            self.open -= 1
            writer.close()
