"""What one target may cost the monitor: a page over a budget is refused with the
reason, its target reads down (state `refused`, `inference_target_refused` 1), and every other
target and job goes on.

    service.max_series_per_target   samples on the page, counted before it is parsed
                                    (its lines less its comments: one memchr-speed pass)
    service.max_models_per_target   distinct models the engine's families name
    service.max_ingest_time         parse and derive of one page; past it the target is refused for
                                    REFUSE_INTERVALS scrapes (its pages are not fetched meanwhile).
                                    In a parse worker process the call has a deadline of its own:
                                    a worker that does not answer by then is killed and replaced.

A page of many thousands of model names, under the page cap, froze the service and alerting
pipeline until a restart (docs/hardening.md): the cost of a page grows with its models (a window's rates, stats and
lines for each), not with its bytes alone.
"""

from __future__ import annotations

from monitor.promtext import PageError

REFUSE_INTERVALS = 10  # scrapes a target sits out after a page that took longer than max_ingest_time
SPEC_DECODE_POSITIONS = 64  # speculative-decoding positions kept per model (vLLM drafts a few; 10,000 were sent)


class WorkerStuck(Exception):
    """A parse worker did not answer a target's page by its deadline; it was killed and replaced."""


class TargetRefused(PageError):
    """A page over one of its target's budgets: refused, with which budget and by how much."""


def series_on_page(text: str) -> int:
    """Samples on the page at most: its lines, less its comment lines (blank lines count too)."""
    lines = text.count("\n") + (0 if not text or text.endswith("\n") else 1)
    comments = text.count("\n#") + (1 if text.startswith("#") else 0)
    return lines - comments


def check_series(text: str, cap: int) -> None:
    count = series_on_page(text)
    if count > cap:
        raise TargetRefused(f"refused: {count:,} series on the page, over service.max_series_per_target "
                            f"({cap:,}); not parsed")


def check_models(count: int, cap: int) -> None:
    if count > cap:
        raise TargetRefused(f"refused: {count:,} models on the page, over service.max_models_per_target "
                            f"({cap:,}); not derived")


def stuck_reason(seconds: float, cap: float, interval: float) -> str:
    return (f"refused: its parse worker did not answer its page within {seconds:g} s (3 x service.max_ingest_time "
            f"{cap:g} s, at least the scrape timeout) and was replaced; not scraped for {REFUSE_INTERVALS} intervals "
            f"({REFUSE_INTERVALS * interval:g} s)")


def slow_reason(seconds: float, cap: float, interval: float) -> str:
    return (f"refused: its last page took {seconds:.1f} s to parse and derive, over service.max_ingest_time "
            f"({cap:g} s); not scraped for {REFUSE_INTERVALS} intervals ({REFUSE_INTERVALS * interval:g} s)")
