"""Make later scrapes of a real page: counters and buckets grow, gauges stay."""

import re

_SAMPLE = re.compile(r"^([^#\s][^ ]*(?:\{.*\})?) (\S+)$", re.M)


def grow(text: str, factor: float, skip: tuple[str, ...] = ("_created", "num_requests", "perc", "info"),
         prefix: str = "vllm:") -> str:
    """Multiply every counter-like sample by `factor` (buckets stay cumulative and consistent)."""

    def bump(match: re.Match[str]) -> str:
        series, value = match.group(1), float(match.group(2))
        name = series.split("{", 1)[0]
        if any(part in name for part in skip) or not name.startswith(prefix):
            return match.group(0)
        return f"{series} {value * factor!r}"

    return _SAMPLE.sub(bump, text)
