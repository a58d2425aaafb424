"""The embedded evaluator: the rule files applied to what /metrics exports, on its own interval.

Each run reads what /metrics exports (the very samples a Prometheus scrape gets, minus the
`job`/`instance` labels Prometheus adds: the registry, or the served page read back), advances
every rule's state, hands the firing and resolved transitions to the `AlertSink` (delivery's
outbox) once each, and saves the state so a restart neither forgets a pending alert's start nor
announces a firing one again. The monitor's tick around it is `tick.py`.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypedDict
from urllib.parse import quote_plus

from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric
from sqlalchemy.engine import Engine

from monitor.aio import Turns
from monitor.alerting.evaluator import ActiveAlert, RuleState, Transition
from monitor.alerting.model import Alert, AlertSink
from monitor.alerting.readback import PageReader
from monitor.alerting.store import StoredAlert, load_alert_states, save_alert_states
from monitor.catalog import CATALOG, family
from monitor.history.keeper import HistoryKeeper
from monitor.history.store import StoredDay
from monitor.history.summary import TrendRow, trend_rows
from monitor.rulefiles.promql import HistoryAt, Sample
from monitor.rulefiles.rules import RuleSet

log = logging.getLogger("monitor.alerting")

Transitions = Callable[[], Sequence[Mapping[str, object]]]
Collected = Callable[[str, float], bool]
"""(metric name, when the page was rendered) -> does the page hold what the collector behind the
metric collected since this process started"""
Explain = Callable[[Mapping[str, str]], dict[str, str]]
"""labels -> the annotations an alert gains when it fires (`context`, `probable_cause`)"""
EXPLAINED = ("context", "probable_cause")
Listed = tuple[str, str, ActiveAlert]
"""(rule key, fingerprint, the alert): one active alert as the last evaluation left it"""


class ActiveAlertRow(TypedDict):
    """One active alert as the overview, status and the alerts API list it."""

    labels: dict[str, str]
    annotations: dict[str, str]
    state: str  # pending | firing
    value: float | str  # a value that is not finite: its name ("NaN", "inf")
    active_at: str | None  # RFC 3339, UTC
    fired_at: str | None


class RuleError(TypedDict):
    rule: str
    error: str | None


class AlertingStatus(TypedDict):
    """/api/v1/status' "alerting": the in-process evaluator's rules and last evaluation."""

    enabled: bool
    rules: int
    files: list[str]
    last_evaluation: float | None
    firing: int
    pending: int
    waiting_for_first_collection: list[str]
    left_to_prometheus: list[dict[str, str]]
    errors: list[RuleError]


@dataclass(frozen=True)
class StateChanges:
    current: dict[tuple[str, str], tuple[object, ...]]  # every active alert's snapshot
    upserts: list[StoredAlert]
    gone: list[tuple[str, str]]


class LoggingSink:
    """The default sink until delivery is configured: transitions go to the debug log only."""

    def enqueue(self, alerts: Sequence[Alert], source: str) -> None:
        for alert in alerts:
            log.debug("alert %s %s %s (%s)", alert.name, alert.status, dict(alert.labels), source)


def registry_samples(registry: CollectorRegistry, names: set[str]) -> dict[str, list[Sample]]:
    """The samples of `names` as /metrics renders them (labels include `__name__`)."""
    out: dict[str, list[Sample]] = {}
    for fam in registry.collect():
        for sample in fam.samples:
            if sample.name in names:
                # An empty label value is no label at all once Prometheus has scraped it.
                labels = {k: v for k, v in sample.labels.items() if v != ""}
                out.setdefault(sample.name, []).append(({**labels, "__name__": sample.name}, sample.value))
    return out


STALE_METRIC = "inference_target_stale"
# The service layer's per-target series that are rendered for a stale target too (its state).
_TARGET_STATE = frozenset({"inference_target_up", STALE_METRIC, "inference_target_engine_recognized",
                           "inference_target_info"})


def reads_target_numbers(metrics: Iterable[str]) -> bool:
    """Does a rule read a service-layer series per target that a stale target's page leaves out?"""
    for metric in metrics:
        definition = CATALOG.get(metric)
        if (definition is not None and definition.layer == "service" and "target" in definition.labels
                and metric not in _TARGET_STATE):
            return True
    return False


def stale_targets(samples: Mapping[str, Sequence[Sample]]) -> frozenset[str]:
    """The targets the monitor fell behind on (`inference_target_stale` 1), from the page read."""
    return frozenset(labels["target"] for labels, value in samples.get(STALE_METRIC, ())
                     if value == 1 and "target" in labels)


def _utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


def _iso(ts: float | None) -> str | None:
    return None if ts is None else _utc(ts).isoformat().replace("+00:00", "Z")


class EmbeddedEvaluator:
    """Delivery plugs in by setting `sink` (its outbox) once the store it needs exists."""

    def __init__(
        self,
        ruleset: RuleSet,
        engine: Engine,
        sink: AlertSink | None = None,
        external_url: str | None = None,
        history: HistoryKeeper | None = None,
    ) -> None:
        self.ruleset = ruleset
        self.engine = engine
        self.sink: AlertSink = sink or LoggingSink()
        self.external_url = (external_url or "").rstrip("/")
        self.states = [RuleState(rule) for rule in ruleset.rules]
        # The rules whose per-target series vanish while the monitor is behind on a target: their
        # alerts of a stale target are held, not resolved (and fired again once it is scraped).
        self._stale_held = {state.rule.key for state in self.states if reads_target_numbers(state.rule.metrics)}
        self.metrics = ruleset.metrics | ({STALE_METRIC} if self._stale_held else set())
        # The long-horizon history: each evaluation's samples go in; a trend rule is evaluated over
        # it when a new 5-minute point closes (without a history, trend rules are not evaluated).
        self.history = history
        if history is not None:
            self.metrics |= history.names
        self.history_days: list[StoredDay] = []  # days that changed, for the store thread to write
        # Week over week per target and model (the overview, `infermon status`): made anew when a point
        # closes, in the thread that evaluates, and read as it is published (no lock for the readers).
        self.trends: list[TrendRow] = []
        self.last_ts: float | None = None
        self._saved: dict[tuple[str, str], tuple[object, ...]] = {}
        self._unsent: list[Alert] = []
        self._orphans: list[StoredAlert] = []
        # Set by the monitor: the other layers' evidence, taken once, when an alert fires.
        self.explain: Explain | None = None
        self.explained: dict[tuple[str, str], dict[str, str]] = {}
        # Set by the monitor. A rule on series this process has not collected yet is held: not
        # evaluated, its restored alerts kept as they were (no false "resolved" after a restart).
        self.collected: Collected = lambda metric, at: True
        self.held: list[str] = []  # rules held at the last evaluation
        # `infermon serve` advances the rules in its worker thread (`advance_page`), under this lock;
        # the readers (status, the alerts API, the overview, /metrics' render) read `_listing`.
        self.lock = threading.RLock()
        self._reader = PageReader(self.metrics)  # the read-back of the rendered page (advance_page)
        self._listing: tuple[Listed, ...] = ()
        self._restore()

    # ---- one evaluation -----------------------------------------------------------------

    def evaluate(self, samples: Mapping[str, Sequence[Sample]], ts: float, slack: float = 0.0) -> list[Alert]:
        """Advance every rule at `ts`; returns (and sends) the transitions as Alertmanager alerts."""
        alerts = self._advance(samples, ts, slack)
        self.write(alerts, self.changes())
        return alerts

    def advance(self, samples: Mapping[str, Sequence[Sample]], ts: float, slack: float = 0.0) -> list[Alert] | None:
        """The state part of `evaluate` (on the loop, no I/O); None when `ts` is evaluated already.
        `write(alerts, changes())` is the I/O part, for the store thread."""
        if self.last_ts is not None and ts <= self.last_ts and not self.held:
            return None  # (a rule held back at that instant is evaluated once its collector is in)
        return self._advance(samples, ts, slack)

    def advance_page(self, body: bytes | Sequence[bytes], ts: float,
                     slack: float) -> tuple[list[Alert], StateChanges] | None:
        """`advance_samples` on a rendered /metrics page: what `infermon serve` runs in its worker
        thread each publish tick, off the loop (with many series matching a rule an evaluation on
        the loop was a stall of /healthz: docs/performance.md)."""
        return self.advance_samples(self._read_back(body), ts, slack)

    def advance_samples(self, samples: Mapping[str, Sequence[Sample]], ts: float,
                        slack: float) -> tuple[list[Alert], StateChanges] | None:
        """`advance` and `changes` in one go, under the lock; None when `ts` is evaluated already."""
        with self.lock:
            alerts = self.advance(samples, ts, slack)
            return None if alerts is None else (alerts, self.changes())

    def _read_back(self, body: bytes | Sequence[bytes]) -> dict[str, Sequence[Sample]]:
        """The samples the rules read, from the rendered page or its pieces (in the worker thread)."""
        return self._reader.read(body)

    def _advance(self, samples: Mapping[str, Sequence[Sample]], ts: float, slack: float) -> list[Alert]:
        alerts = [Alert(row.labels, row.annotations, _utc(row.fired_at or row.active_at), _utc(ts))
                  for row in self._orphans]
        self._orphans = []
        self.held = []
        stale = stale_targets(samples) if self._stale_held else frozenset()
        fresh_points = self._observe(samples, ts)
        over_history = HistoryAt(self.history, ts) if self.history is not None else None  # one for every trend rule
        for state in self.states:
            if state.last_evaluation is not None and ts <= state.last_evaluation:
                continue  # evaluated at this instant already (a rule held back until then was not)
            if state.rule.trend and (self.history is None or (not fresh_points and state.last_evaluation is not None)):
                continue  # a trend rule reads the history: evaluated when a point closes
            if not all(self.collected(metric, ts) for metric in state.rule.metrics):
                self.held.append(state.rule.name)
                continue
            previous_error = state.last_error
            held = stale if stale and state.rule.key in self._stale_held else ()
            read = over_history if state.rule.trend and over_history is not None else samples
            for transition in state.evaluate(read, ts, self.external_url, slack, held):
                alerts.append(self._as_alert(transition, self._explained(state.rule.key, transition)))
            if state.last_error and state.last_error != previous_error:  # once when it starts or changes
                log.warning("alert rule %s: %s", state.rule.name, state.last_error)
        if fresh_points and self.history is not None:  # the slopes read the levels the rules just read
            self.trends = trend_rows(self.history, ts, over_history)
        self.last_ts = ts
        self._publish()
        return alerts

    def _observe(self, samples: Mapping[str, Sequence[Sample]], ts: float) -> int:
        """Hand the samples to the history; the points that closed (their days are to be written)."""
        if self.history is None:
            return 0
        closed = self.history.observe(samples, ts)
        if closed:
            self.history_days.extend(self.history.take_dirty())
        return closed

    def take_history_days(self) -> list[StoredDay]:
        """The history's changed days since the last call (under the lock), to be written."""
        with self.lock:
            days, self.history_days = self.history_days, []
        return days

    def keep_history_days(self, days: list[StoredDay]) -> None:
        """Days whose write failed, back at the head of the queue for the next evaluation's (a later
        write of a day holds all its points)."""
        with self.lock:
            self.history_days[:0] = days

    def _publish(self) -> None:
        """The active alerts for the readers (the overview, the alerts API, status, /metrics), who
        read them without the lock: an evaluation holds it a long while (with many alerts, a reader
        on the loop waited for the worker thread's evaluation)."""
        self._listing = tuple(sorted(((state.rule.key, fp, alert)
                                      for state in self.states for fp, alert in state.active.items()),
                                     key=_shown_first))

    def write(self, alerts: list[Alert], changes: StateChanges) -> bool:
        """Hand the transitions to the sink and save the changed states; False when either failed
        (both are offered again next time). Runs on the store thread under `infermon serve`."""
        sent = self._send(alerts)
        return self._persist(changes) and sent

    def _send(self, alerts: list[Alert]) -> bool:
        pending, self._unsent = [*self._unsent, *alerts], []
        if not pending:
            return True
        try:
            self.sink.enqueue(pending, "embedded")
        except Exception as exc:  # delivery's outbox failing: keep them and offer them again next time
            log.error("alert sink refused %d transition(s) (%s); retrying at the next evaluation",
                      len(pending), type(exc).__name__)
            self._unsent = pending
            return False
        return True

    def _explained(self, rule_key: str, transition: Transition) -> dict[str, str]:
        """Firing: the evidence now, kept for /api/v1/alerts and the resolved message; resolved:
        the evidence it fired with (what it was about, not the calm after)."""
        key = (rule_key, transition.alert.fingerprint)
        if transition.resolved_at is not None:
            return self.explained.pop(key, {})
        if self.explain is None:
            return {}
        try:
            extra = self.explain(transition.alert.labels)
        except Exception:  # a bug in the evidence must not hold back the alert itself
            log.exception("alert context for %s failed; sending it without", transition.rule.name)
            extra = {}
        self.explained[key] = extra
        return extra

    def _as_alert(self, transition: Transition, extra: Mapping[str, str] | None = None) -> Alert:
        alert = transition.alert
        fired = alert.fired_at if alert.fired_at is not None else transition.at
        ends = _utc(transition.resolved_at) if transition.resolved_at is not None else None
        return Alert(dict(alert.labels), _annotated(alert.annotations, extra), _utc(fired), ends,
                     self._generator_url(transition))

    def _generator_url(self, transition: Transition) -> str:
        if not self.external_url:
            return ""
        return f"{self.external_url}/graph?g0.expr={quote_plus(transition.rule.expr_text)}&g0.tab=1"

    # ---- state across restarts ------------------------------------------------------------

    def _restore(self) -> None:
        by_key = {state.rule.key: state for state in self.states}
        stale: list[tuple[str, str]] = []
        for row in load_alert_states(self.engine):
            state = by_key.get(row.rule)
            if state is None or row.state not in ("pending", "firing"):
                stale.append((row.rule, row.fingerprint))
                if row.state == "firing":  # its rule is gone: the receivers hear it is over
                    self._orphans.append(row)
                continue
            notes = {k: v for k, v in row.annotations.items() if k not in EXPLAINED}
            if row.state == "firing" and len(notes) < len(row.annotations):
                self.explained[(row.rule, row.fingerprint)] = {
                    k: v for k, v in row.annotations.items() if k in EXPLAINED}
            state.active[row.fingerprint] = ActiveAlert(
                dict(row.labels), notes, row.value, row.active_at,
                "firing" if row.state == "firing" else "pending", row.fired_at, row.keep_firing_since)
        if stale:
            save_alert_states(self.engine, [], stale)
        self._saved = {key: snapshot for key, snapshot in self._snapshots()}
        self._publish()
        restored = sum(len(s.active) for s in self.states)
        if restored:
            log.info("restored %d pending/firing alert(s) from the store", restored)

    def _snapshots(self) -> list[tuple[tuple[str, str], tuple[object, ...]]]:
        return [((state.rule.key, fp), (a.state, a.active_at, a.fired_at, a.keep_firing_since))
                for state in self.states for fp, a in state.active.items()]

    def changes(self) -> StateChanges:
        """What changed since the last save, taken on the loop (the states are the loop's)."""
        current = dict(self._snapshots())
        changed = [key for key, snap in current.items() if self._saved.get(key) != snap]
        gone = [key for key in self._saved if key not in current]
        by_key = {state.rule.key: state for state in self.states}
        upserts = []
        for rule_key, fp in changed:
            a = by_key[rule_key].active[fp]
            notes = _annotated(a.annotations, self.explained.get((rule_key, fp)))
            upserts.append(StoredAlert(rule_key, fp, a.labels, notes, a.state, a.active_at, a.fired_at,
                                       a.keep_firing_since, a.value if math.isfinite(a.value) else 0.0))
        return StateChanges(current, upserts, gone)

    def _persist(self, changes: StateChanges) -> bool:
        if not changes.upserts and not changes.gone:
            return True
        try:
            save_alert_states(self.engine, changes.upserts, changes.gone)
            self._saved = changes.current
        except Exception as exc:  # the store failing must not stop alerting; it is tried again next time
            log.error("saving alert state failed (%s); retrying at the next evaluation", type(exc).__name__)
            return False
        return True

    # ---- views --------------------------------------------------------------------------

    def active(self, limit: int | None = None) -> list[ActiveAlertRow]:
        """The active alerts as the last evaluation left them, in the order they are read in
        (`_shown_first`, sorted once per evaluation, off the loop); with `limit`, the first `limit`
        of them (only those are built: the overview's)."""
        listed: Sequence[Listed] = self._listing
        return [self._row(*each) for each in listed[:limit]]

    async def active_in_turns(self) -> list[ActiveAlertRow]:
        """`active()` on the loop, its other work let in between alerts (a large fleet has many)."""
        turn, rows = Turns(), list[ActiveAlertRow]()
        for each in self._listing:
            rows.append(self._row(*each))
            await turn()
        return rows

    def _row(self, rule_key: str, fp: str, a: ActiveAlert) -> ActiveAlertRow:
        return {"labels": a.labels, "annotations": _annotated(a.annotations, self.explained.get((rule_key, fp))),
                "state": a.state,
                "value": a.value if math.isfinite(a.value) else str(a.value),
                "active_at": _iso(a.active_at), "fired_at": _iso(a.fired_at)}

    def counts(self) -> dict[tuple[str, str, str], int]:
        """(layer label, alertname, state) -> how many alerts: the totals behind a shortened list."""
        found: dict[tuple[str, str, str], int] = {}
        for _, _, a in self._listing:
            key = (a.labels.get("layer", ""), a.labels.get("alertname", ""), a.state)
            found[key] = found.get(key, 0) + 1
        return found

    def firing_by_severity(self) -> dict[str, int]:
        counts = {state.rule.severity: 0 for state in self.states}
        for _, _, alert in self._listing:
            if alert.state == "firing":
                severity = alert.labels.get("severity", "")
                counts[severity] = counts.get(severity, 0) + 1
        return counts

    def status(self) -> AlertingStatus:
        listed = self._listing
        return {
            "enabled": True,
            "rules": len(self.states),
            "files": [str(path) for path in self.ruleset.files],
            "last_evaluation": self.last_ts,
            "firing": sum(1 for _, _, a in listed if a.state == "firing"),
            "pending": sum(1 for _, _, a in listed if a.state == "pending"),
            "waiting_for_first_collection": list(self.held),
            "left_to_prometheus": [left.as_dict() for left in self.ruleset.left_to_prometheus],
            "errors": [{"rule": s.rule.name, "error": s.last_error} for s in self.states if s.last_error],
        }

    def render(self) -> Metric:
        fam = family("inference_monitor_alerts_firing")
        for severity, count in sorted(self.firing_by_severity().items()):
            fam.add_sample("inference_monitor_alerts_firing", {"severity": severity}, float(count))
        return fam


# The order an operator reads active alerts in (the page, `infermon status`, the alerts API).
SEVERITY_ORDER = ("critical", "warning", "info")  # any other severity after these


def _shown_first(listed: Listed) -> tuple[bool, int, float, str, str]:
    """Firing before pending; then by severity; then the oldest first (since it fired, or went
    pending): the first alert of a cascade is the likeliest cause, and a row keeps its place as
    others join; then by name and fingerprint, so equal alerts keep one order."""
    _, fp, alert = listed
    severity = alert.labels.get("severity", "")
    rank = SEVERITY_ORDER.index(severity) if severity in SEVERITY_ORDER else len(SEVERITY_ORDER)
    since = alert.fired_at if alert.fired_at is not None else alert.active_at
    return alert.state != "firing", rank, since, alert.labels.get("alertname", ""), fp


def _annotated(annotations: Mapping[str, str], extra: Mapping[str, str] | None) -> dict[str, str]:
    """The rule's annotations and the evidence; an annotation the rule writes itself wins."""
    return {**annotations, **{k: v for k, v in (extra or {}).items() if k not in annotations}}
