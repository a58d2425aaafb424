"""`infermon quality run`: the daily run on demand, with a progress bar."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:  # the SDKs load only when a run is asked for: `infermon --help` stays fast
    from monitor.config import Settings
    from monitor.quality.run import RunReport

quality_app = typer.Typer(help="The quality layer: LLM-judged samples, refusals, length drift.", no_args_is_help=True)


def run_command(settings: Settings, date: str | None, models: list[str] | None, force: bool,
                rejudge: bool = False) -> int:
    """Runs and prints the outcome; the exit status: 0 done, 1 failed (the run could not start,
    or the judge failed on a model's run: too many judge errors, too few usable verdicts, or it
    disagreed with the known answers: uncalibrated). `rejudge`: the day's stored runs judged again
    by today's judge (QualityRunner.rejudge) instead of a run from the sources."""
    import time

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

    from monitor.quality.layer import build_sources
    from monitor.quality.run import QualityRunError, QualityRunner
    from monitor.quality.sampling import previous_day
    from monitor.quality.store import QualityStore
    from monitor.store.session import Store

    day = date or previous_day(time.time(), settings.quality.timezone)
    console = Console(stderr=True)
    store = Store(settings.storage.url)
    try:
        runner = QualityRunner(settings.quality, QualityStore(store.engine),
                               build_sources(settings.quality, QualityStore(store.engine)))
        with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=console, transient=False) as bar:
            tasks: dict[str, TaskID] = {}

            def progress(model: str, done: int, total: int) -> None:
                if model not in tasks:
                    tasks[model] = bar.add_task(f"judging {model}", total=total)
                bar.update(tasks[model], completed=done)

            work = runner.rejudge(day, models, progress) if rejudge else runner.run(day, models, force, progress)
            report = asyncio.run(work)
    except QualityRunError as exc:
        console.print(f"[red]quality run failed:[/red] {exc}")
        return 1
    finally:
        store.close()
    _print_report(report)
    return 0 if all(o.ok for o in report.outcomes) else 1


def _print_report(report: RunReport) -> None:
    for name, error in report.source_errors.items():
        typer.secho(f"source {name} failed: {error}", err=True, fg=typer.colors.RED)
    if not report.outcomes:
        typer.echo(f"{report.date}: no responses from any source, nothing to judge")
    for o in report.outcomes:
        cost = f"${o.cost_usd:.4f}" if o.priced else "judge unpriced (set quality.judge.usd_per_million_*_tokens)"
        detail = f"{o.sampled} sampled of {o.available}, {o.judge_errors} judge errors, {cost}"
        if o.suspect_verdicts:
            detail += f", {o.suspect_verdicts} suspect verdicts (not scored)"
        if o.status in ("skipped", "empty"):
            detail = o.note
        elif o.note:
            detail += f" ({o.note})"
        typer.echo(f"{report.date} {o.model}: {o.status}: {detail}")
        if o.calibration and o.calibration != o.failed:
            typer.echo(f"{report.date} {o.model}: {o.calibration}")
        if o.judge_changed:
            typer.secho(f"{report.date} {o.model}: {o.judge_changed}: the score is not compared with the baseline "
                        "days (re-judge them with today's judge)", err=True, fg=typer.colors.YELLOW)
        if o.failed:
            typer.secho(f"{report.date} {o.model}: FAILED: {o.failed}: the run has no score", err=True,
                        fg=typer.colors.RED)
    capped = f" ({report.judge_usage_capped} reported absurd usage: capped in the cost)" \
        if report.judge_usage_capped else ""
    typer.echo(f"judge calls: {report.judge_calls}{capped}")


def register(app: typer.Typer, settings_loader: object) -> None:
    """Adds `quality run` to the main CLI; `settings_loader(config)` returns Settings or exits."""

    @quality_app.command("run")
    def run(
        config: Annotated[Path | None, typer.Option("--config", "-c", help="YAML configuration file")] = None,
        date: Annotated[str | None, typer.Option(help="Day to judge, YYYY-MM-DD (default: yesterday)")] = None,
        model: Annotated[list[str] | None, typer.Option(help="Only this model (repeatable)")] = None,
        force: Annotated[bool, typer.Option(help="Judge again even if the run is done (costs again)")] = False,
    ) -> None:
        """Judge one day's sampled responses now (idempotent; resumes an interrupted run)."""
        settings = settings_loader(config)  # type: ignore[operator]
        logging.basicConfig(level="WARNING", format="%(levelname)s %(name)s: %(message)s")
        if date is not None:
            _check_date(date)
        raise typer.Exit(run_command(settings, date, model, force))

    @quality_app.command("rejudge")
    def rejudge(
        date: Annotated[str, typer.Option(help="Past day whose stored runs to judge again, YYYY-MM-DD")],
        config: Annotated[Path | None, typer.Option("--config", "-c", help="YAML configuration file")] = None,
        model: Annotated[list[str] | None, typer.Option(help="Only this model (repeatable)")] = None,
    ) -> None:
        """Judge a past day's stored samples again with today's judge (after the judge changed: like for like).

        Costs one judge call per stored sample and known answer of each run of that day."""
        settings = settings_loader(config)  # type: ignore[operator]
        logging.basicConfig(level="WARNING", format="%(levelname)s %(name)s: %(message)s")
        _check_date(date)
        raise typer.Exit(run_command(settings, date, model, False, rejudge=True))

    app.add_typer(quality_app, name="quality")


def _check_date(date: str) -> None:
    from datetime import date as Date

    try:
        Date.fromisoformat(date)
    except ValueError:
        typer.secho(f"--date: not a date: {date!r} (use YYYY-MM-DD)", err=True, fg=typer.colors.RED)
        raise typer.Exit(2) from None
