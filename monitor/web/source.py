"""What the overview reads, read-only: the layers' latest views and the monitor's own records.

The monitor is such a source; the page and `/api/v1/status` take this shape, not the monitor,
so the web package needs nothing of the runtime. Each view is read where it is kept, when the
overview is made: a collection replaces it, and the page shows the latest.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

from monitor.alerting.embedded import ActiveAlertRow
from monitor.alerting.outbox import TransitionRow
from monitor.canary.collector import CanaryStatus
from monitor.config import Settings
from monitor.cost.collector import CostView
from monitor.health import HealthBook
from monitor.history.summary import TrendRow
from monitor.infra.reading import InfraView
from monitor.quality.layer import QualityView
from monitor.service.view import ServiceView
from monitor.store.session import EventRow
from monitor.web.history import History

V = TypeVar("V", covariant=True)


class Viewed(Protocol[V]):
    """A layer's collector: its latest view."""

    @property
    def view(self) -> V: ...


class Probes(Protocol):
    """The canary: each probe's last outcome, as /api/v1/status shows it."""

    def status(self) -> CanaryStatus: ...


class ActiveAlerts(Protocol):
    """The in-process rule evaluator's alerts."""

    def counts(self) -> dict[tuple[str, str, str], int]: ...

    def active(self, limit: int | None = None) -> list[ActiveAlertRow]: ...

    @property
    def trends(self) -> list[TrendRow]: ...  # week over week per target and model (history/summary.py)


class Deliveries(Protocol):
    """The outbox's newest alert transitions with their deliveries (kept by the store thread)."""

    @property
    def latest(self) -> list[TransitionRow]: ...


class OverviewSource(Protocol):
    @property
    def settings(self) -> Settings: ...

    @property
    def wall(self) -> Callable[[], float]: ...

    @property
    def service(self) -> Viewed[ServiceView]: ...

    @property
    def infra(self) -> Viewed[InfraView]: ...

    @property
    def quality(self) -> Viewed[QualityView]: ...

    @property
    def cost(self) -> Viewed[CostView]: ...

    @property
    def canary(self) -> Probes: ...

    @property
    def health(self) -> HealthBook: ...

    @property
    def history(self) -> History: ...

    @property
    def events(self) -> list[EventRow]: ...  # the newest collector state changes

    @property
    def alerting(self) -> ActiveAlerts | None: ...  # None: the rules are evaluated elsewhere

    @property
    def delivery(self) -> Deliveries: ...
