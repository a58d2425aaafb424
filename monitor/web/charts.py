"""Server-side SVG sparklines: the page shows its trends with no JavaScript and nothing fetched."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

WIDTH, HEIGHT, PAD = 280, 64, 3


@dataclass(frozen=True)
class Sparkline:
    polyline: str  # SVG points, "x,y x,y ..."; empty with fewer than two points
    low: float | None
    high: float | None
    last: float | None
    since: float | None = None  # the first point's time
    floor: float | None = None  # the value at the bottom of the chart (0 for non-negative series)


def sparkline(points: Sequence[tuple[float, float]], start: float, end: float,
              width: int = WIDTH, height: int = HEIGHT) -> Sparkline:
    """Points over [start, end]: the time axis is the whole hour the caption names, so a young
    monitor's first minutes sit at the right edge and `since` says where the data begins.

    The value axis starts at 0 for non-negative series (the page labels its top and bottom), so
    60 -> 83 ms reads as a rise of a third, not a cliff."""
    if not points:
        return Sparkline("", None, None, None)
    since = points[0][0]
    values = [v for _, v in points]
    low, high = min(values), max(values)
    floor = 0.0 if low >= 0 else low
    span = (high - floor) or 1.0
    duration = (end - start) or 1.0
    coords = [(PAD + (t - start) / duration * (width - 2 * PAD),
               height - PAD - (v - floor) / span * (height - 2 * PAD)) for t, v in points]
    text = " ".join(f"{x:.1f},{y:.1f}" for x, y in coords) if len(coords) > 1 else ""
    return Sparkline(text, low, high, values[-1], since, floor)
