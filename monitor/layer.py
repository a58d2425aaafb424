"""The shape the monitor's layers share, named: each runs jobs, renders its families on /metrics
and has a section in /api/v1/status, so the monitor loops over them instead of wiring each by hand.

Each layer adapts itself to the shape in its own package (`service/part.py`, `infra/part.py`,
`quality/part.py`, `canary/part.py`, `cost/part.py`): a layer's collector knows its source and
nothing of the monitor, and its renderer imports the collector, so a small class beside both
joins them. Each layer's view stays on its collector, typed: the pages and the alert context read
it there. This module imports no layer (tests/test_layout.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from prometheus_client.core import Metric

from monitor.exporter import Renderer

SERVICE, INFRA, QUALITY, CANARY, COST = "service", "infra", "quality", "canary", "cost"


@dataclass
class Job:
    name: str
    interval_seconds: float
    run: Callable[[], Awaitable[Any]]
    ran: bool = False
    cron: str | None = None  # a cron job (in `timezone`) instead of an interval; not part of readiness
    timezone: str = "UTC"
    # Under `infermon serve`, a job with a loop runs it for its whole life instead of `run` on an interval.
    loop: Callable[[], Awaitable[Any]] | None = None
    collects: str | None = None  # the layer whose view a run of this job brings up to date
    # The layers this one derives from: its first collection counts once theirs are in.
    after: tuple[str, ...] = ()


class Part(Protocol):
    """What the monitor loops over, in order: the jobs it schedules (and `run_once` runs one after
    another) and the families it renders on /metrics."""

    @property
    def name(self) -> str: ...

    @property
    def jobs(self) -> Sequence[Job]: ...

    def render(self) -> Iterable[Metric]: ...


class Layer(Part, Protocol):
    """One layer of the monitor (node_exporter's `Collector`): a part with its own section in
    /api/v1/status and connections to close."""

    def status(self) -> Mapping[str, object]: ...  # its section: a TypedDict of its own

    async def aclose(self) -> None: ...


def _no_families() -> Iterable[Metric]:
    return ()


@dataclass(frozen=True)
class OwnPart:
    """One of the monitor's own parts between the layers: its health book, the outbox, the store."""

    name: str
    render: Renderer = _no_families
    jobs: tuple[Job, ...] = ()
