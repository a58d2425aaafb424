"""Per-request samples -> the figures of one measured window; repeats -> mean ± spread (pure).

Percentiles are exact, from the samples, interpolated between the two nearest ranks (numpy's
default "linear" method), never from histogram buckets. Throughput is over the window's wall
time: from the first request sent to the last answer finished.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

PERCENTILES = (50, 95, 99)


@dataclass(frozen=True)
class Sample:
    """One measured request; times in seconds, relative to the window's start."""

    sent_s: float
    ok: bool
    outcome: str
    ttft_s: float | None
    tpot_s: float | None
    e2e_s: float | None
    output_tokens: int | None
    prompt_tokens: int | None
    detail: str = ""  # a failure's reason (short, no key); "" when it succeeded
    held_s: float | None = None  # from its send to its end, whatever the outcome: its share of the load
    tokens_from: str | None = None  # "usage" (the server's count) | "chunks" (content chunks: an estimate)

    def as_dict(self) -> dict[str, Any]:
        return vars(self).copy()


def percentile(values: Sequence[float], p: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def distribution(values: Sequence[float]) -> dict[str, float | None]:
    """{"mean", "p50", "p95", "p99"}; None each when there is no value."""
    out: dict[str, float | None] = {"mean": statistics.fmean(values) if values else None}
    for p in PERCENTILES:
        out[f"p{p}"] = percentile(values, p)
    return out


@dataclass(frozen=True)
class Goodput:
    ttft_s: float = 0.2
    tpot_s: float = 0.05

    def met(self, sample: Sample) -> bool:
        # A single-token answer has no TPOT: it meets the TPOT objective trivially.
        return (sample.ok and sample.ttft_s is not None and sample.ttft_s < self.ttft_s
                and (sample.tpot_s is None or sample.tpot_s < self.tpot_s))


def window_figures(samples: Sequence[Sample], duration_s: float, goodput: Goodput) -> dict[str, Any]:
    """The client-side figures of one measured window (one level of one repeat)."""
    ok = [s for s in samples if s.ok]
    output = sum(s.output_tokens or 0 for s in ok)
    prompt = sum(s.prompt_tokens or 0 for s in ok)
    met = sum(1 for s in samples if goodput.met(s))
    per_s = (lambda n: n / duration_s) if duration_s > 0 else (lambda n: None)
    return {
        "requests": len(samples),
        "failed": len(samples) - len(ok),
        "duration_s": duration_s,
        "requests_per_s": per_s(len(ok)),
        "output_tokens_per_s": per_s(output),
        "total_tokens_per_s": per_s(output + prompt),
        "output_tokens": output,
        "prompt_tokens": prompt,
        "ttft_s": distribution([s.ttft_s for s in ok if s.ttft_s is not None]),
        "tpot_s": distribution([s.tpot_s for s in ok if s.tpot_s is not None]),
        "e2e_s": distribution([s.e2e_s for s in ok if s.e2e_s is not None]),
        "goodput_ratio": met / len(samples) if samples else None,
        "goodput_requests_per_s": per_s(met),
        "in_flight_mean": in_flight_mean(samples, duration_s),
        # the lengths as the server counted them (its `usage`), beside the run's estimates
        "served_input_tokens": distribution([s.prompt_tokens for s in ok if s.prompt_tokens is not None]),
        "served_output_tokens": distribution([s.output_tokens for s in ok if s.output_tokens is not None]),
    }


USAGE_INPUT = "usage.prompt_tokens"
USAGE_OUTPUT = "usage.completion_tokens"
CHUNKS_OUTPUT = "content chunks (an estimate: the stream carried no usage)"


class ServedLengths:
    """What the server served per successful request, as it counted it (the stream's `usage`),
    over every measured window of a run: mean/P50/P95/P99 of input and output tokens, and where
    each number came from. An answer without usage counts its content chunks: an estimate, and
    said so (`output_from`). Kept as plain integers, a few bytes a request."""

    def __init__(self) -> None:
        self.requests = 0
        self.prompt: list[int] = []
        self.output: list[int] = []
        self.by_chunks = 0

    def add(self, samples: Iterable[Sample]) -> None:
        for s in samples:
            if not s.ok:
                continue
            self.requests += 1
            if s.prompt_tokens is not None:
                self.prompt.append(s.prompt_tokens)
            if s.output_tokens is not None:
                self.output.append(s.output_tokens)
                self.by_chunks += s.tokens_from == "chunks"

    def figures(self) -> dict[str, Any]:
        output, chunks = len(self.output), self.by_chunks
        if not output:
            output_from = None
        elif not chunks:
            output_from = USAGE_OUTPUT
        elif chunks == output:
            output_from = CHUNKS_OUTPUT
        else:
            output_from = f"{USAGE_OUTPUT} for {output - chunks}, {CHUNKS_OUTPUT} for {chunks}"
        return {"requests": self.requests,
                "input_tokens": distribution(self.prompt), "input_from": USAGE_INPUT if self.prompt else None,
                "input_without_usage": self.requests - len(self.prompt),
                "output_tokens": distribution(self.output), "output_from": output_from}


def in_flight_mean(samples: Sequence[Sample], duration_s: float) -> float | None:
    """Requests in flight, averaged over the window's time: the sum of the time each was held over
    the window (Little's law, L = throughput x mean time in the system, on the client's own clock;
    not a sampled gauge)."""
    held = [s.held_s for s in samples if s.held_s is not None]
    return sum(held) / duration_s if held and duration_s > 0 else None


def spread(values: Iterable[float | None]) -> dict[str, float | int | None]:
    """mean ± stdev (sample stdev; 0 for one repeat), min, max and n over the repeats that had a value."""
    present = [v for v in values if v is not None]
    if not present:
        return {"mean": None, "stdev": None, "min": None, "max": None, "n": 0}
    stdev = statistics.stdev(present) if len(present) > 1 else 0.0
    return {"mean": statistics.fmean(present), "stdev": stdev, "min": min(present), "max": max(present),
            "n": len(present)}


def over_repeats(repeats: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Each numeric leaf of the repeats' figures -> its spread; nested dicts stay nested."""
    keys = dict.fromkeys(k for r in repeats for k in r)
    out: dict[str, Any] = {}
    for key in keys:
        values = [r.get(key) for r in repeats]
        if any(isinstance(v, Mapping) for v in values):
            out[key] = over_repeats([v for v in values if isinstance(v, Mapping)])
        elif all(v is None or (isinstance(v, int | float) and not isinstance(v, bool)) for v in values):
            out[key] = spread(values)
    return out
