"""A monitor over real loopback pages (two vLLM targets), the recorded H200 and a price: every
layer but quality has numbers. Collection cycles run with an injected clock."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from monitor.config import Settings, load_settings
from monitor.demo import DEMO_TRACE
from tests.conftest import FIXTURES
from tests.service.pagegen import grow
from tests.support.pageserver import Generated, PageServer

BASE_PAGE = (FIXTURES / "sample_vllm_v1.prom").read_text()


def growing(speed: float) -> Generated:
    return Generated(lambda hit: grow(BASE_PAGE, 1 + speed * hit))


@contextmanager
def two_targets() -> Iterator[PageServer]:
    with PageServer() as server:
        server.set("/a", growing(0.1))
        server.set("/b", growing(0.2))
        yield server


def settings_for(server: PageServer, extra: dict[str, Any] | None = None, gpus: bool = True) -> Settings:
    sections: dict[str, Any] = {
        "infra": {"nvml": {"enabled": "false"}},
        "alerting": {"enabled": False},
        "service": {"scrape_interval": "1s", "windows": ["30s", "1m"], "targets": [
            {"name": "vllm-a", "url": server.url("/a"), "node": "n1", "gpus": [0]},
            {"name": "vllm-b", "url": server.url("/b")}]},
    }
    if gpus:
        sections["infra"] = {"interval": "1s", "replay": {"file": str(DEMO_TRACE)}, "node": "n1"}
        sections["cost"] = {"gpu_prices": {"H200": {"usd_per_hour": 3.5}}, "daily_budget_usd": 100}
    for section, values in (extra or {}).items():
        sections.setdefault(section, {}).update(values)
    return load_settings(None, sections)


def rules_file(tmp: Path, expr: str = "inference_target_up > 0") -> Path:
    path = tmp / "page.yml"
    path.write_text(f"""groups:
  - name: page
    rules:
      - alert: TargetUpForTest
        expr: {expr}
        labels: {{severity: warning, layer: service}}
        annotations:
          summary: "{{{{ $labels.target }}}} is up"
          probable_cause: "the test made it so <b>on purpose</b>"
          description: "{{{{ $labels.target }}}} answers its scrapes"
          runbook: "https://runbooks.example/TargetUpForTest"
""")
    return path


def row(html: str, attribute: str, value: str) -> str:
    """The <tr> whose data-<attribute> is `value` (first one)."""
    found = re.search(rf'<tr class="[^"]*" data-{attribute}="{re.escape(value)}".*?</tr>', html, re.S)
    assert found, f"no row data-{attribute}={value!r}"
    return found.group(0)


def cell(html_row: str, key: str) -> str:
    found = re.search(rf'data-k="{key}">([^<]*)<', html_row)
    assert found, f"no cell {key!r} in {html_row[:200]}"
    return found.group(1).strip()
