"""Credentials in a target URL never reach the status API, the logs or the error text."""

import asyncio
import base64
import json
import logging

import pytest

from monitor.config import load_settings
from monitor.runtime import Monitor
from tests.support.pageserver import PageServer

SECRET = "s3cr3t-pa55"


def test_url_credentials_stay_secret(caplog: pytest.LogCaptureFixture) -> None:
    with PageServer() as server:
        refused = server.refused_url("/metrics").replace("http://", f"http://scraper:{SECRET}@")
        hidden = server.url("/missing").replace("http://", f"http://scraper:{SECRET}@")
        settings = load_settings(None, {
            "infra": {"nvml": {"enabled": "false"}, "dcgm": {"targets": [{"name": "dcgm", "url": hidden}]}},
            "service": {"scrape_timeout": "1s",
                        "targets": [{"name": "a", "url": refused}, {"name": "b", "url": hidden}]},
        })

        async def run() -> tuple[dict[str, object], bytes]:
            monitor = Monitor(settings)
            await monitor.run_once()
            status, metrics = monitor.status(), monitor.metrics_text()
            await monitor.aclose()
            return status, metrics

        with caplog.at_level(logging.DEBUG):
            status, metrics = asyncio.run(run())
        sent = [r.headers for r in server.requests if r.path == "/missing"]
    targets = status["layers"]["service"]["targets"]  # type: ignore[index]
    assert [t["up"] for t in targets] == [False, False]
    assert targets[1]["error"].startswith("HTTP 404; the engines serve their page at /metrics: set the target's url to "
                                          "http://127.0.0.1:")  # the hint holds no credentials
    assert "scraper@" not in json.dumps(status) and "127.0.0.1" in json.dumps(status)
    for text in (json.dumps(status), metrics.decode(), caplog.text):
        assert SECRET not in text
    # The credentials still reach the target, as a Basic auth header.
    expected = "Basic " + base64.b64encode(f"scraper:{SECRET}".encode()).decode()
    assert sent and all({k.lower(): v for k, v in h.items()}.get("authorization") == expected for h in sent)
