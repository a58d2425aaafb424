"""`infermon`: serve | demo | check | rules recording."""

from __future__ import annotations

import asyncio
import logging
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
import uvicorn
from sqlalchemy.exc import SQLAlchemyError

from monitor.config import ConfigError, Settings
from monitor.redaction import redact_logs
from monitor.settings_check import load_checked_settings

if TYPE_CHECKING:
    from monitor.runtime import Monitor
    from monitor.service.collector import TargetStatus

# Plain (click) help: typer's rich panels print `<bool>` beside every flag and keep docstring line breaks.
app = typer.Typer(help="Monitoring for LLM inference clusters: GPUs, engines, quality, cost.",
                  no_args_is_help=True, add_completion=False, rich_markup_mode=None)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"infermon {version('inference-monitor')}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit")] = False,
) -> None:
    """Monitoring for LLM inference clusters: GPUs, engines, quality, cost."""

ConfigOption = Annotated[Path | None, typer.Option("--config", "-c", help="YAML configuration file")]


def _settings(config: Path | None, **server: object) -> Settings:
    overrides = {"server": {k: v for k, v in server.items() if v is not None}}
    try:
        return load_checked_settings(config, overrides)
    except ConfigError as exc:
        typer.secho(f"configuration error:\n{exc}", err=True, fg=typer.colors.RED)
        raise typer.Exit(2) from None


def _logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    redact_logs()  # no URL leaves in a log line with its password or token
    # httpx logs every request at INFO: one line per target per scrape would drown ours.
    logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.getLogger().level))
    logging.getLogger("httpx2").setLevel(max(logging.WARNING, logging.getLogger().level))  # the openai SDK's
    # APScheduler logs two INFO lines per job run: the canary's dispatcher ticks every second.
    logging.getLogger("apscheduler.executors").setLevel(max(logging.WARNING, logging.getLogger().level))
    # ... and one per job added at start-up: the monitor logs state changes, not its own plumbing.
    logging.getLogger("apscheduler.scheduler").setLevel(max(logging.WARNING, logging.getLogger().level))


@app.command()
def serve(
    config: ConfigOption = None,
    host: Annotated[str | None, typer.Option(help="Listen address (default 0.0.0.0)")] = None,
    port: Annotated[int | None, typer.Option(help="Listen port (default 9480)")] = None,
) -> None:
    """Run the monitor: collect, export /metrics, serve the API."""
    from monitor.server import CannotListen, listening_socket

    settings = _settings(config, host=host, port=port)
    _logging(settings.server.log_level)
    try:  # before the monitor starts anything: a port in use is one line, naming the key
        listener = listening_socket(settings.server.host, settings.server.port, "server.port",
                                    "choose another with --port, server.port or INFERMON_SERVER__PORT")
    except CannotListen as exc:
        typer.secho(str(exc), err=True, fg=typer.colors.RED)
        raise typer.Exit(1) from None
    with listener:  # closed however this ends (a monitor that cannot start, or the server's end)
        _serve_on(listener, settings, config)


def _serve_on(listener: socket.socket, settings: Settings, config: Path | None) -> None:
    from monitor.app import create_app
    from monitor.runtime import Monitor
    try:
        monitor = Monitor(settings, config_path=config)
    except ConfigError as exc:  # an alert rule file that cannot be loaded
        typer.secho(f"configuration error:\n{exc}", err=True, fg=typer.colors.RED)
        raise typer.Exit(2) from None
    except SQLAlchemyError as exc:  # storage.url unreachable, or its schema cannot be migrated
        from monitor.store.dbcli import describe_error

        typer.secho(f"database error: {describe_error(settings.storage.url, exc)}", err=True, fg=typer.colors.RED)
        raise typer.Exit(1) from None
    from monitor.logfilter import install
    from monitor.server import uvicorn_config

    server_config = uvicorn_config(create_app(monitor), settings.server)  # configures uvicorn's loggers
    install(settings.server.log_repeat_window.seconds)
    uvicorn.Server(server_config).run(sockets=[listener])


@app.command()
def demo(
    port: Annotated[int, typer.Option(help="Port of the monitor")] = 9480,
    duration: Annotated[float | None, typer.Option(help="Stop after this many seconds")] = None,
    keep_state: Annotated[bool, typer.Option(help="Keep alerts, runs and history in ./infermon-demo.db "
                                                  "for the next demo (default: a fresh state each time)")] = False,
) -> None:
    """The monitor on a simulated vLLM server under load.

    No GPU and nothing else to install: a simulator, a replayed H200, a simulated judge and a
    webhook sink, all on loopback ports. A run shorter than 4 minutes ends before the first fault."""
    from monitor.demo import run_demo
    from monitor.server import CannotListen

    _logging("info")
    try:
        asyncio.run(run_demo(port=port, duration=duration, keep_state=keep_state))
    except CannotListen as exc:  # before any of the demo's servers started: nothing left running
        typer.secho(str(exc), err=True, fg=typer.colors.RED)
        raise typer.Exit(1) from None
    except (KeyboardInterrupt, asyncio.CancelledError):  # Ctrl-C, SIGTERM: stopped in order
        typer.echo("inference-monitor demo: stopped")
        raise typer.Exit(130) from None


@app.command()
def check(config: ConfigOption = None) -> None:
    """Validate the configuration; try every source once.

    Scrapes every service target and dcgm-exporter and runs every canary probe once; exit 1 when
    one of them fails, 2 when the configuration is wrong. Writes no database file."""
    settings = _settings(config)
    typer.echo(f"configuration OK: {len(settings.service.targets)} service target(s)")
    if settings.alerting.enabled:
        _check_rules(settings)
    store_up = settings.storage.url.startswith("sqlite:") or _check_store(settings.storage.url)
    # The sources are probed over a store in memory: a check leaves no database file behind and
    # migrates nothing (a PostgreSQL store is only read, above).
    settings = settings.model_copy(update={"storage": settings.storage.model_copy(update={"url": "sqlite://"})})
    notes = _CollectedLog()
    logging.getLogger().addHandler(notes)
    logging.getLogger().setLevel(logging.WARNING)
    try:
        all_up = asyncio.run(_probe_once(settings)) and store_up
    except ConfigError as exc:  # what only assembling the monitor finds (a rule file that cannot be loaded)
        typer.secho(f"configuration error:\n{exc}", err=True, fg=typer.colors.RED)
        raise typer.Exit(2) from None
    finally:
        logging.getLogger().removeHandler(notes)
    for line in notes.lines():
        typer.echo(f"  note: {line}")
    if not all_up:
        raise typer.Exit(1)


def _check_store(url: str) -> bool:
    """Connect to a server store once and read its schema revision; says so in a line like a target's."""
    from sqlalchemy import create_engine

    from monitor.store.dbcli import describe_error
    from monitor.store.migrate import current, head

    engine = create_engine(url, connect_args={"connect_timeout": 10})
    try:
        revision = current(engine)
    except SQLAlchemyError as exc:  # refused, unknown host, authentication failed: a source that is down
        typer.echo(f"  {'store':<20} DOWN: {describe_error(url, exc)}")
        return False
    finally:
        engine.dispose()
    at = "at head" if revision == head() else f"at {revision or 'empty'}; start-up migrates it to {head()}"
    typer.echo(f"  {'store':<20} up, schema {at}")
    return True


class _CollectedLog(logging.Handler):
    """The collectors' warnings during a check, kept for the report (not interleaved log lines)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message not in self.messages:
            self.messages.append(message)

    def lines(self) -> list[str]:
        return self.messages


async def _probe_once(settings: Settings) -> bool:
    from monitor.canary.outcome import describe_probe
    from monitor.redaction import safe_url
    from monitor.runtime import Monitor

    monitor = Monitor(settings)
    try:
        await monitor.run_once()
        canaries = await monitor.canary.probe_all()
    finally:
        await monitor.aclose()
    all_up = True
    for row in monitor.service.status():
        all_up = all_up and row["state"] == "up"
        typer.echo(f"  {row['name']:<20} {row['url']}  {_target_line(row)}")
        if row["state"] == "up" and row["note"]:
            typer.echo(f"  {'':<20} {row['note']}")
    for exporter in monitor.infra.dcgm:
        up = exporter.error is None and exporter.last_scrape is not None
        state = f"up, {len(exporter.known)} GPU(s)" if up else f"DOWN: {exporter.error}"
        all_up = all_up and up
        typer.echo(f"  dcgm {exporter.target.name:<15} {safe_url(exporter.target.url)}  {state}")
    for name, result in canaries.items():
        ok = result is not None and result.ok
        all_up = all_up and ok
        typer.echo(f"  canary {name:<13} {describe_probe(result)}")
    _report_cost(monitor)
    return all_up


def _report_cost(monitor: Monitor) -> None:
    """Spend, unpriced GPUs and the targets without GPUs (no spend or $/token of their own)."""
    view = monitor.cost.view
    if not view.present:
        return
    numbers = view.numbers
    typer.echo(f"  cost: {len(numbers.gpus)} GPU(s), ${numbers.usd_per_hour:.2f}/h"
               + (f", {len(numbers.unpriced)} without a price (cost.gpu_prices)" if numbers.unpriced else ""))
    if view.unmapped:
        typer.echo(f"  cost: not mapped to GPUs: {', '.join(view.unmapped)}: no spend or $/1M tokens of their own "
                   "(the fleet's $/1M tokens counts them); set node, gpus or pod on them in service.targets")


@app.command()
def status(
    url: Annotated[str, typer.Option(help="The running monitor")] = "http://127.0.0.1:9480",
) -> None:
    """The overview of a running monitor, in the terminal.

    Exit 0 when every layer is fine, 1 when something is down or firing, 2 when the monitor
    cannot be asked."""
    from rich.console import Console

    from monitor.web.terminal import StatusError, exit_code, fetch_overview, print_overview

    try:
        overview = fetch_overview(url)
    except StatusError as exc:
        typer.secho(f"cannot read the monitor's status: {exc}", err=True, fg=typer.colors.RED)
        raise typer.Exit(2) from None
    print_overview(Console(), overview, url)
    raise typer.Exit(exit_code(overview))


def _target_line(row: TargetStatus) -> str:
    if row["state"] == "up":
        return f"up, {row['engine']} {row['generation']}"
    if row["state"] == "unrecognized":
        return f"engine not recognised: {row['error']}"  # "reachable, 17 families, none of ..."
    return f"DOWN: {row['error']}"


def _check_rules(settings: Settings) -> None:
    """Load the alert rule files as `serve` would; a broken file fails the check (exit 2)."""
    from monitor.rulefiles.rules import RulesError, load_rules

    try:
        ruleset = load_rules(settings.alerting.rules_files)
    except RulesError as exc:
        typer.secho(f"alert rules error:\n{exc}", err=True, fg=typer.colors.RED)
        raise typer.Exit(2) from None
    typer.echo(f"alert rules OK: {len(ruleset.rules)} rule(s) from {len(ruleset.files)} file(s)")
    for left in ruleset.left_to_prometheus:
        typer.echo(f"  left to Prometheus: {left.rule} ({left.file}, group {left.group}): {left.reason}")


from monitor.quality.cli import register as _register_quality  # noqa: E402  (after _settings)

_register_quality(app, _settings)

from monitor.loadtest.cli import register as _register_bench  # noqa: E402  (after _settings)

_register_bench(app, _settings)


rules = typer.Typer(help="Prometheus rule files generated from the engine tables.", no_args_is_help=True)
app.add_typer(rules, name="rules")


@rules.command("recording")
def rules_recording(
    config: ConfigOption = None,
    windows: Annotated[str | None, typer.Option(help="Comma-separated windows (default: service.windows)")] = None,
) -> None:
    """Print recording rules that compute the service series inside Prometheus (fleet scale)."""
    from monitor.config import Duration
    from monitor.service.recording import rule_file_text

    settings = _settings(config)
    service = settings.service
    try:
        chosen = [Duration(w).text for w in windows.split(",")] if windows else [w.text for w in service.windows]
    except ValueError as exc:
        typer.secho(f"--windows: {exc}", err=True, fg=typer.colors.RED)
        raise typer.Exit(2) from None
    objectives = {"ttft": service.slo.ttft.seconds, "tpot": service.slo.tpot.seconds}
    text = rule_file_text(chosen, service.baseline_window.text, objectives, service.baseline_min_coverage)
    typer.echo(text, nl=False)


db = typer.Typer(help="The history database (SQLite or PostgreSQL).", no_args_is_help=True)
app.add_typer(db, name="db")


@db.command("upgrade")
def db_upgrade(config: ConfigOption = None) -> None:
    """Migrate the database of storage.url to the newest schema (serve also does this at start)."""
    from monitor.store.dbcli import upgrade_command

    raise typer.Exit(upgrade_command(_settings(config).storage.url))


history = typer.Typer(help="The long-horizon history the trend rules read (alerts/trend.yml).", no_args_is_help=True)
app.add_typer(history, name="history")


@history.command("import")
def history_import(
    prometheus: Annotated[str, typer.Option("--prometheus", help="Base URL of a Prometheus that scraped the monitor")],
    config: ConfigOption = None,
    days: Annotated[float, typer.Option(help="How many days back to import", min=0.1)] = 21.0,
    drop_label: Annotated[list[str] | None, typer.Option(
        "--drop-label", help="Labels the scrape added, removed from each series (default: job, instance)")] = None,
    concurrency: Annotated[int, typer.Option(help="Range queries in flight at once", min=1, max=32)] = 4,
) -> None:
    """Seed the history from Prometheus: the series the trend rules and history.series name, as
    5-minute means, into storage.url (a point the monitor stored itself wins)."""
    import time

    import httpx

    from monitor.history.importer import SCRAPE_LABELS, HistoryImportError, import_prometheus
    from monitor.history.keeper import wanted_of
    from monitor.history.store import HistoryTables
    from monitor.runtime import load_ruleset
    from monitor.store.session import Store

    settings = _settings(config)
    try:
        wanted = wanted_of(load_ruleset(settings), settings.history.series)
    except ConfigError as exc:
        typer.secho(f"configuration error:\n{exc}", err=True, fg=typer.colors.RED)
        raise typer.Exit(2) from None
    store = Store(settings.storage.url)
    end = time.time()
    try:
        with httpx.Client(base_url=prometheus, timeout=60, trust_env=False) as client:
            done = import_prometheus(client, wanted, end - days * 86400, end, HistoryTables(store.engine),
                                     progress=lambda line: typer.echo(f"  {line}", err=True),
                                     drop=SCRAPE_LABELS if drop_label is None else drop_label,
                                     concurrency=concurrency)
    except HistoryImportError as exc:
        typer.secho(f"history import failed: {exc}", err=True, fg=typer.colors.RED)
        raise typer.Exit(1) from None
    finally:
        store.close()
    typer.echo(f"imported {done.series} series, {done.points} points over {done.days} days in {done.seconds:.1f} s")
    if done.series == 0:
        typer.secho("nothing matched: has this Prometheus scraped the monitor's /metrics?", err=True,
                    fg=typer.colors.YELLOW)
        raise typer.Exit(1)



@app.command()
def digest(
    config: ConfigOption = None,
    week: Annotated[bool, typer.Option("--week", help="The last 7 days against the 7 before (the only period)")] = True,
    as_json: Annotated[bool, typer.Option("--json", help="The numbers as JSON instead of text")] = False,
) -> None:
    """What is slowly getting worse: each model's P99 TTFT, TPOT and E2E, error ratio, $/1M tokens and
    judge score this week against last week, 30-day sparklines and the trend alerts of the week, from
    the history in storage.url."""
    import json
    import time

    from monitor.alerting.digest import weekly_digest
    from monitor.history.digest import as_json as digest_json
    from monitor.store.session import Store
    from monitor.web.digest import digest_text

    settings = _settings(config)
    store = Store(settings.storage.url)
    try:
        found = weekly_digest(store.engine, time.time())
    finally:
        store.close()
    typer.echo(json.dumps(digest_json(found), indent=2) + "\n" if as_json else digest_text(found), nl=False)

if __name__ == "__main__":
    app()
