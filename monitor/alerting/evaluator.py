"""Alerting-rule semantics, as Prometheus' rules/alerting.go applies them (pure: no I/O, no clock).

At each evaluation time `ts`, per rule:
- every sample of the expression becomes an alert with labels = the series' labels without
  `__name__`, then the rule's labels (templated), then `alertname`; a new one is *pending*
  with `active_at = ts`; a known one takes the new value and annotations;
- a pending alert whose `ts - active_at >= for` becomes *firing* (`fired_at = ts`): a transition;
- an alert missing from the result is dropped; if it was firing it is *resolved* at `ts` (a
  transition) - unless `keep_firing_for` holds it, counted from the first evaluation it was missing;
- two samples that end up with the same alert labels are an evaluation error: nothing changes;
- an alert of a `held` target missing from the result stays as it was (the monitor's own gap, not
  the engine's: Prometheus would resolve it, as it does when a scrape fails).

Prometheus evaluates on an exact grid; the monitor evaluates when fresh data arrives, a few
milliseconds off any grid, so durations are compared with `slack` seconds of tolerance (a
fraction of the interval: `for: 30s` still means the evaluation 30 s after the first one).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Literal

from monitor.alerting.model import fingerprint
from monitor.rulefiles.promql import Labels, Samples, TrendError
from monitor.rulefiles.rules import AlertRule
from monitor.rulefiles.templates import TemplateData

State = Literal["pending", "firing"]


class EvaluationError(ValueError):
    pass


@dataclass
class ActiveAlert:
    labels: dict[str, str]
    annotations: dict[str, str]
    value: float
    active_at: float
    state: State = "pending"
    fired_at: float | None = None
    keep_firing_since: float | None = None
    rendered_for: tuple[float, str] | None = None  # the value and series name its annotations were rendered for

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.labels)


@dataclass(frozen=True)
class Transition:
    """An alert became firing, or was resolved (then `resolved_at` is set)."""

    rule: AlertRule
    alert: ActiveAlert
    at: float
    resolved_at: float | None = None

    @property
    def status(self) -> str:
        return "resolved" if self.resolved_at is not None else "firing"


@dataclass
class RuleState:
    rule: AlertRule
    active: dict[str, ActiveAlert] = field(default_factory=dict)  # by fingerprint
    last_error: str | None = None
    last_evaluation: float | None = None
    # The last evaluation's series -> (that series, its alert's labels, their fingerprint), by the
    # series' identity, for a rule whose labels read nothing of the sample: a reader of page after
    # page hands the same label dicts every tick (on a large fleet, every alert's labels and
    # fingerprint were built again each tick, to the same result).
    _by_series: dict[int, tuple[Labels, dict[str, str], str]] = field(default_factory=dict, repr=False)

    def evaluate(self, samples: Samples, ts: float, external_url: str = "", slack: float = 0.0,
                 held: Collection[str] = ()) -> list[Transition]:
        """`held`: targets whose alerts stay as they are when the result lacks them (the monitor fell
        behind on them: their series are withheld, which says nothing about the engine)."""
        try:
            found = self._alerts(samples, external_url)
        except (EvaluationError, TrendError) as exc:
            self.last_error = str(exc)
            return []
        self.last_error = None
        self.last_evaluation = ts
        for fp, alert in found.items():
            known = self.active.get(fp)
            if known is not None:
                known.value, known.annotations, known.rendered_for = alert.value, alert.annotations, alert.rendered_for
            else:
                alert.active_at = ts
                self.active[fp] = alert
        return self._advance(found, ts, slack, held)

    def _alerts(self, samples: Samples, external_url: str) -> dict[str, ActiveAlert]:
        rule = self.rule
        found: dict[str, ActiveAlert] = {}
        static = all(template.constant for template in rule.labels.values())
        known_series, self._by_series = self._by_series, {}
        for series, value in rule.expr.eval(samples):
            data: TemplateData | None = None
            kept = known_series.get(id(series)) if static else None
            if kept is not None and kept[0] is series:
                labels, fp = kept[1], kept[2]
            else:
                data = TemplateData(series, value, external_url)
                labels = {k: v for k, v in series.items() if k != "__name__"}
                labels.update({name: template.render(data) for name, template in rule.labels.items()})
                labels["alertname"] = rule.name
                labels = {k: v for k, v in labels.items() if v != ""}  # an empty label is no label, as in Prometheus
                fp = fingerprint(labels)
            if static:
                self._by_series[id(series)] = (series, labels, fp)  # holding `series` keeps its id its own
            # The annotations read the labels (the same, by the fingerprint), the value and the series'
            # name: an alert whose value has not moved since the last evaluation keeps its texts (a
            # rule matching every target rendered one description per target every publish tick).
            source = (value, series.get("__name__", ""))
            known = self.active.get(fp)
            if known is not None and known.rendered_for is not None and _same(known.rendered_for, source):
                annotations = known.annotations
            else:
                if data is None:
                    data = TemplateData(series, value, external_url)
                annotations = {k: t.render(data) for k, t in rule.annotations.items()}
            alert = ActiveAlert(labels, annotations, value, 0.0, rendered_for=source)
            if fp in found:
                raise EvaluationError(f"{rule.name}: two series give the same alert labels {labels}")
            found[fp] = alert
        return found

    def _advance(self, found: Mapping[str, ActiveAlert], ts: float, slack: float,
                 held: Collection[str] = ()) -> list[Transition]:
        rule = self.rule
        transitions: list[Transition] = []
        for fp, alert in list(self.active.items()):
            if fp not in found:
                if held and alert.labels.get("target") in held:
                    continue  # not looked at: neither resolved nor dropped, `for` and keep_firing_for as they were
                if alert.state == "firing" and rule.keep_firing_for_seconds > 0:
                    if alert.keep_firing_since is None:
                        alert.keep_firing_since = ts
                    if ts - alert.keep_firing_since < rule.keep_firing_for_seconds - slack:
                        continue
                del self.active[fp]
                if alert.state == "firing":
                    transitions.append(Transition(rule, alert, ts, resolved_at=ts))
                continue
            alert.keep_firing_since = None
            if alert.state == "pending" and ts - alert.active_at >= rule.for_seconds - slack:
                alert.state, alert.fired_at = "firing", ts
                transitions.append(Transition(rule, alert, ts))
        return transitions


def _same(a: tuple[float, str], b: tuple[float, str]) -> bool:
    """The same value (NaN is NaN here: its texts are the same) and series name."""
    return a[1] == b[1] and (a[0] == b[0] or (a[0] != a[0] and b[0] != b[0]))
