"""A golden /metrics page for a fixed scenario; regenerate with UPDATE_GOLDEN=1."""

import asyncio
import os
import subprocess

import httpx

from monitor.catalog import CATALOG
from monitor.config import load_settings
from monitor.runtime import Monitor
from tests.conftest import FIXTURES, require_binary
from tests.service.pagegen import grow

GOLDEN = FIXTURES / "golden_service.prom"


def scenario_page() -> str:
    base = (FIXTURES / "sample_vllm_v1.prom").read_text()
    scrapes = {"a": 0, "b": 0}

    def handler(request: httpx.Request) -> httpx.Response:
        target = request.url.host
        scrapes[target] += 1
        factor = 1 + 0.1 * scrapes[target] * (2 if target == "b" else 1)
        return httpx.Response(200, text=grow(base, factor))

    clock = [1_767_300_000.0]
    settings = load_settings(None, {"infra": {"nvml": {"enabled": "false"}}, "service": {
        "windows": ["30s", "1m"],
        "targets": [{"name": "vllm-a", "url": "http://a/metrics"}, {"name": "vllm-b", "url": "http://b/metrics"}],
    }})

    async def run() -> str:
        client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
        monitor = Monitor(settings, client=client, wall=lambda: clock[0])
        for _ in range(5):
            await monitor.run_once()
            clock[0] += 15.0
        # Durations are wall-clock measurements: pin them for a stable page.
        for entry in monitor.health.entries.values():
            entry.duration_seconds = 0.01
        text = monitor.metrics_text().decode()
        await monitor.aclose()
        return text

    return asyncio.run(run())


def test_golden_page_unchanged() -> None:
    text = scenario_page()
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()


def test_golden_page_passes_promtool() -> None:
    promtool = require_binary("promtool")
    result = subprocess.run([promtool, "check", "metrics"], input=GOLDEN.read_text(),
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_emitted_families_equal_the_catalog() -> None:
    emitted = {line.split()[2] for line in GOLDEN.read_text().splitlines() if line.startswith("# TYPE")}
    expected = {name for name, d in CATALOG.items() if d.layer in ("service", "self")}
    assert emitted == expected
