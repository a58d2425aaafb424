"""HTTP metrics of the vLLM V1 simulator, as prometheus-fastapi-instrumentator records them
for a real vLLM server: `http_requests_total{handler,method,status="2xx"}` and
`http_request_duration_seconds{handler,method}`, handler = the route template.

A pure ASGI middleware (not BaseHTTPMiddleware) so streaming bodies pass through untouched and
the duration covers the whole body, as the instrumentator's does.
"""

from __future__ import annotations

import time
from typing import Protocol

from starlette.types import ASGIApp, Message, Receive, Scope, Send

# vLLM passes these to Instrumentator(excluded_handlers=...): probes do not count.
EXCLUDED_HANDLERS = frozenset({"/metrics", "/health", "/load", "/ping", "/version"})


class HttpRecorder(Protocol):
    def record_http(self, handler: str, method: str, status_code: int, duration_s: float) -> None: ...


class HttpMetricsMiddleware:
    def __init__(self, app: ASGIApp, metrics: HttpRecorder) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # what the client gets if the app raises before answering

        async def send_and_note_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_note_status)
        finally:
            # The router stores the matched route in the scope; unmatched paths are grouped
            # as "none" (the instrumentator's should_group_untemplated).
            handler = getattr(scope.get("route"), "path", "none")
            if handler not in EXCLUDED_HANDLERS:
                duration = time.perf_counter() - started
                self.metrics.record_http(handler, scope["method"], status, duration)
