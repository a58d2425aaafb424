"""Which responses get judged: per model, uniformly without replacement, the same for a date."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from monitor.quality.sample import Sample


def draw(samples: Sequence[Sample], size: int, day: str, model: str) -> list[Sample]:
    """`size` of the model's samples (all of them when there are fewer), reproducible for the day.

    Sorting by key first makes the draw independent of the order the sources listed them in.
    """
    unique = sorted({s.key: s for s in samples if s.model == model}.values(), key=lambda s: s.key)
    if len(unique) <= size:
        return unique
    seed = int.from_bytes(hashlib.sha256(f"{day}/{model}".encode()).digest()[:8], "big")
    return random.Random(seed).sample(unique, size)


def day_window(day: str, timezone: str) -> tuple[float, float]:
    """[start, end) of the calendar day in the zone, as unix seconds (23 or 25 h across DST)."""
    zone = ZoneInfo(timezone)
    first = date.fromisoformat(day)
    start = datetime.combine(first, time(0), zone)
    end = datetime.combine(first + timedelta(days=1), time(0), zone)
    return start.timestamp(), end.timestamp()


def previous_day(now: float, timezone: str) -> str:
    return (datetime.fromtimestamp(now, ZoneInfo(timezone)).date() - timedelta(days=1)).isoformat()


def today(now: float, timezone: str) -> str:
    return datetime.fromtimestamp(now, ZoneInfo(timezone)).date().isoformat()


def baseline_dates(day: str, days: int) -> list[str]:
    first = date.fromisoformat(day)
    return [(first - timedelta(days=n)).isoformat() for n in range(1, days + 1)]
