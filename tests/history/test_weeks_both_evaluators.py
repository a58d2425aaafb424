"""Two weeks of the monitor's series, creeping, stepped and seasonal models: the shipped rule files
raise the same trend alerts on a real Prometheus at once and on the embedded monitor whose
history was seeded from that Prometheus by `infermon history import`.

The weeks end now: Prometheus evaluates its rules at wall-clock time, as it would after a restart
over a TSDB that already holds them. No recording rule, nothing to fill first.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from bench.promserver import PrometheusServer
from monitor.alerting.embedded import EmbeddedEvaluator
from monitor.alerting.model import Alert
from monitor.cli import app
from monitor.config import HistorySettings
from monitor.history.importer import import_prometheus
from monitor.history.keeper import build_keeper, first_day, wanted_of
from monitor.history.store import HistoryTables
from monitor.rulefiles.rules import SHIPPED_DIR, load_rules
from monitor.store.session import Store
from tests.conftest import require_binary
from tests.history.worlds import DAY, WEEK, World, creeping, openmetrics, seasonal, stepped

pytestmark = pytest.mark.prometheus

TTFT = "inference_ttft_seconds"
TPOT = "inference_tpot_seconds"


def labels(target: str, model: str) -> tuple[tuple[str, str], ...]:
    return (("model", model), ("quantile", "0.99"), ("target", target), ("window", "5m"))


def worlds(end: float) -> list[World]:
    return [
        World(TTFT, {
            labels("gpu-a:8000", "creeping"): creeping(seasonal(0.3), end - 3 * DAY, 0.04),
            labels("gpu-b:8000", "seasonal"): seasonal(0.3),
            labels("gpu-c:8000", "stepped"): stepped(seasonal(0.3), end - 4 * DAY, 1.3),
        }),
        World(TPOT, {
            labels("gpu-a:8000", "creeping"): seasonal(0.02, 0.1),  # the TTFT creeps; decoding does not
            labels("gpu-b:8000", "seasonal"): seasonal(0.02, 0.1),
            labels("gpu-c:8000", "stepped"): seasonal(0.02, 0.1),
        }),
    ]


EXPECTED = {("TTFTP99Creep", "creeping"), ("TTFTP99Step", "stepped")}


class Sink:
    def __init__(self) -> None:
        self.sent: list[Alert] = []

    def enqueue(self, alerts: Sequence[Alert], source: str) -> None:
        self.sent.extend(alerts)


def wait_for_alerts(prom: PrometheusServer, timeout: float = 60.0) -> set[tuple[str, str]]:
    deadline = time.monotonic() + timeout
    while True:
        found = {(a["labels"]["alertname"], a["labels"].get("model", "")) for a in prom.alerts()
                 if a["state"] == "firing"}
        if found >= EXPECTED or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def test_prometheus_and_the_seeded_embedded_monitor_raise_the_same_trend_alerts(tmp_path: Path) -> None:
    end = time.time() - 30
    source = tmp_path / "weeks.om"
    source.write_text(openmetrics(worlds(end), end - 3 * WEEK, end))
    rule_files = sorted(SHIPPED_DIR.glob("*.yml"))
    prom = PrometheusServer({}, binary=require_binary("prometheus"), retention="60d", rule_files=rule_files,
                            evaluation_interval="1s")
    subprocess.run([require_binary("promtool"), "tsdb", "create-blocks-from", "openmetrics",
                    "--max-block-duration=24h", str(source),
                    str(prom.dir / "data")], check=True, capture_output=True)
    with prom:
        fired = wait_for_alerts(prom)
        assert fired == EXPECTED  # at its first evaluations: no recording rule, no `for` to wait out

        # The embedded monitor: a new store seeded from this Prometheus, then its evaluator at once.
        store = Store(f"sqlite:///{tmp_path / 'infermon.db'}")
        ruleset = load_rules(rule_files)
        tables = HistoryTables(store.engine)
        with httpx.Client(base_url=prom.url) as client:
            done = import_prometheus(client, wanted_of(ruleset, []), end - 3 * WEEK, time.time(), tables)
        assert done.series == 6 and done.days >= 21
        keeper = build_keeper(HistorySettings(series=[]), ruleset)
        assert keeper is not None
        now = time.time()
        keeper.load(tables.read(first_day(now, keeper.memory_days)), now)
        sink = Sink()
        evaluator = EmbeddedEvaluator(ruleset, store.engine, sink, history=keeper)
        evaluator.evaluate({}, now)
        embedded = {(a.labels["alertname"], a.labels.get("model", "")) for a in sink.sent}
        store.close()
    assert embedded == EXPECTED


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
        assert "imported 3 series" in result.output
        store = Store(f"sqlite:///{db}")
        stored = HistoryTables(store.engine).read(0)
        store.close()
        assert {d.name for d in stored} == {TTFT} and len(stored) >= 3
        assert all("job" not in d.labels for d in stored)
        dead = runner.invoke(app, ["history", "import", "--prometheus", "http://127.0.0.1:9", "--days", "1"], env=env)
    assert dead.exit_code == 1 and "Prometheus did not answer" in dead.output
