"""The weekly digest as text (`infermon digest --week`): a ticket's body, one block per model."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from monitor.history.digest import WEEK, Digest, Figure, ModelWeek
from monitor.web.page import change, crossing, growth, ms, num, pct, usd
from monitor.web.terminal import bars

# figure -> its name in the digest and how its values are written
SHOWN: dict[str, tuple[str, Callable[[float | None], str]]] = {
    "ttft_p99_seconds": ("P99 TTFT", ms),
    "tpot_p99_seconds": ("P99 TPOT", ms),
    "e2e_p99_seconds": ("P99 E2E", ms),
    "error_ratio": ("error ratio", lambda v: pct(v, 2)),
    "usd_per_million_tokens": ("$/1M gen. tokens", lambda v: usd(v, 3)),
    "quality_score": ("judge score", lambda v: num(v, 2)),
}


def _day(ts: float, time: bool = False) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M" if time else "%Y-%m-%d")


def digest_text(digest: Digest) -> str:
    lines = [f"What is slowly getting worse: the week {_day(digest.now - WEEK)} – {_day(digest.now)} (UTC) "
             "against the week before (means of the 5-minute points; sparkline: 30 days' daily medians; growth a day: "
             "the creep rule's value, where it holds)", ""]
    if not digest.models:
        lines.append("No model has history in the last two weeks (history.enabled, `infermon history import`).")
    for model in digest.models:
        lines += _model_lines(model)
    return "\n".join(lines).rstrip() + "\n"


def _model_lines(model: ModelWeek) -> list[str]:
    lines = [model.model or "(no model)"]
    for name, (title, write) in SHOWN.items():
        figure = model.figures.get(name)
        if figure is not None and (figure.this_week is not None or figure.last_week is not None):
            lines.append(f"  {title:<17}{_figure(figure, write)}")
    lines.append("  trend alerts this week:" + ("" if model.fired else " none"))
    for alert in model.fired:
        cause = f" — {alert.probable_cause}" if alert.probable_cause else ""
        lines.append(f"    {alert.alertname} on {alert.target or '–'} since {_day(alert.starts_at, True)}{cause}")
    return [*lines, ""]


def _figure(figure: Figure, write: Callable[[float | None], str]) -> str:
    ratio = figure.ratio
    moved = change(ratio - 1) if ratio is not None else "–"
    line = f"{write(figure.this_week):>12}  {moved:>7} vs {write(figure.last_week):<12} {bars(figure.daily)}"
    return line + _slope(figure)


def _slope(figure: Figure) -> str:
    """"  +3.0 %/day over 21 days, crosses 1 s in ~20 days" where the creep rule's condition holds."""
    slope = figure.slope
    if slope is None or slope.per_day is None:
        return ""
    when = crossing(slope.crosses_in_days, figure.crosses)
    return f"  {growth(slope.per_day, slope.days, slope.at_least)}" + (f", {when}" if when else "")
