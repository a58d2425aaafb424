"""Five weeks of the monitor's series, the last three of them creeping, stepped, quiet or seasonal:
the shipped rule files raise the same trend alerts on a real Prometheus at once and on the
embedded monitor whose history was seeded from that Prometheus by `infermon history import`, and
those alerts are the right ones (issue #55: a creep 21 days old is a creep, a step is a step, a
holiday is nothing).

The weeks end now: Prometheus evaluates its rules at wall-clock time, as it would after a restart
over a TSDB that already holds them. No recording rule, nothing to fill first. The embedded monitor
imports Prometheus' 5-minute points, the points Prometheus holds: both read the same numbers.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from monitor.alerting.embedded import EmbeddedEvaluator
from monitor.alerting.model import Alert
from monitor.cli import app
from monitor.config import HistorySettings
from monitor.history.importer import import_prometheus
from monitor.history.keeper import build_keeper, first_day, wanted_of
from monitor.history.store import HistoryTables
from monitor.rulefiles.rules import SHIPPED_DIR, load_rules
from monitor.sim.week import growth, holiday, product, step
from monitor.store.session import Store
from tests.conftest import require_binary
from tests.history.worlds import DAY, WEEK, World, openmetrics, seasonal
from tests.support.promserver import PrometheusServer

pytestmark = pytest.mark.prometheus

TTFT = "inference_ttft_seconds"
TPOT = "inference_tpot_seconds"


def labels(target: str, model: str) -> tuple[tuple[str, str], ...]:
    return (("model", model), ("quantile", "0.99"), ("target", target), ("window", "5m"))


def worlds(end: float) -> list[World]:
    ttft, tpot = seasonal(0.3), seasonal(0.015, 0.1)
    return [
        World(TTFT, {
            labels("gpu-a:8000", "creep-3"): product(ttft, growth(0.03, end - 21 * DAY)),
            labels("gpu-b:8000", "creep-1.5"): product(ttft, growth(0.015, end - 21 * DAY)),
            labels("gpu-c:8000", "young-creep"): product(ttft, growth(0.04, end - 5 * DAY)),  # flat for 16 days
            labels("gpu-d:8000", "step"): product(ttft, step(1.35, end - 3 * DAY)),
            # traffic at 30 % for the day around one week ago: latency 0.7x, the week-ago level the
            # rules compare the last hours with
            labels("gpu-e:8000", "holiday"): product(ttft, holiday(end - 7.5 * DAY, 0.7, DAY)),
            labels("gpu-f:8000", "step-then-creep"): product(ttft, step(1.3, end - 12 * DAY),
                                                             growth(0.03, end - 6 * DAY)),
            labels("gpu-g:8000", "stopped-creep"): product(ttft, growth(0.03, end - 21 * DAY, end - 7 * DAY)),
            labels("gpu-h:8000", "seasonal"): ttft,
        }),
        World(TPOT, {
            labels("gpu-a:8000", "creep-3"): product(tpot, growth(0.03, end - 21 * DAY)),
            labels("gpu-h:8000", "seasonal"): tpot,
        }),
    ]


EXPECTED = {("TTFTP99Creep", "creep-3"), ("TTFTP99Creep", "creep-1.5"), ("TTFTP99Creep", "young-creep"),
            ("TTFTP99Step", "step"), ("TTFTP99Creep", "step-then-creep"), ("TPOTP99Creep", "creep-3")}
CREEPING = {"creep-3", "creep-1.5", "young-creep", "step-then-creep"}


class Sink:
    def __init__(self) -> None:
        self.sent: list[Alert] = []

    def enqueue(self, alerts: Sequence[Alert], source: str) -> None:
        self.sent.extend(alerts)


def firing(alerts: Iterable[Mapping[str, Any]]) -> set[tuple[str, str]]:
    return {(a["labels"]["alertname"], a["labels"].get("model", "")) for a in alerts if a["state"] == "firing"}


def evaluated_once(prom: PrometheusServer, timeout: float = 60.0) -> list[dict[str, Any]]:
    """Prometheus' alerts once every rule group has been evaluated (no `for` in the trend rules:
    what fires, fires at the first evaluation)."""
    deadline = time.monotonic() + timeout
    while True:
        groups = httpx.get(f"{prom.url}/api/v1/rules", timeout=10).json()["data"]["groups"]
        if groups and all(not g["lastEvaluation"].startswith("0001-") for g in groups):
            return prom.alerts()
        assert time.monotonic() < deadline, [g["name"] for g in groups if g["lastEvaluation"].startswith("0001-")]
        time.sleep(0.2)


def test_prometheus_and_the_seeded_embedded_monitor_name_every_creep_and_step_alike(tmp_path: Path) -> None:
    end = time.time() - 30
    source = tmp_path / "weeks.om"
    source.write_text(openmetrics(worlds(end), end - 5 * WEEK, end))
    rule_files = sorted(SHIPPED_DIR.glob("*.yml"))  # only the shipped files
    prom = PrometheusServer({}, binary=require_binary("prometheus"), retention="60d", rule_files=rule_files,
                            evaluation_interval="1s")
    # a block a week: five weeks are five blocks to write, not 35 (several times faster)
    subprocess.run([require_binary("promtool"), "tsdb", "create-blocks-from", "openmetrics",
                    "--max-block-duration=168h", str(source),
                    str(prom.dir / "data")], check=True, capture_output=True)
    with prom:
        theirs = evaluated_once(prom)

        # The embedded monitor: a new store seeded from this Prometheus, then its evaluator at once.
        store = Store(f"sqlite:///{tmp_path / 'infermon.db'}")
        ruleset = load_rules(rule_files)
        tables = HistoryTables(store.engine)
        with httpx.Client(base_url=prom.url) as client:
            done = import_prometheus(client, wanted_of(ruleset, []), end - 5 * WEEK, time.time(), tables)
        assert done.series == sum(len(world.series) for world in worlds(end)) and done.days >= 35
        keeper = build_keeper(HistorySettings(series=[]), ruleset)
        assert keeper is not None
        reach = max(rule.expr.longest_reach for rule in ruleset.rules if rule.trend)
        assert keeper.memory_days * DAY >= reach  # it keeps what the rules read
        now = time.time()
        keeper.load(tables.read(first_day(now, keeper.memory_days)), now)
        sink = Sink()
        evaluator = EmbeddedEvaluator(ruleset, store.engine, sink, history=keeper)
        evaluator.evaluate({}, now)
        again = prom.alerts()  # ... and Prometheus at (about) the same instant
        store.close()
    ours = {(a.labels["alertname"], a.labels.get("model", "")) for a in sink.sent}
    assert ours == firing(theirs) == firing(again)  # pair for pair
    assert ours == EXPECTED, sorted(ours ^ EXPECTED)
    described = [a.annotations.get("description", "") for a in sink.sent if a.labels.get("model") in CREEPING]
    described += [a["annotations"].get("description", "") for a in theirs + again
                  if a["labels"].get("model") in CREEPING]
    assert described and not [text for text in described if "no longer grows" in text]


def test_history_import_command_says_what_it_did_and_fails_on_a_dead_prometheus(tmp_path: Path) -> None:
    end = time.time() - 30
    source = tmp_path / "weeks.om"
    source.write_text(openmetrics(worlds(end)[:1], end - 2 * DAY, end))
    prom = PrometheusServer({}, binary=require_binary("prometheus"), retention="60d")
    subprocess.run([require_binary("promtool"), "tsdb", "create-blocks-from", "openmetrics",
                    "--max-block-duration=24h", str(source),
                    str(prom.dir / "data")], check=True, capture_output=True)
    db = tmp_path / "infermon.db"
    env = {"INFERMON_STORAGE__URL": f"sqlite:///{db}"}
    runner = CliRunner()
    with prom:
        result = runner.invoke(app, ["history", "import", "--prometheus", prom.url, "--days", "3"], env=env)
        assert result.exit_code == 0, result.output
        assert f"imported {len(worlds(end)[0].series)} series" in result.output
        store = Store(f"sqlite:///{db}")
        stored = HistoryTables(store.engine).read(0)
        store.close()
        assert {d.name for d in stored} == {TTFT} and len(stored) >= 3
        assert all("job" not in d.labels for d in stored)
        dead = runner.invoke(app, ["history", "import", "--prometheus", "http://127.0.0.1:9", "--days", "1"], env=env)
    assert dead.exit_code == 1 and "Prometheus did not answer" in dead.output
