"""Broken targets on a real loopback server: each one is down, says why, and costs the others nothing.

One Monitor scrapes a good target (the vLLM V1 fixture page, counters growing between scrapes)
beside one target per way of being broken. For every broken target: `inference_target_up` is 0,
the reason is in the status API and in the log, and none of its derived series is exported.
The good target's lines are byte-for-byte those of a Monitor that scrapes only the good target,
and a cycle with hung and trickling targets ends at the scrape deadline.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from monitor.config import Settings, load_settings
from monitor.promtext import parse
from monitor.runtime import Monitor
from tests.support.appserver import serve_app
from tests.support.pageserver import (
    Behaviour,
    Generated,
    Hang,
    Page,
    PageServer,
    Reset,
    Trickle,
    Truncated,
    garbage_page,
    html_page,
    oversized_page,
    status_page,
)

FIXTURE = (Path(__file__).resolve().parents[1] / "fixtures" / "sample_vllm_v1.prom").read_text()
TIMEOUT = 1.0  # scrape_timeout in these tests
MARGIN = 0.5  # what a cycle may take beyond the deadline (parsing the good page, scheduling)
MAX_PAGE = 100_000  # max_page_bytes: the fixture page (~55 kB) fits, the oversized ones do not
START, STEP = 1_700_000_000.0, 15.0  # the injected wall clock
CYCLES = 3
_COUNTER_LINE = re.compile(r"^(vllm:[^{ ]+?(?:_total|_bucket|_count|_sum)(?:\{[^}]*\})?) (\S+)$", re.M)


def grown(hit: int) -> str:
    """The fixture page after `hit` scrapes: every counter (and bucket) 10 % higher per hit."""
    factor = 1 + 0.1 * hit
    return _COUNTER_LINE.sub(lambda m: f"{m.group(1)} {float(m.group(2)) * factor!r}", FIXTURE)


def cut_mid_line() -> int:
    """An offset inside the label block of a sample we read, so the cut is never at a line end."""
    return FIXTURE.index('vllm:generation_tokens_total{engine="0",model') + 40


def malformed_page() -> tuple[str, int]:
    """The fixture with one sample we read given a value that is not a number; and its line."""
    line = re.search(r"^vllm:num_requests_running\{.*\} 12\.0$", FIXTURE, re.M)
    assert line is not None
    number = FIXTURE.count("\n", 0, line.start()) + 1
    return FIXTURE.replace(line.group(0), line.group(0).replace("12.0", "twelve")), number


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now


def make_settings(targets: dict[str, str], **service: Any) -> Settings:
    return load_settings(None, {"storage": {"url": "sqlite://"}, "infra": {"nvml": {"enabled": "false"}}, "service": {
        "scrape_interval": "15s",
        "scrape_timeout": f"{TIMEOUT:g}s",
        "windows": ["1m"],
        "max_page_bytes": MAX_PAGE,
        "targets": [{"name": name, "url": url} for name, url in targets.items()],
        **service,
    }})


def service_lines(text: str, target: str) -> list[str]:
    """The exported sample lines of one target plus the fleet-wide ones (no `target` label)."""
    lines = []
    for line in text.splitlines():
        if not line or line.startswith(("#", "inference_monitor_")):
            continue
        if f'target="{target}"' in line or 'target="' not in line:
            lines.append(line)
    return lines


def lines_with_target(text: str, target: str) -> list[str]:
    return [line for line in text.splitlines() if f'target="{target}"' in line]


# -- the broken cases ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    name: str
    serve: Callable[[PageServer], str]  # installs the behaviour, returns the target URL
    error: str  # what the status error (and the log line) must contain
    vanishes: bool = False  # up for the first cycles, then broken


def at(path: str, behaviour: Behaviour) -> Callable[[PageServer], str]:
    return lambda server: server.set(path, behaviour)


CASES = [
    Case("truncated", at("/truncated", Truncated(FIXTURE, keep=cut_mid_line())),
         "RemoteProtocolError: peer closed connection without sending complete message body"
         f" (received {cut_mid_line()} bytes, expected {len(FIXTURE.encode())})"),
    Case("truncated-chunked", at("/truncated-chunked", Truncated(FIXTURE, cut_mid_line(), chunked=True)),
         "RemoteProtocolError: peer closed connection without sending complete message body"
         " (incomplete chunked read)"),
    # A complete HTTP exchange whose page stops mid-line: only the missing final line feed shows it.
    Case("cut-mid-line", at("/cut", Page(FIXTURE[: cut_mid_line()], chunked=True)),
         "truncated: the last line does not end with a line feed"),
    Case("html", at("/html", html_page()), "not Prometheus text: the body looks like HTML"),
    Case("html-wrapped-page", at("/html-wrapped", html_page(f"<pre>\n{FIXTURE}</pre>")),
         "not Prometheus text: the body looks like HTML"),
    Case("json", at("/json", Page('{"object": "error", "message": "Not Found"}\n',
                                  content_type="application/json")),
         "not Prometheus text: the body is JSON"),
    Case("malformed-sample", at("/malformed", Page(malformed_page()[0])),
         f"line {malformed_page()[1]}: bad value 'twelve'"),
    Case("binary-garbage", at("/garbage", garbage_page()), "page is not UTF-8 text"),
    Case("too-large", at("/large", oversized_page(FIXTURE, MAX_PAGE, chunked=False)),
         f"page larger than {MAX_PAGE} bytes ({len(oversized_page(FIXTURE, MAX_PAGE, False).body)})"),
    Case("too-large-chunked", at("/large-chunked", oversized_page(FIXTURE, MAX_PAGE, chunked=True)),
         f"page larger than {MAX_PAGE} bytes"),
    Case("hang", at("/hang", Hang()), f"timed out after {TIMEOUT:g}s"),
    Case("hang-raw-accept", lambda server: server.hung_url(), f"timed out after {TIMEOUT:g}s"),
    Case("trickle", at("/trickle", Trickle(FIXTURE, interval=0.5)), f"timed out after {TIMEOUT:g}s"),
    Case("http-404", at("/404", status_page(404)), "HTTP 404"),
    Case("http-500", at("/500", status_page(500, "Internal Server Error\n")), "HTTP 500"),
    Case("refused", lambda server: server.refused_url(), "connection failed: Connection refused"),
    Case("reset", at("/reset", Reset()), "ReadError: [Errno 104] Connection reset by peer"),
    Case("vanish-404", at("/vanish-404", Generated(grown)), "HTTP 404", vanishes=True),
    Case("vanish-refused", lambda server: "", "connection failed: Connection refused",
         vanishes=True),  # on a server of its own, closed before the last cycle
]
SLOW = {"hang", "hang-raw-accept", "trickle"}


@dataclass
class Run:
    before_text: str = ""  # /metrics before the last cycle (the vanishing targets still up)
    text: str = ""  # /metrics and status after the last cycle
    status: dict[str, Any] = field(default_factory=dict)
    durations: list[float] = field(default_factory=list)  # seconds per cycle
    records: list[logging.LogRecord] = field(default_factory=list)
    reference: str = ""  # /metrics of a Monitor scraping only the good target

    def row(self, name: str) -> dict[str, Any]:
        return next(r for r in self.status["layers"]["service"]["targets"] if r["name"] == name)


class _Records(logging.Handler):
    """caplog is function-scoped; the module's one run keeps its own log records."""

    def __init__(self, into: list[logging.LogRecord]) -> None:
        super().__init__(logging.DEBUG)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        self.into.append(record)


async def run_cycles(
    monitor: Monitor, clock: Clock, run: Run | None = None, before_last: Callable[[], None] | None = None
) -> str:
    """CYCLES collection cycles STEP seconds apart on the injected clock; returns /metrics."""
    for cycle in range(CYCLES):
        if cycle == CYCLES - 1 and run is not None:
            run.before_text = monitor.metrics_text().decode()
            if before_last is not None:
                before_last()
        started = time.perf_counter()
        # A cycle that ignored its deadline fails the test here instead of hanging it.
        await asyncio.wait_for(monitor.run_once(), TIMEOUT + 10)
        if run is not None:
            run.durations.append(time.perf_counter() - started)
        if cycle < CYCLES - 1:
            clock.now += STEP
    text = monitor.metrics_text().decode()
    if run is not None:
        run.text, run.status = text, monitor.status()
    await monitor.aclose()
    return text


@pytest.fixture(scope="module")
def run() -> Iterator[Run]:
    result = Run()
    handler = _Records(result.records)
    logger = logging.getLogger("monitor")
    logger.addHandler(handler)
    try:
        with PageServer() as server, PageServer() as doomed:
            targets = {"good": server.set("/good", Generated(grown))}
            for case in CASES:
                targets[case.name] = case.serve(server)
            targets["vanish-refused"] = doomed.set("/metrics", Generated(grown))

            def vanish() -> None:
                server.set("/vanish-404", status_page(404))
                doomed.close()

            clock = Clock()
            asyncio.run(run_cycles(Monitor(make_settings(targets), wall=clock), clock, result, vanish))
            alone = {"good": server.set("/good-alone", Generated(grown))}
            clock = Clock()
            result.reference = asyncio.run(run_cycles(Monitor(make_settings(alone), wall=clock), clock))
    finally:
        logger.removeHandler(handler)
    yield result


def values(text: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    return parse(text).samples


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_broken_target_is_down_and_says_why(run: Run, case: Case) -> None:
    text = run.text
    assert f'inference_target_up{{target="{case.name}"}} 0.0' in text.splitlines()
    row = run.row(case.name)
    assert row["up"] is False
    assert row["error"] is not None and case.error in row["error"], row["error"]
    assert row["models"] == []
    if not case.vanishes:
        assert row["last_success"] is None and row["engine"] in (None, "vllm")
    logged = [r.getMessage() for r in run.records
              if r.levelno == logging.WARNING and f"[{case.name}] failed" in r.getMessage()]
    assert logged == [f"collector service[{case.name}] failed: {row['error']}"]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_broken_target_exports_no_derived_series(run: Run, case: Case) -> None:
    allowed = ("inference_target_up{", "inference_target_stale{", "inference_target_refused{", "inference_target_info{",
               "inference_monitor_")
    lines = lines_with_target(run.text, case.name)
    assert [line for line in lines if not line.startswith(allowed)] == []
    assert f'inference_monitor_collector_success{{collector="service",target="{case.name}"}} 0.0' in lines
    if case.vanishes:
        # It was up with numbers before it went away (so their absence now means something).
        before = lines_with_target(run.before_text, case.name)
        assert f'inference_target_up{{target="{case.name}"}} 1.0' in before
        assert any(line.startswith("inference_generation_tokens_per_second{") for line in before)


def test_good_target_numbers_are_those_of_a_run_without_the_broken_ones(run: Run) -> None:
    good = service_lines(run.text, "good")
    assert good == service_lines(run.reference, "good")
    assert 'inference_target_up{target="good"} 1.0' in good
    # The fleet-wide lines (no target label) are in the comparison: broken targets add nothing.
    assert any(line.startswith("inference_requests_per_second{") and 'target="' not in line
               for line in good)
    assert any(line.startswith("inference_ttft_seconds{") for line in good)
    assert run.row("good")["error"] is None


def test_vanished_targets_leave_the_fleet_sums(run: Run) -> None:
    model = ("model", "meta-llama/Llama-3.1-8B-Instruct")
    fleet_key = (model, ("window", "1m"))
    good_key = (model, ("target", "good"), ("window", "1m"))
    before = values(run.before_text)["inference_generation_tokens_per_second"]
    after = values(run.text)["inference_generation_tokens_per_second"]
    # While up, the two vanishing targets (the same growing page) were in the fleet sum ...
    assert before[fleet_key] == pytest.approx(3 * before[good_key], rel=1e-12)
    # ... once gone, only the good target is left in it.
    assert after[fleet_key] == after[good_key]


def test_cycles_with_hung_targets_end_at_the_deadline(run: Run) -> None:
    assert len(run.durations) == CYCLES
    for seconds in run.durations:
        assert TIMEOUT - 0.05 <= seconds <= TIMEOUT + MARGIN, run.durations
    for name in SLOW:
        assert run.row(name)["scrape_duration_seconds"] == pytest.approx(TIMEOUT, abs=MARGIN)


def test_repeated_failure_is_logged_once_per_change(run: Run) -> None:
    # Three cycles of the same failure: one warning, not one per cycle.
    warnings = [r.getMessage() for r in run.records
                if r.levelno == logging.WARNING and "[hang] failed" in r.getMessage()]
    assert len(warnings) == 1


# -- the real app: /healthz and /metrics stay fast while a target hangs ----------------------------


def test_app_answers_fast_while_a_target_hangs() -> None:
    with PageServer() as pages:
        targets = {"good": pages.set("/good", Generated(grown)), "hung": pages.set("/hang", Hang())}
        settings = make_settings(targets, scrape_interval="1s", scrape_timeout="0.8s")
        monitor = Monitor(settings)
        with serve_app(monitor) as base, httpx.Client(base_url=base, timeout=5.0, trust_env=False) as client:
            slowest = 0.0
            polls = 0
            hung_at_start = pages.hits["/hang"]
            ends = time.monotonic() + 3.5
            while time.monotonic() < ends:
                for path in ("/healthz", "/metrics"):
                    started = time.perf_counter()
                    response = client.get(path)
                    slowest = max(slowest, time.perf_counter() - started)
                    assert response.status_code == 200
                polls += 1
                time.sleep(0.05)
            assert slowest < 1.0
            assert pages.hits["/hang"] - hung_at_start >= 3  # the hung target was scraped all along
            # A hit is counted when the scrape arrives, its failure 0.8 s later: let the third one end.
            deadline = time.monotonic() + 5
            while True:
                status = client.get("/api/v1/status").json()
                failures = {c["target"]: c["failures"] for c in status["collectors"]}.get("hung", 0)
                if failures >= 3 or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            metrics = client.get("/metrics").text
            ready = client.get("/readyz")
        rows = {r["name"]: r for r in status["layers"]["service"]["targets"]}
        assert rows["hung"]["up"] is False and rows["hung"]["error"] == "timed out after 0.8s"
        assert rows["good"]["up"] is True
        runs = {c["target"]: c for c in status["collectors"]}
        assert runs["good"]["runs"] >= 3 and runs["good"]["failures"] == 0  # the loop kept going
        assert runs["hung"]["failures"] >= 3
        assert 'inference_target_up{target="hung"} 0.0' in metrics
        assert 'inference_target_up{target="good"} 1.0' in metrics
        assert ready.status_code == 200
        assert polls > 20


def test_an_unexpected_error_marks_the_target_down(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A page that trips a bug in our own code: down, with the reason, its numbers gone."""
    import monitor.service.target as target

    real_extract = target.extract
    calls = {"n": 0}

    def extract_failing_on_the_third_page(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("boom")
        return real_extract(*args, **kwargs)

    monkeypatch.setattr(target, "extract", extract_failing_on_the_third_page)
    with PageServer() as server, caplog.at_level(logging.WARNING, logger="monitor"):
        clock = Clock()
        monitor = Monitor(make_settings({"t": server.set("/metrics", Generated(grown))}), wall=clock)
        result = Run()
        asyncio.run(run_cycles(monitor, clock, result))
    assert 'inference_target_up{target="t"} 1.0' in result.before_text.splitlines()
    assert 'inference_target_up{target="t"} 0.0' in result.text.splitlines()
    (row,) = result.status["layers"]["service"]["targets"]
    assert row["up"] is False and row["error"] == "RuntimeError: boom"
    assert [line for line in lines_with_target(result.text, "t")
            if not line.startswith(("inference_target_up{", "inference_target_stale{", "inference_target_refused{",
                                    "inference_target_info{", "inference_monitor_"))
            ] == []
    assert "collector service[t] failed: RuntimeError: boom" in caplog.messages
