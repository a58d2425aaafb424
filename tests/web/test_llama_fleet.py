"""A llama.cpp-only fleet on the overview, in a real Chromium: the engine's note wraps and every
number stays on screen (desktop, wide, phone); the header charts show what such a fleet has (the
engine's tokens/s, the canary's TTFT in place of the engine's) and the empty ones collapse into
one line, so a phone's first screen reaches the service table."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from monitor.app import create_app
from monitor.runtime import Monitor
from tests.support.appserver import serve_asgi
from tests.web.browser import artifacts_dir, browser_page
from tests.web.llama_fleet import serving_llama_fleet
from tests.web.scenario import settings_for, two_targets
from tests.web.test_overview import collected

PHONE = (390, 844)
# Every cell of the service and canary tables, against the box that holds the table: a cell whose
# right edge lies past it is a number the reader has to scroll sideways to (or cannot see).
OVERFLOW = """() => {
  const out = [];
  for (const table of document.querySelectorAll('#service table')) {
    const holder = table.parentElement;
    const box = holder.getBoundingClientRect();
    if (holder.scrollWidth > holder.clientWidth + 1)
      out.push(`${table.id || 'service'}: scrolls ${holder.scrollWidth} > ${holder.clientWidth}`);
    for (const cell of table.querySelectorAll('td, th')) {
      const r = cell.getBoundingClientRect();
      if (r.width > 0 && (r.right > box.right + 1 || r.right > window.innerWidth))
        out.push(`${cell.dataset.k || cell.textContent.trim().slice(0, 30)}: right ${r.right} > ${box.right}`);
    }
  }
  if (document.documentElement.scrollWidth > window.innerWidth)
    out.push(`page ${document.documentElement.scrollWidth} > ${window.innerWidth}`);
  return out;
}"""


@pytest.fixture(scope="module")
def llama_fleet() -> Iterator[tuple[str, dict[str, Any]]]:
    with serving_llama_fleet() as served:
        yield served


def test_the_charts_show_what_a_llama_fleet_has(llama_fleet: tuple[str, dict[str, Any]]) -> None:
    _, overview = llama_fleet
    (row,) = overview["service"]["rows"]
    assert row["engine"] == "llamacpp" and row["requests_per_second"] is None and row["ttft_p99_seconds"] is None
    (probe,) = overview["canary"]
    charts = {c["key"]: c for c in overview["charts"]}
    tokens = charts["generation_tokens_per_second"]
    assert tokens["substitute_for"] == "Fleet requests/s" and len(tokens["points"]) >= 2
    assert tokens["points"][-1][1] == pytest.approx(row["generation_tokens_per_second"])
    canary = charts["canary_ttft_seconds"]
    assert canary["substitute_for"] == "P99 TTFT" and canary["points"]
    assert canary["points"][-1][1] == pytest.approx(probe["ttft_seconds"])
    # No GPU, no price: those two have nothing to stand in, and stay empty.
    assert charts["gpu_utilization_ratio"]["points"] == [] and charts["usd_per_hour"]["points"] == []


@pytest.mark.parametrize(("width", "height"), [(1280, 900), (1400, 900), (2600, 1200), PHONE])
def test_no_number_of_a_llama_row_lies_off_screen(llama_fleet: tuple[str, dict[str, Any]], width: int, height: int,
                                                  tmp_path: Path) -> None:
    url, _ = llama_fleet
    with browser_page(width, height) as (page, seen):
        page.goto(f"{url}/?refresh=0", wait_until="load")
        note = page.locator('tr[data-target="llama-server-a"] [data-k=note]')
        assert "not on the engine's page" in note.inner_text()
        overflow = page.evaluate(OVERFLOW)
        page.screenshot(path=str(artifacts_dir(tmp_path) / f"llama-fleet-{width}.png"), full_page=True)
        charts = page.locator("figure.chart").count()
        collapsed = page.locator("#no-data").inner_text()
        service_top = page.evaluate("document.querySelector('#service').getBoundingClientRect().top")
    assert overflow == []
    assert seen.console_errors == []
    assert charts == 2 and "GPU utilization" in collapsed and "Spend" in collapsed
    if (width, height) == PHONE:
        assert service_top < height, "the charts fill a phone's first screen"


def test_no_number_of_a_vllm_fleet_lies_off_screen_either() -> None:
    # Two vLLM targets and their fleet row at a laptop's width: the baseline's note wraps too.
    with two_targets() as server:
        monitor = Monitor(settings_for(server))
        collected(monitor)
        asyncio.run(monitor.aclose())
        with serve_asgi(create_app(monitor, schedule=False)) as url, browser_page(1280, 900) as (page, seen):
            page.goto(f"{url}/?refresh=0", wait_until="load")
            assert page.locator("tr[data-fleet]").count() == 1
            overflow = page.evaluate(OVERFLOW)
    assert overflow == [] and seen.console_errors == []
