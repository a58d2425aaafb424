"""Rule-state semantics (for, keep_firing_for, resolve, duplicate labels) and the embedded
evaluator around it: transitions to the sink exactly once, state kept across restarts."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import UTC, datetime

import pytest

from monitor.alerting.embedded import EmbeddedEvaluator
from monitor.alerting.evaluator import RuleState
from monitor.alerting.model import Alert
from monitor.rulefiles.promql import Sample, parse
from monitor.rulefiles.rules import AlertRule, RuleSet
from monitor.rulefiles.templates import Template
from monitor.store.session import Store


def make_rule(expr: str, for_s: float = 0.0, keep_s: float = 0.0, **labels: str) -> AlertRule:
    return AlertRule("Hot", "g", "g/Hot/0", expr, parse(expr), for_s, keep_s,
                     {"severity": Template("warning"), **{k: Template(v) for k, v in labels.items()}},
                     {"description": Template("{{ $labels.gpu }} at {{ $value }}")})


def temps(*values: float) -> dict[str, list[Sample]]:
    return {"t": [({"__name__": "t", "gpu": str(i)}, v) for i, v in enumerate(values)]}


def states(state: RuleState) -> dict[str, str]:
    return {a.labels["gpu"]: a.state for a in state.active.values()}


def test_pending_then_firing_after_for_then_resolved() -> None:
    state = RuleState(make_rule("t > 80", for_s=30))
    assert state.evaluate(temps(90, 50), 0) == [] and states(state) == {"0": "pending"}
    assert state.evaluate(temps(90, 50), 15) == []
    [fired] = state.evaluate(temps(91, 50), 30)
    assert fired.status == "firing" and fired.alert.fired_at == 30 and fired.alert.active_at == 0
    assert fired.alert.labels == {"gpu": "0", "severity": "warning", "alertname": "Hot"}
    assert fired.alert.annotations == {"description": "0 at 91"} and fired.alert.value == 91
    assert state.evaluate(temps(95, 50), 45) == []  # still firing: no second transition
    [resolved] = state.evaluate(temps(70, 50), 60)
    assert resolved.status == "resolved" and resolved.resolved_at == 60 and states(state) == {}


def test_annotations_follow_the_value_and_the_series_and_nothing_else_is_rendered_again() -> None:
    rule = make_rule("t > 80 or u > 80")
    rule = AlertRule(rule.name, rule.group, rule.key, rule.expr_text, rule.expr, 0.0, 0.0, rule.labels,
                     {"description": Template("{{ $labels.__name__ }} {{ $labels.gpu }} at {{ $value }}")})
    state = RuleState(rule)

    def text() -> str:
        return next(iter(state.active.values())).annotations["description"]

    state.evaluate(temps(90), 0)
    assert text() == "t 0 at 90"
    kept = next(iter(state.active.values())).annotations
    state.evaluate(temps(90), 15)
    assert text() == "t 0 at 90" and next(iter(state.active.values())).annotations is kept  # not rendered again
    state.evaluate(temps(95), 30)
    assert text() == "t 0 at 95"
    # The same labels and value from another series: its name is in the text, so it is rendered again.
    state.evaluate({"u": [({"__name__": "u", "gpu": "0"}, 95.0)]}, 45)
    assert text() == "u 0 at 95"
    nan = RuleState(make_rule("t != 0"))
    nan.evaluate(temps(float("nan")), 0)
    nan.evaluate(temps(float("nan")), 15)
    assert next(iter(nan.active.values())).annotations == {"description": "0 at NaN"}


def test_a_dip_restarts_for_and_a_pending_alert_resolves_silently() -> None:
    state = RuleState(make_rule("t > 80", for_s=30))
    state.evaluate(temps(90), 0)
    assert state.evaluate(temps(70), 15) == [] and states(state) == {}  # pending gone, nothing sent
    state.evaluate(temps(90), 30)
    assert state.evaluate(temps(90), 45) == [] and next(iter(state.active.values())).active_at == 30
    assert [t.status for t in state.evaluate(temps(90), 60)] == ["firing"]


def test_without_for_an_alert_fires_at_its_first_evaluation() -> None:
    assert [t.status for t in RuleState(make_rule("t > 80")).evaluate(temps(81), 0)] == ["firing"]


def test_keep_firing_for_holds_a_firing_alert_after_the_condition_clears() -> None:
    state = RuleState(make_rule("t > 80", keep_s=30))
    state.evaluate(temps(90), 0)
    assert state.evaluate(temps(50), 15) == [] and states(state) == {"0": "firing"}  # missing since 15
    assert state.evaluate(temps(90), 30) == []  # back: the hold resets
    assert state.evaluate(temps(50), 45) == [] and state.evaluate(temps(50), 60) == []  # held 45..75
    [resolved] = state.evaluate(temps(50), 75)
    assert resolved.status == "resolved" and resolved.resolved_at == 75


def test_two_series_with_the_same_alert_labels_are_an_error_that_changes_nothing() -> None:
    state = RuleState(make_rule("t > 80", gpu="all"))
    assert state.evaluate(temps(90, 95), 0) == []
    assert state.active == {} and state.last_error and "same alert labels" in state.last_error


class RecordingSink:
    def __init__(self) -> None:
        self.sent: list[Alert] = []
        self.fail = False

    def enqueue(self, alerts: Sequence[Alert], source: str) -> None:
        assert source == "embedded"
        if self.fail:
            raise RuntimeError("outbox unavailable")
        self.sent.extend(alerts)


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    store = Store(store_url)  # SQLite and PostgreSQL
    yield store
    store.close()


def evaluator(store: Store, sink: RecordingSink, **kwargs: float) -> EmbeddedEvaluator:
    return EmbeddedEvaluator(RuleSet([make_rule("t > 80", **kwargs)]), store.engine, sink,
                             external_url="http://mon:9480/")


def at(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


def test_transitions_reach_the_sink_once_as_alertmanager_alerts(store: Store) -> None:
    sink = RecordingSink()
    embedded = evaluator(store, sink, for_s=30)
    for ts in (1000, 1015, 1030, 1045, 1060):
        embedded.evaluate(temps(90), ts)
    embedded.evaluate(temps(50), 1075)
    firing, resolved = sink.sent
    assert (firing.status, firing.starts_at, firing.ends_at) == ("firing", at(1030), None)
    assert (resolved.status, resolved.starts_at, resolved.ends_at) == ("resolved", at(1030), at(1075))
    assert firing.fingerprint == resolved.fingerprint and firing.labels["alertname"] == "Hot"
    assert firing.generator_url == "http://mon:9480/graph?g0.expr=t+%3E+80&g0.tab=1"


def test_a_firing_alert_survives_a_restart_without_a_second_firing(store: Store) -> None:
    sink = RecordingSink()
    first = evaluator(store, sink, for_s=30)
    for ts in (1000, 1015, 1030):
        first.evaluate(temps(90), ts)
    assert [a.status for a in sink.sent] == ["firing"]
    restarted = evaluator(store, sink, for_s=30)  # same SQLite file
    assert restarted.active()[0]["state"] == "firing"
    assert restarted.active()[0]["fired_at"] == "1970-01-01T00:17:10Z"
    restarted.evaluate(temps(90), 1045)
    assert [a.status for a in sink.sent] == ["firing"]
    restarted.evaluate(temps(50), 1060)
    assert [a.status for a in sink.sent] == ["firing", "resolved"] and sink.sent[1].starts_at == at(1030)
    assert evaluator(store, sink, for_s=30).active() == []  # resolved is forgotten


def test_a_pending_alert_keeps_its_start_across_a_restart(store: Store) -> None:
    sink = RecordingSink()
    evaluator(store, sink, for_s=30).evaluate(temps(90), 1000)
    restarted = evaluator(store, sink, for_s=30)
    restarted.evaluate(temps(90), 1015)
    assert sink.sent == []
    restarted.evaluate(temps(90), 1030)  # 30 s after the first evaluation, not after the restart
    assert [(a.status, a.starts_at) for a in sink.sent] == [("firing", at(1030))]


def test_a_refusing_sink_gets_the_transition_again_next_time(store: Store) -> None:
    sink = RecordingSink()
    embedded = evaluator(store, sink)
    sink.fail = True
    embedded.evaluate(temps(90), 1000)
    sink.fail = False
    embedded.evaluate(temps(90), 1015)
    assert [a.status for a in sink.sent] == ["firing"]


def test_firing_counts_per_severity(store: Store) -> None:
    embedded = evaluator(store, RecordingSink())
    embedded.evaluate(temps(90, 95, 10), 1000)
    assert embedded.firing_by_severity() == {"warning": 2}
    assert [(s.labels, s.value) for s in embedded.render().samples] == [({"severity": "warning"}, 2.0)]


def test_a_rule_label_that_renders_empty_is_dropped() -> None:
    [fired] = RuleState(make_rule("t > 80", team="{{ $labels.team }}")).evaluate(temps(90), 0)
    assert "team" not in fired.alert.labels


# -- targets the monitor fell behind on ----------------------------------------------------------


def test_a_stale_targets_alerts_are_held_until_it_is_scraped_again(store: Store) -> None:
    # TTFT reads a per-target service series, which a stale target's page leaves out: its alerts
    # of a stale target stay as they were. Failing reads no such series: it resolves as always.
    def rule(name: str, expr: str, for_s: float) -> AlertRule:
        return AlertRule(name, "g", f"g/{name}/0", expr, parse(expr), for_s, 0.0, {}, {})

    sink = RecordingSink()
    embedded = EmbeddedEvaluator(RuleSet([
        rule("TTFT", 'inference_ttft_seconds{quantile="0.99",target!=""} > 1', 30),
        rule("Failing", "inference_monitor_collector_success == 0", 0)]), store.engine, sink)

    def page(ttft: dict[str, float], stale: frozenset[str] = frozenset(),
             failing: frozenset[str] = frozenset()) -> dict[str, list[Sample]]:
        name = "inference_ttft_seconds"
        return {
            name: [({"__name__": name, "target": t, "model": "m", "quantile": "0.99"}, v) for t, v in ttft.items()],
            "inference_target_stale": [({"__name__": "inference_target_stale", "target": t}, 1.0 if t in stale else 0.0)
                                       for t in ("a", "b", "c")],
            "inference_monitor_collector_success": [
                ({"__name__": "inference_monitor_collector_success", "collector": "service", "target": t}, 0.0)
                for t in failing]}

    def sent() -> list[tuple[str, str, str]]:
        return [(a.labels["alertname"], a.labels["target"], a.status) for a in sink.sent]

    def active(name: str) -> dict[str, str]:
        return {a["labels"]["target"]: a["state"] for a in embedded.active() if a["labels"]["alertname"] == name}

    embedded.evaluate(page({"a": 2, "b": 2}, failing=frozenset("a")), 1000)
    embedded.evaluate(page({"a": 2, "b": 2}), 1030)
    assert sent() == [("Failing", "a", "firing"), ("TTFT", "a", "firing"), ("TTFT", "b", "firing"),
                      ("Failing", "a", "resolved")]
    sink.sent.clear()
    embedded.evaluate(page({"b": 2, "c": 3}, stale=frozenset("a"), failing=frozenset("a")), 1045)  # c starts pending
    embedded.evaluate(page({"b": 2}, stale=frozenset("ac")), 1060)
    assert sent() == [("Failing", "a", "firing"), ("Failing", "a", "resolved")]  # nothing said of TTFT
    assert active("TTFT") == {"a": "firing", "b": "firing", "c": "pending"}
    embedded.evaluate(page({"c": 3}, stale=frozenset("a")), 1075)  # b is fresh and its TTFT is fine: resolved
    embedded.evaluate(page({"a": 0.5, "c": 3}), 1090)  # a scraped again, its TTFT fine: resolved now
    assert sent()[2:] == [("TTFT", "b", "resolved"), ("TTFT", "c", "firing"), ("TTFT", "a", "resolved")]
    assert [a.ends_at for a in sink.sent[2:]] == [at(1075), None, at(1090)]
    assert sink.sent[3].starts_at == at(1075)  # c's `for` counted from 1045, the gap in between held
    assert active("TTFT") == {"c": "firing"}


def test_an_alerts_labels_are_kept_per_series_only_while_no_label_reads_the_sample() -> None:
    series = {"__name__": "t", "gpu": "0"}  # the same dict tick after tick, as the page's reader hands it
    kept = RuleState(make_rule("t > 80"))
    kept.evaluate({"t": [(series, 90.0)]}, 0)
    [first] = kept.active.values()
    kept.evaluate({"t": [(series, 95.0)]}, 15)
    assert [alert.labels for alert in kept.active.values()] == [{"gpu": "0", "severity": "warning", "alertname": "Hot"}]
    assert next(iter(kept.active.values())) is first and first.value == 95.0
    valued = RuleState(make_rule("t > 80", band="{{ $value }}"))  # a label that reads the value: rendered each time
    valued.evaluate({"t": [(series, 90.0)]}, 0)
    valued.evaluate({"t": [(series, 95.0)]}, 15)
    assert [alert.labels["band"] for alert in valued.active.values()] == ["95"]
    named = RuleState(make_rule("t > 80", where="{{ $labels.gpu }}"))  # reads the labels: rendered each time too
    named.evaluate({"t": [(series, 90.0)]}, 0)
    named.evaluate({"t": [({**series, "gpu": "1"}, 90.0)]}, 15)
    assert [alert.labels["where"] for alert in named.active.values()] == ["1"]
