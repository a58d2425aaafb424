"""Whether a run, or a comparison of two, may be believed (pure: result dicts in, sentences out).

    failures(result, max_share)   windows whose failed share is over the limit; a run stopped
                                  because every request failed. Any: `bench run` exits 1.
    drift(a, b, max_change)       the client machine's other load changed between two sessions
                                  by more than the limit: `bench compare` refuses unless forced.

The other load of a window is the share of the machine's CPU time that was busy, less what the
bench's own process used (`client.py`): a neighbour's build, a second benchmark, the server itself
when it runs on the same machine.
"""

from __future__ import annotations

import statistics
from typing import Any

DEFAULT_MAX_FAILED = 0.05  # a window with more than 5 % of its requests failed fails the run
DEFAULT_MAX_DRIFT = 0.25  # a quarter of the machine's CPUs more (or less) busy with other work


def failures(result: dict[str, Any], max_share: float = DEFAULT_MAX_FAILED) -> list[str]:
    out = []
    for level in result["levels"]:
        for number, window in enumerate(level.get("repeats") or (), 1):
            requests, failed = window.get("requests") or 0, window.get("failed") or 0
            if requests and failed / requests > max_share:
                reasons = "; ".join(f"{outcome}: {', '.join(details) or '-'}"
                                    for outcome, details in (window.get("failure_reasons") or {}).items())
                out.append(f"{level['level']['label']} run {number}: {failed} of {requests} requests failed "
                           f"({failed / requests:.0%}, more than {max_share:.0%}): {reasons}")
    if not out and result.get("stopped"):
        out.append(str(result["stopped"]))
    return out


def other_load(result: dict[str, Any]) -> float | None:
    """Mean over the result's windows of the machine's busy share not spent by the bench itself."""
    values = []
    for level in result["levels"]:
        for window in level.get("repeats") or ():
            client = window.get("client") or {}
            busy, own, cpus = client.get("machine_busy_ratio"), client.get("client_cpu_ratio"), client.get("cpu_count")
            if busy is not None and own is not None and cpus:
                values.append(max(0.0, busy - own / cpus))
    return statistics.fmean(values) if values else None


def drift(a: dict[str, Any], b: dict[str, Any], max_change: float = DEFAULT_MAX_DRIFT) -> list[str]:
    load_a, load_b = other_load(a), other_load(b)
    if load_a is None or load_b is None or abs(load_b - load_a) <= max_change:
        return []
    return [f"the client machine's other load moved from {load_a:.0%} to {load_b:.0%} of its CPUs between the "
            f"sessions (limit {max_change:.0%}): latencies move with it; run them interleaved "
            "(bench run --target A --target-b B) or on a quiet machine"]


def client_of(result: dict[str, Any]) -> str:
    """The HTTP client the load went through (`--client`); results from before the option were the SDK's."""
    tool = (result.get("conditions") or {}).get("tool") or {}
    return str(tool.get("client") or "openai")


def clients(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """Two results measured through different clients: each adds its own time to every TTFT and takes
    its own CPU from a shared machine, so a difference between them is partly the client's."""
    client_a, client_b = client_of(a), client_of(b)
    if client_a == client_b:
        return []
    return [f"the bench's HTTP client: {client_a} vs {client_b} (each adds its own time to a TTFT); "
            f"run both with the same --client"]
