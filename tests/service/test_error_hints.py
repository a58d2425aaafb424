"""A target that answers, but not with a metrics page, says how to fix it: llama-server started
without --metrics (its 501 says so), a URL without /metrics (404), a JSON API answer. The same
words reach the target's status (the scrape path under `serve`) and the dcgm exporter's error."""

from __future__ import annotations

import asyncio
import json

from monitor.config import load_settings
from monitor.runtime import Monitor
from tests.support.pageserver import Page, PageServer

# llama.cpp's server answers /metrics without --metrics so (format_error_response, not_supported_error).
LLAMA_501 = json.dumps({"error": {"code": 501, "message": "This server does not support metrics endpoint. "
                                  "Start it with `--metrics`", "type": "not_supported_error"}})
LLAMA_501_OLD = json.dumps({"error": {"code": 501, "message": "This server does not support metrics endpoint.",
                                      "type": "not_supported_error"}})
MODELS = '{"object": "list", "data": [{"id": "qwen", "object": "model"}]}'  # no final line feed


def serve_errors(server: PageServer) -> None:
    server.set("/metrics", Page(LLAMA_501, status=501, content_type="application/json"))
    server.set("/old/metrics", Page(LLAMA_501_OLD, status=501, content_type="application/json"))
    server.set("/v1/models", Page(MODELS, content_type="application/json"))
    # "/" and "/v1" are not set: 404, as an engine answers a path it does not serve


EXPECTED = {
    "llama": "HTTP 501: This server does not support metrics endpoint. Start it with `--metrics`",
    "llama-old": "HTTP 501: This server does not support metrics endpoint. (llama-server: start it with --metrics)",
    "root": "HTTP 404; the engines serve their page at /metrics: set the target's url to {base}/metrics",
    "v1": "HTTP 404; the engines serve their page at /metrics: set the target's url to {base}/metrics",
    "json": "not Prometheus text: the body is JSON (an API's answer, not a metrics page); "
            "the engines serve their page at /metrics",
}


def targets(server: PageServer) -> list[dict[str, str]]:
    return [{"name": "llama", "url": server.url("/metrics")}, {"name": "llama-old", "url": server.url("/old/metrics")},
            {"name": "root", "url": server.url("/")}, {"name": "v1", "url": server.url("/v1?key=x")},
            {"name": "json", "url": server.url("/v1/models")}]


def test_the_target_status_says_the_fix() -> None:
    with PageServer() as server:
        serve_errors(server)
        base = server.url("").rstrip("/")
        settings = load_settings(None, {
            "infra": {"nvml": {"enabled": "false"}, "dcgm": {"targets": [{"name": "d", "url": server.url("/v1")}]}},
            "service": {"scrape_timeout": "2s", "targets": targets(server)}})

        async def run() -> tuple[dict[str, object], str | None]:
            monitor = Monitor(settings)
            try:
                await monitor.run_once()
                return monitor.status(), monitor.infra.dcgm[0].error
            finally:
                await monitor.aclose()

        status, dcgm_error = asyncio.run(run())
    rows = {row["name"]: row for row in status["layers"]["service"]["targets"]}  # type: ignore[index]
    assert {name: row["error"] for name, row in rows.items()} == {
        name: text.format(base=base) for name, text in EXPECTED.items()}
    assert dcgm_error == EXPECTED["v1"].format(base=base)  # the httpx path (fetch_page) says the same
