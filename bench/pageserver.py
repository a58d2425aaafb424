"""A loopback HTTP server for benchmarks: serves growing copies of engine pages."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class PageServer:
    """Serve `pages[path]()` on 127.0.0.1 (a callable, so a page can change between scrapes)."""

    def __init__(self, pages: dict[str, Callable[[], bytes]]) -> None:
        server_pages = pages

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as uvicorn (vLLM) and Go servers do
            disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms delayed-ACK stall

            def do_GET(self) -> None:
                page = server_pages.get(self.path.split("?", 1)[0])
                if page is None:
                    self.send_error(404)
                    return
                body = page()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> PageServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def growing(variants: list[bytes], step_seconds: float = 1.0) -> Callable[[], bytes]:
    """A page whose counters advance with wall time: variant i is served in second i."""
    start = time.monotonic()

    def page() -> bytes:
        index = min(int((time.monotonic() - start) / step_seconds), len(variants) - 1)
        return variants[index]

    return page
