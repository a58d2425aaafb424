"""GET / (the overview page) and /static/: server-rendered with Jinja2, assets served here."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, FastAPI, Query
from fastapi.responses import FileResponse, HTMLResponse
from fastapi.staticfiles import StaticFiles
from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.concurrency import run_in_threadpool

from monitor.web.charts import sparkline
from monitor.web.history import HOUR

if TYPE_CHECKING:
    from monitor.config import Settings
    from monitor.web.renders import Renders
    from monitor.web.shapes import Overview
    from monitor.web.source import OverviewSource

HERE = Path(__file__).parent
MIN_REFRESH_SECONDS = 5
REFRESH_HELP = ("seconds between the page's reloads (at least 5); 0: the page does not reload itself, "
                "for reading a table or following a link without the page changing under the pointer")


def environment() -> Environment:
    env = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(["html"]),
                      trim_blocks=True, lstrip_blocks=True)
    env.filters.update(num=num, ms=ms, quantile_ms=quantile_ms, pct=pct, usd=usd, gib=gib, ago=ago, clock=clock,
                       by_unit=by_unit, change=change, daily=daily)
    env.globals.update(sparkline=sparkline, slo=slo, above=above, growth=growth, crossing=crossing)
    return env


def add_overview_routes(app: FastAPI, source: OverviewSource, renders: Renders) -> None:
    env = environment()
    template = env.get_template("overview.html")
    router = APIRouter()

    @router.get("/", response_class=HTMLResponse)
    async def page(refresh: int | None = Query(None, ge=0, le=86400, description=REFRESH_HELP)) -> HTMLResponse:
        every = reload_seconds(source.settings, refresh)
        return HTMLResponse(await renders.answer("/", every, lambda: page_bytes(template, source, every)))

    @router.get("/favicon.ico", include_in_schema=False)
    async def favicon() -> FileResponse:  # every page gets one (the quality report too): no 404 in consoles
        return FileResponse(HERE / "static" / "favicon.svg", media_type="image/svg+xml")

    app.include_router(router)
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")


async def page_bytes(template: Any, source: OverviewSource, refresh: int) -> bytes:
    """The page as GET / answers it. The numbers are taken on the loop, in turns (no race with the
    collectors); the HTML is written (and encoded) in a thread, where the loop gets the interpreter
    every few milliseconds (a large fleet's page takes long to write: docs/measurements.md)."""
    from monitor.web.overview import overview_in_turns

    data = await overview_in_turns(source)
    return await run_in_threadpool(lambda: write_page(template, source.settings, data, refresh).encode("utf-8"))


def render_page(template: Any, source: OverviewSource, refresh: int | None = None) -> str:
    from monitor.web.overview import overview  # here: `infermon status` imports this module's formats only

    return write_page(template, source.settings, overview(source), refresh)


def write_page(template: Any, settings: Settings, data: Overview, refresh: int | None = None) -> str:
    """`refresh`: the reader's choice of reload interval (`reload_seconds`)."""
    refresh = reload_seconds(settings, refresh)
    return str(template.render(o=data, refresh=refresh, now=data["ts"], hour_start=data["ts"] - HOUR))


def reload_seconds(settings: Settings, refresh: int | None) -> int:
    """The reader's choice of reload interval (0: none), at least MIN_REFRESH_SECONDS; by default
    the faster of the two collection intervals, so each reload can show a new scrape."""
    if refresh is None:
        refresh = int(min(settings.service.scrape_interval.seconds, settings.infra.interval.seconds))
    return max(MIN_REFRESH_SECONDS, refresh) if refresh else refresh


def _ok(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def num(value: Any, digits: int = 1) -> str:
    return f"{value:,.{digits}f}" if _ok(value) else "–"


def ms(seconds: Any) -> str:
    if not _ok(seconds):
        return "–"
    return f"{seconds * 1000:,.0f} ms" if seconds >= 0.01 else f"{seconds * 1000:.1f} ms"


def quantile_ms(seconds: Any, below: Any = None) -> str:
    """A histogram's quantile; "< 10 ms" where every observation fell under the first bucket's bound
    (`below`): histogram_quantile()'s number there is only a share of the bound."""
    return f"< {ms(below)}" if _ok(below) else ms(seconds)


def change(ratio: Any) -> str:
    """A relative change: +0.68 -> "+68 %"."""
    return f"{ratio * 100:+.0f} %" if _ok(ratio) else "–"


def growth(per_day: Any, days: Any = None, at_least: bool = False) -> str:
    """A creep's growth a day and how long it has grown: "+3.0 %/day over 21 days"; "" without one
    (a flat series shows no slope, not "+0.0 %/day")."""
    if not _ok(per_day):
        return ""
    text = f"{per_day * 100:+.1f} %/day"
    if _ok(days) and days > 0:
        text += f" over {'at least ' if at_least else ''}{days:g} day{'' if days == 1 else 's'}"  # 12-hour steps
    return text


def crossing(days: Any, threshold: Any) -> str:
    """When a creep crosses its paging threshold: "crosses 1 s in ~20 days"; "" without a crossing."""
    if not _ok(days) or not threshold:
        return ""
    when = f"{days * 24:.0f} h" if days < 1 else (f"{days:.1f} days" if days < 10 else f"{days:.0f} days")
    return f"crosses {threshold} in ~{when}"


def daily(values: Any) -> str:
    """SVG points of a row's daily values (None: a day without a point), 100 x 20, oldest at the left."""
    points = [(float(day), value) for day, value in enumerate(values or []) if value is not None]
    return sparkline(points, 0.0, float(max(len(values or []) - 1, 1)), width=100, height=20).polyline


def pct(ratio: Any, digits: int = 1) -> str:
    return f"{ratio * 100:.{digits}f} %" if _ok(ratio) else "–"


def usd(value: Any, digits: int = 2) -> str:
    return f"${value:,.{digits}f}" if _ok(value) else "–"


def gib(value: Any) -> str:
    return f"{value / 2**30:,.1f} GiB" if _ok(value) else "–"


def ago(ts: Any, now: float) -> str:
    if not _ok(ts):
        return "–"
    seconds = max(0.0, now - ts)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit} ago"
    return f"{seconds:.0f} s ago"


def clock(ts: Any) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(ts)) if _ok(ts) else "–"  # UTC, as the alerts' times


def by_unit(value: Any, unit: str) -> str:
    if unit == "rps":
        return num(value, 2)
    if unit == "tps":
        return num(value, 0)
    if unit == "s":
        return ms(value)
    if unit == "ratio":
        return pct(value)
    return usd(value) + "/h"


def slo(value: Any, objective: float) -> str:
    """A latency's colour against its objective: within, over, or far over (5x)."""
    if not _ok(value):
        return ""
    return "good" if value <= objective else ("bad" if value > 5 * objective else "warn")


def above(value: Any, warn: float, bad: float) -> str:
    if not _ok(value):
        return ""
    return "bad" if value > bad else ("warn" if value > warn else "good")
