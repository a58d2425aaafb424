"""The engine's version, read from its API beside its /metrics page (vLLM GET /version), on
`inference_target_info`: when the target comes up and every VERSION_INTERVAL after; a failed read
of a running engine keeps what it had, a restarted engine that does not answer has none."""

from __future__ import annotations

import asyncio
import json

import pytest

from monitor.config import load_settings
from monitor.runtime import Monitor
from monitor.service.version import VERSION_INTERVAL, parse_version, version_url
from tests.conftest import FIXTURES
from tests.support.pageserver import Page, PageServer, status_page

START = 1_780_000_000.0
JSON = "application/json"


@pytest.mark.parametrize(("url", "engine", "expected"), [
    ("http://h:8000/metrics", "vllm", "http://h:8000/version"),
    ("https://u:p@h/engine-1/metrics?x=1", "sglang", "https://u:p@h/engine-1/get_server_info"),
    ("http://h:8080/metrics", "llamacpp", "http://h:8080/props"),
    ("http://h:3000/prometheus", "tgi", "http://h:3000/info"),
    ("http://h:8000/metrics", "acme", None),
])
def test_the_version_endpoint_is_beside_the_page(url: str, engine: str, expected: str | None) -> None:
    assert version_url(url, engine) == expected


@pytest.mark.parametrize(("body", "engine", "expected"), [
    ('{"version": "0.33.0"}', "vllm", "0.33.0"),
    ('{"tp_size": 1, "version": "0.5.2", "internal_states": []}', "sglang", "0.5.2"),
    ('{"build_info": "b6123-1a2b3c4", "total_slots": 4}', "llamacpp", "b6123-1a2b3c4"),
    ('{"version": true}', "vllm", None),
    ('{"version": {"x": 1}}', "vllm", None),
    ('{"version": "' + "9" * 65 + '"}', "vllm", None),
    ('{"version": "0.1\\n"}', "vllm", "0.1"),
    ('{"version": "a\\u0000b"}', "vllm", None),
    ("<html>nginx</html>", "vllm", None),
    ('["0.33.0"]', "vllm", None),
])
def test_a_version_is_a_short_printable_string_or_none(body: str, engine: str, expected: str | None) -> None:
    assert parse_version(body, engine) == expected


def info_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("inference_target_info{")]


def test_the_version_is_read_at_start_again_after_its_interval_and_after_a_restart() -> None:
    page = (FIXTURES / "sample_vllm_v1.prom").read_text()
    now = [START]

    async def cycles() -> list[list[str]]:
        seen = []
        with PageServer() as server:
            server.set("/metrics", Page(page))
            server.set("/version", Page(json.dumps({"version": "0.32.0"}), content_type=JSON))
            settings = load_settings(None, {"storage": {"url": "sqlite://"}, "infra": {"nvml": {"enabled": "false"}},
                                            "service": {"targets": [{"name": "vllm-a", "url": server.url("/metrics")}],
                                                        "windows": ["1m"], "engine_version": True}})
            monitor = Monitor(settings, wall=lambda: now[0])

            async def cycle(advance: float) -> None:
                now[0] += advance
                await asyncio.wait_for(monitor.run_once(), 30)
                seen.append(info_lines(monitor.metrics_text().decode()))

            await cycle(0)  # up: read
            server.set("/version", Page(json.dumps({"version": "0.33.0"}), content_type=JSON))
            await cycle(15)  # within the interval: not read again
            await cycle(VERSION_INTERVAL)  # read: the new version
            server.set("/version", status_page(500))
            await cycle(VERSION_INTERVAL + 1)  # a failed read of a running engine keeps its version
            server.set("/metrics", status_page(503))
            await cycle(15)  # down
            server.set("/metrics", Page(page))
            server.set("/version", status_page(404))
            await cycle(15)  # restarted, and its version unknown
            hits = server.hits["/version"]
            await monitor.aclose()
        assert hits == 4
        return seen

    seen = asyncio.run(cycles())
    expected = 'inference_target_info{engine="vllm",generation="v1",target="vllm-a",version="%s"} 1.0'
    assert seen[0] == [expected % "0.32.0"] and seen[1] == [expected % "0.32.0"]
    assert seen[2] == [expected % "0.33.0"] and seen[3] == [expected % "0.33.0"]
    assert seen[4] == [expected % "0.33.0"]  # down: the engine as last seen
    assert seen[5] == ['inference_target_info{engine="vllm",generation="v1",target="vllm-a"} 1.0']
