"""Capacity: the highest concurrency whose goodput holds the objectives, found by measuring.

    grow      1, 2, 4, ... (from --capacity's lower bound) while each level holds
    bisect    between the last level that held and the first that did not, to within an eighth
    stop      a level holds when at least `share` of its requests met TTFT and TPOT objectives and
              at most `max_failed` of them failed; it is over-saturated (and does not hold) when
              against the level before it the throughput rose by less than 10 % while TTFT P50
              rose by more than 50 %: more users only queue (GuideLLM stops on the same sign)

The search is a pure state machine (`next_level` / `record`); run.py measures what it asks for.
`answer()` says the result in words, with the throughput and the price at that load.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SATURATED_THROUGHPUT_GAIN = 0.10
SATURATED_TTFT_RISE = 0.50
DEFAULT_SHARE = 0.9


@dataclass
class Probe:
    concurrency: int
    held: bool
    why: str  # "held" | "goodput 72% < 90%" | "over-saturated: ..." | "12% failed"
    figures: dict[str, Any]


@dataclass
class CapacitySearch:
    low: int
    high: int
    share: float = DEFAULT_SHARE
    max_failed: float = 0.05
    probes: list[Probe] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not 1 <= self.low <= self.high:
            raise ValueError(f"--capacity {self.low}:{self.high}: 1 <= low <= high")

    @property
    def held(self) -> Probe | None:
        return max((p for p in self.probes if p.held), key=lambda p: p.concurrency, default=None)

    @property
    def failed(self) -> Probe | None:
        return min((p for p in self.probes if not p.held), key=lambda p: p.concurrency, default=None)

    def next_level(self) -> int | None:
        """The concurrency to measure next, or None when the answer is known."""
        good, bad = self.held, self.failed
        if not self.probes:
            return self.low
        if bad is None:  # everything so far held: double, up to the bound
            assert good is not None
            return None if good.concurrency >= self.high else min(self.high, good.concurrency * 2)
        if good is None or bad.concurrency <= good.concurrency:
            return None  # the lowest level did not hold, or a higher one held after a lower failed
        if bad.concurrency - good.concurrency <= max(1, good.concurrency // 8):
            return None
        return (good.concurrency + bad.concurrency) // 2

    def record(self, concurrency: int, figures: dict[str, Any]) -> Probe:
        probe = Probe(concurrency, *self._judge(concurrency, figures), figures)
        self.probes.append(probe)
        return probe

    def _judge(self, concurrency: int, figures: dict[str, Any]) -> tuple[bool, str]:
        requests, failed = figures.get("requests") or 0, figures.get("failed") or 0
        if not requests:
            return False, "no request finished"
        if failed / requests > self.max_failed:
            return False, f"{failed / requests:.0%} failed"
        goodput = figures.get("goodput_ratio") or 0.0
        if goodput < self.share:
            return False, f"goodput {goodput:.0%} < {self.share:.0%}"
        below = max((p for p in self.probes if p.held and p.concurrency < concurrency),
                    key=lambda p: p.concurrency, default=None)
        if below is not None and _saturated(below.figures, figures):
            return False, "over-saturated: throughput flat while TTFT rose"
        return True, "held"


def _saturated(before: dict[str, Any], after: dict[str, Any]) -> bool:
    tps0, tps1 = before.get("output_tokens_per_s"), after.get("output_tokens_per_s")
    ttft0, ttft1 = (before.get("ttft_s") or {}).get("p50"), (after.get("ttft_s") or {}).get("p50")
    if not (tps0 and tps1 and ttft0 and ttft1):
        return False
    return bool(tps1 < tps0 * (1 + SATURATED_THROUGHPUT_GAIN) and ttft1 > ttft0 * (1 + SATURATED_TTFT_RISE))


def answer(search: CapacitySearch, goodput: dict[str, float], gpu: dict[str, Any]) -> dict[str, Any]:
    """The result's "capacity" block: the level, why the search stopped, and the sentence."""
    good, bad = search.held, search.failed
    objectives = (f"TTFT < {goodput['ttft_s'] * 1000:g} ms and TPOT < {goodput['tpot_s'] * 1000:g} ms "
                  f"for {search.share:.0%} of requests")
    where = f"{gpu.get('count') or 1}x {gpu['model']}" if gpu.get("model") else "this server (GPU not observed)"
    if good is None:
        words = f"capacity: below {search.low} concurrent user(s) at SLO ({objectives}) on {where}"
        if bad is not None:
            words += f": at {bad.concurrency}, {bad.why}"
        return {"concurrency": None, "bound": "below the lower bound", "words": words, **_probes(search)}
    figures = good.figures
    tps, cost = figures.get("output_tokens_per_s"), (figures.get("cost") or {}).get("usd_per_million_output_tokens")
    parts = [f"capacity: {'at least ' if bad is None else ''}{good.concurrency} concurrent users at SLO "
             f"({objectives}) on {where}"]
    if tps:
        parts.append(f"{tps:,.0f} output tokens/s")
    if cost is not None:
        parts.append(f"${cost:.2f}/1M output tokens")
    stop = "the upper bound" if bad is None else f"{bad.concurrency}: {bad.why}"
    return {"concurrency": good.concurrency, "bound": stop, "words": ", ".join(parts) + f" (next: {stop})",
            **_probes(search)}


def _probes(search: CapacitySearch) -> dict[str, Any]:
    return {"probes": [{"concurrency": p.concurrency, "held": p.held, "why": p.why} for p in search.probes]}


def pareto(levels: list[dict[str, Any]], gpus: int) -> list[dict[str, Any]]:
    """Per level: output tokens/s per user (what one user sees stream) against output tokens/s per
    GPU (what the operator pays for): the curve along which more users trade the one for the other."""
    out = []
    for level in levels:
        summary = level.get("summary") or {}
        tps = (summary.get("output_tokens_per_s") or {}).get("mean")
        users = (summary.get("in_flight_mean") or {}).get("mean") or level["level"]["value"]
        if tps and users:
            out.append({"label": level["level"]["label"], "per_user": tps / users, "per_gpu": tps / max(gpus, 1)})
    return out
