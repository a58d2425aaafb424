"""`infermon demo`: the monitor on its embedded default, watching a SIMULATED vLLM server under load.

Everything runs in one event loop: the simulator (a vLLM-compatible API and /metrics page, no
model behind it) on a free loopback port, a load generator, a fault schedule that cycles
through a latency spike, an error burst, a throughput drop and KV-cache pressure, and the
monitor itself on `port`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import tempfile
from collections.abc import Callable, Coroutine, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import uvicorn

from monitor.app import create_app
from monitor.config import Settings
from monitor.history.keeper import first_day
from monitor.history.summary import trend_rows
from monitor.infra.replay import ReplayNvml
from monitor.ports import free_port
from monitor.runtime import Monitor
from monitor.server import listening_socket
from monitor.service.collector import COLLECTOR as SERVICE_COLLECTOR
from monitor.settings_check import load_checked_settings
from monitor.sim.demo_cycle import HeldReplayClock, demo_rules, scheduled_load
from monitor.sim.demo_week import DEMO_WEEK_DAYS, DEMO_WEEK_ENGINES, demo_week
from monitor.sim.engine import DEFAULT_MODEL, SimulatedEngine
from monitor.sim.faults import demo_schedule
from monitor.sim.load import LoadConfig, run_load
from monitor.sim.profile import EngineConfig
from monitor.sim.quality_feed import feed_request_log, serve_judge, simulated_history
from monitor.sim.server import InLoopServer, serve
from monitor.sim.webhook_sink import serve_sink

log = logging.getLogger("monitor.demo")

DEMO_RPS = 6.0
DEMO_TRACE = Path(__file__).parent / "data" / "nvml_h200_trace.json"


DEMO_STATE = Path("infermon-demo.db")  # kept between demos only with --keep-state


def demo_settings(sim_url: str, port: int, extra: dict[str, Any] | None = None,
                  state: Path = DEMO_STATE, rules: Sequence[Path] | None = None) -> Settings:
    """Short intervals so every number shows within a minute; otherwise the defaults. `state` is
    the SQLite file of alerts, runs and history; `rules` the rule files (the demo's, written to a
    temporary folder, by default)."""
    if rules is None:
        rules = demo_rules(Path(tempfile.mkdtemp(prefix="infermon-demo-rules-")))
    sections: dict[str, Any] = {
        "server": {"host": "127.0.0.1", "port": port},
        "service": {
            "scrape_interval": "5s",
            "windows": ["1m", "5m"],
            "baseline_window": "10m",
            "targets": [{"name": "vllm-sim", "url": f"{sim_url}/metrics", "node": "demo-h200", "gpus": [0]}],
            "engine_version": True,  # the simulator answers GET /version as vLLM does
        },
        "storage": {"url": f"sqlite:///{state}"},
        # No GPU needed: a real H200 recording (idle, burn, memory fill, 30 % duty) plays in a loop.
        "infra": {"interval": "5s", "replay": {"file": str(DEMO_TRACE)}, "node": "demo-h200"},
        # The canary: a synthetic user streaming through the simulator's OpenAI API, next to its own numbers.
        "canary": {"probes": [{"name": "demo-chat", "base_url": f"{sim_url}/v1", "model": DEFAULT_MODEL,
                               "interval": "15s", "timeout": "10s", "target": "vllm-sim",
                               "expect": "simulated"}]},
        # Every GPU at its default price (monitor.cost.prices). Two fleets the monitor cannot see:
        # Ascend GPUs, whose default is in CNY (hence the exchange rate), and a workstation's 4090.
        "cost": {
            "daily_budget_usd": 50,
            "cny_per_usd": 7.1,
            "static_gpus": [{"model": "Ascend 910C", "count": 8, "node": "rack-cn"},
                            {"model": "NVIDIA GeForce RTX 4090", "count": 1, "node": "workstation"}],
        },
        # The fault cycle shows each probable cause once (monitor.sim.faults.demo_schedule): rules
        # on the 1m window with short `for`, and the recording's 93 % memory fill counted as full.
        "alerting": {"rules_files": [str(p) for p in rules],
                     "causes": {"gpu_memory_ratio": 0.9}},
    }
    for section, values in (extra or {}).items():
        sections.setdefault(section, {}).update(values)
    return load_checked_settings(None, sections)


async def run_demo(port: int = 9480, duration: float | None = None, keep_state: bool = False) -> None:
    """A fresh state each time (a temporary database: no alerts or runs of an earlier demo come
    back) unless `keep_state`, which keeps ./infermon-demo.db across demos. The monitor's port is
    bound first: one in use is `CannotListen`, before any of the demo's servers starts."""
    with listening_socket("127.0.0.1", port, "demo", f"run it on another with --port (infermon demo --port "
                          f"{port + 1 if port else 9481})") as listener, \
            tempfile.TemporaryDirectory(prefix="infermon-demo-") as scratch:
        state = DEMO_STATE if keep_state else Path(scratch) / "demo.db"
        await _run_demo(listener, duration, state)


async def _run_demo(listener: socket.socket, duration: float | None, state: Path) -> None:
    # Ctrl-C and SIGTERM (`docker stop`, a supervisor) cancel this task: the demo shuts down in
    # order. Installed here, not left to asyncio.run: a process started in the background by a
    # shell inherits SIGINT ignored, and asyncio.run then leaves it so.
    main = asyncio.current_task()
    if main is not None:
        for stop in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):  # not off the main thread
                asyncio.get_running_loop().add_signal_handler(stop, main.cancel)
    port = int(listener.getsockname()[1])
    sim = SimulatedEngine(EngineConfig(max_num_seqs=DEMO_MAX_NUM_SEQS), faults=demo_schedule())
    sim_port = free_port()
    sim_url = f"http://127.0.0.1:{sim_port}"
    tasks: list[asyncio.Task[Any]] = []
    judge_port, sink_port = free_port(), free_port()
    try:
        await _helper(tasks, "simulator", lambda started: serve(sim, port=sim_port, started=started))
        await _helper(tasks, "judge-simulator", lambda started: serve_judge(judge_port, started))
        await _helper(tasks, "webhook-sink", lambda started: serve_sink(sink_port, started))
    except BaseException:
        await _stop(None, tasks)
        raise
    settings = demo_settings(sim_url, port, extra={"quality": demo_quality(judge_port),
                                                   "alerting": demo_alerting(sink_port)}, state=state)
    monitor = Monitor(settings)
    seed_decay_week(monitor)
    gpu_follows_the_cycle(monitor, sim)
    server = InLoopServer(uvicorn.Config(create_app(monitor), host="127.0.0.1", port=port, log_level="warning",
                                         log_config=None, access_log=False, timeout_graceful_shutdown=5))
    tasks.append(asyncio.create_task(server.serve(sockets=[listener]), name="monitor"))
    tasks.append(asyncio.create_task(quality_scenario(monitor, sim, sim_url, server, port), name="quality"))
    load = LoadConfig(rps=DEMO_RPS, duration_s=duration if duration is not None else 7 * 86400.0,
                      max_tokens=(32, 256), drain_timeout_s=5.0)
    tasks.append(asyncio.create_task(scheduled_load(sim_url, sim, load), name="load"))
    tasks.append(asyncio.create_task(_long_prompt_bursts(sim_url), name="long-prompts"))
    try:
        await _first_scrape(monitor, server)
        _banner(port, sim_url, sink_port, duration)
        if duration is None:
            await asyncio.gather(*tasks)
        else:
            await asyncio.sleep(duration)
    finally:
        await _stop(server, tasks)


async def _helper(tasks: list[asyncio.Task[Any]], name: str,
                  serving: Callable[[asyncio.Event], Coroutine[Any, Any, None]]) -> None:
    """Starts one of the demo's servers; returns once it accepts connections, raises if it ends
    before that (a server that failed to start must not leave the demo waiting for it)."""
    started = asyncio.Event()
    task = asyncio.create_task(serving(started), name=name)
    tasks.append(task)
    waiting = asyncio.create_task(started.wait())
    try:
        await asyncio.wait({task, waiting}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiting.cancel()
    if not started.is_set():
        failure = task.exception() if task.done() and not task.cancelled() else None
        raise RuntimeError(f"demo: the {name} did not start: {failure!r}") from failure


STOP_TIMEOUT_S = 15.0


async def _stop(server: uvicorn.Server | None, tasks: list[asyncio.Task[Any]]) -> None:
    """All at once, bounded: the monitor shuts down gracefully (its store flushed), the rest is
    cancelled. Waited for together, not one by one: a Ctrl-C ends the demo in seconds."""
    if server is not None:
        server.should_exit = True
    if not tasks:
        return
    for task in tasks:
        if task.get_name() != "monitor":
            task.cancel()
    _, pending = await asyncio.wait(tasks, timeout=STOP_TIMEOUT_S)
    for task in pending:
        log.warning("demo: %s did not stop within %.0f s; cancelled", task.get_name(), STOP_TIMEOUT_S)
        task.cancel()
    for task in tasks:
        if task.done() and not task.cancelled() and task.exception() is not None:
            log.warning("demo: %s ended with %r", task.get_name(), task.exception())


FIRST_SCRAPE_TIMEOUT_S = 30.0


async def _first_scrape(monitor: Monitor, server: uvicorn.Server) -> None:
    """The banner once every target was scraped: before that a target is neither up nor down,
    and the demo does not tell a new user that its engine is DOWN."""
    names = [t.name for t in monitor.settings.service.targets]
    print(f"inference-monitor demo: waiting for the first scrape of {', '.join(names)} …", flush=True)
    deadline = asyncio.get_running_loop().time() + FIRST_SCRAPE_TIMEOUT_S
    while asyncio.get_running_loop().time() < deadline:
        entries = [monitor.health.entries.get((SERVICE_COLLECTOR, name)) for name in names]
        if server.started and all(e is not None and e.success is not None for e in entries):
            return
        await asyncio.sleep(0.1)
    log.warning("demo: no scrape finished within %.0f s; the overview says what happened", FIRST_SCRAPE_TIMEOUT_S)


def seed_decay_week(monitor: Monitor, now: float | None = None) -> int:
    """The demo's compressed weeks (monitor.sim.demo_week) into its store and its history in memory,
    before the first evaluation: the trend rules read them at once (TTFTP99Creep on the simulated
    engine, with its cause). A kept state (--keep-state) that has a history of its own keeps it.
    Returns the day rows written."""
    history = monitor.trend_history
    if history is None:
        return 0
    now = monitor.wall() if now is None else now
    if monitor.history_tables.read(first_day(now, DEMO_WEEK_DAYS), {"inference_ttft_seconds"}):
        return 0
    days = demo_week(DEMO_WEEK_ENGINES, now)
    monitor.history_tables.write(days)
    history.load(days, now)
    if monitor.alerting is not None:
        monitor.alerting.trends = trend_rows(history, now)
    return len(days)


DEMO_MAX_NUM_SEQS = 48  # room for the demo's load (~18 running, ~30 in a latency spike), not for 6x slower decoding


def gpu_follows_the_cycle(monitor: Monitor, sim: SimulatedEngine) -> None:
    """The replayed H200 is held where the fault cycle says (busy, memory full, idle)."""
    backend = monitor.infra.local.backend if monitor.infra.local is not None else None
    replay = getattr(backend, "nvml", None)
    if isinstance(replay, ReplayNvml):
        replay.clock = HeldReplayClock(sim, replay.trace.period)


async def _long_prompt_bursts(sim_url: str) -> None:
    """Every 10 minutes from minute 12 (the baseline has filled), 3 minutes of very long prompts:
    inference_cost_expensive_request_ratio{tokens="prompt"} rises while they last."""
    await asyncio.sleep(12 * 60)
    while True:
        burst = LoadConfig(rps=1.5, duration_s=180.0, prompt_words=(2000, 4000), max_tokens=(32, 64),
                           drain_timeout_s=5.0, seed=None)
        await run_load(sim_url, burst)
        await asyncio.sleep(7 * 60)


def demo_alerting(sink_port: int) -> dict[str, Any]:
    """Alerts go to a webhook sink the demo runs itself: each delivered alert is one log line."""
    return {"receivers": [{"name": "demo-webhook", "type": "webhook", "url": f"http://127.0.0.1:{sink_port}/hook",
                           "group_wait": "5s", "group_interval": "30s"}]}


FIRST_FAULT_S = 180.0  # monitor.sim.faults.demo_schedule: the first fault starts at minute 3


def _banner(port: int, sim_url: str, sink_port: int, duration: float | None) -> None:
    print(f"""
inference-monitor demo (the engine is a SIMULATOR of a vLLM server, driven at {DEMO_RPS:g} req/s)
  overview  http://127.0.0.1:{port}/      (or `infermon status --url http://127.0.0.1:{port}`)
  metrics   http://127.0.0.1:{port}/metrics
  status    http://127.0.0.1:{port}/api/v1/status
  simulator {sim_url}/metrics   (OpenAI API at {sim_url}/v1)
  GPU       a replayed NVML recording of a real H200 (inference_gpu_*)
  quality   a SIMULATED judge scores the simulator's answers (request log); within the first
            minute: inference_quality_* and http://127.0.0.1:{port}/reports/quality/<today>
  canary    one streamed chat every 15 s through the simulator's API (inference_canary_*)
  cost      http://127.0.0.1:{port}/api/v1/cost   (default prices: H200 $3.5/h, static Ascend + RTX 4090 fleets)
  trends    three weeks of history seeded in its store: vllm-sim's P99 latency has crept ~4 %/day for
            6 days (TTFTP99Creep, TPOTP99Creep at the first evaluation, cause trend_cache); vllm-steady
            (history only, not scraped) follows the day and the week: the overview's "week over week"
  alerts    delivered to the demo's webhook sink on http://127.0.0.1:{sink_port}/hook; what it got:
            http://127.0.0.1:{sink_port}/ (and the overview's notifications list)
Numbers appear within ~15 s; a 30-minute fault cycle shows each probable cause of an alert once
(from minute 3, every 3 minutes). Ctrl-C stops.
""" + _short_run_note(duration), flush=True)


def _short_run_note(duration: float | None) -> str:
    if duration is None or duration >= FIRST_FAULT_S + 60:
        return ""
    return (f"This run stops after {duration:g} s, before the first fault (minute 3) has raised an alert: it shows\n"
            "the four layers' numbers and the pending infra alerts only. --duration 600 shows the first causes.\n")


DEMO_SAMPLES = 100
DEMO_HISTORY_SEED = 13
DEMO_HISTORY_PER_DAY = 30  # a week of 30 a day: enough for the baseline, few judge calls at start-up


def demo_quality(judge_port: int) -> dict[str, Any]:
    """The quality layer against the judge simulator: 100 samples a day, a week of baseline."""
    return {
        "sample_size": DEMO_SAMPLES, "refresh_interval": "5s",
        "judge": {"base_url": f"http://127.0.0.1:{judge_port}/v1", "model": "judge-simulator", "concurrency": 16,
                  "api_key_env": "INFERMON_DEMO_JUDGE_KEY"},
    }


async def quality_scenario(monitor: Monitor, sim: SimulatedEngine, sim_url: str, server: uvicorn.Server,
                           port: int) -> None:
    """History for the baseline, today's answers through the request log, then today's run."""
    from monitor.quality.sampling import today

    quality = monitor.quality
    zone = quality.settings.timezone
    day = today(monitor.wall(), zone)
    baseline = quality.settings.baseline_days
    # Seed 13: each history day's 30 answers, as the judge simulator scores them (a hash of the text), stay
    # above QualityScoreLow's 3.5 and under QualityHallucinationHigh's 5 % (seed 11 gave the last day 3.4
    # and 6.7 %: two quality alerts at start that a healthy run of today did not resolve).
    quality.store.add_samples(simulated_history(sim.model_name, day, baseline, DEMO_HISTORY_PER_DAY, zone,
                                                seed=DEMO_HISTORY_SEED))

    async def judge_history() -> None:
        for back in range(baseline, 0, -1):
            await quality.runner().run((datetime.fromisoformat(day) - timedelta(days=back)).date().isoformat())

    while not server.started:
        await asyncio.sleep(0.1)
    # The simulator takes its time to decode; the history is judged meanwhile.
    stored, _ = await asyncio.gather(feed_request_log(sim_url, f"http://127.0.0.1:{port}", DEMO_SAMPLES),
                                     judge_history())
    log.info("quality demo: %d simulator answers in the request log; judging them", stored)
    await quality.run(day, force=True)
    log.info("quality demo: run done, see http://127.0.0.1:%d/reports/quality/%s", port, day)
