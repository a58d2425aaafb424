"""`infermon bench run | compare | report`."""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from monitor.config import Duration, Settings

if TYPE_CHECKING:  # rich is imported by the commands, not by `infermon` starting
    from rich.progress import TaskID

bench_app = typer.Typer(help="Benchmark an OpenAI-compatible endpoint with its conditions recorded.",
                        no_args_is_help=True)


def _fail(message: str, code: int = 2) -> typer.Exit:
    typer.secho(message, err=True, fg=typer.colors.RED)
    return typer.Exit(code)


def register(app: typer.Typer, settings_loader: Callable[..., Settings]) -> None:
    """Adds `bench` to the main CLI; `settings_loader(config)` returns Settings or exits."""

    @bench_app.command("run")
    def run(
        target: Annotated[str, typer.Option(help="The server's base URL, e.g. http://127.0.0.1:8000")],
        model: Annotated[str, typer.Option(help="Model name to request")],
        scenario: Annotated[str, typer.Option(help="chat | batch | mixed | a scenario file (YAML/JSON)")] = "chat",
        dataset: Annotated[Path | None, typer.Option(help="ShareGPT JSON or JSONL prompt file")] = None,
        synthetic: Annotated[bool, typer.Option(help="Generate prompts (the result says 'synthetic data')")] = False,
        concurrency: Annotated[str | None, typer.Option(help="Closed-loop levels, e.g. 1,8,32")] = None,
        rate: Annotated[str | None, typer.Option(help="Poisson arrival rates in req/s, e.g. 10,20")] = None,
        duration: Annotated[str, typer.Option(help="Measured time per level and repeat")] = "5m",
        repeats: Annotated[int, typer.Option(min=1, help="Runs of every level")] = 3,
        warmup: Annotated[int, typer.Option(min=0, help="Requests sent first and not counted")] = 100,
        seed: Annotated[int, typer.Option(help="Seed of the request draw (same seed: same prompts)")] = 0,
        output: Annotated[Path, typer.Option("--output", "-o", help="Result JSON")] = Path("bench-result.json"),
        precision: Annotated[str | None, typer.Option(help="What the engine runs: fp16, fp8, int4, ...")] = None,
        note: Annotated[str | None, typer.Option(help="Optimizations, e.g. 'chunked prefill 256'")] = None,
        goodput_ttft: Annotated[str, typer.Option(help="Goodput's TTFT objective")] = "200ms",
        goodput_tpot: Annotated[str, typer.Option(help="Goodput's TPOT objective")] = "50ms",
        gpu: Annotated[str, typer.Option(help="auto (local NVML) | none")] = "auto",
        dcgm_url: Annotated[str | None, typer.Option(help="Read the GPUs from this dcgm-exporter page")] = None,
        gpu_replay: Annotated[Path | None, typer.Option(help="Play a recorded NVML trace as the GPU")] = None,
        gpu_price: Annotated[float | None, typer.Option(help="USD per GPU-hour (else the price book's)")] = None,
        api_key_env: Annotated[str | None, typer.Option(help="Environment variable holding the API key")] = None,
        ignore_eos: Annotated[bool, typer.Option(help="Ask the engine (vLLM) to generate max_tokens exactly")] = False,
        tokenize: Annotated[bool, typer.Option(
            help="Count 100 requests' input tokens with the engine's tokenizer first (vLLM, llama-server)")] = True,
        timeout: Annotated[str, typer.Option(help="One request's whole deadline, connect to last token")] = "10m",
        client: Annotated[str, typer.Option(
            help="The load's HTTP client: stream (the bench's own, lightest on CPU) | openai (the SDK, as the canary)",
        )] = "stream",
        max_response: Annotated[str | None, typer.Option(
            help="Largest answer kept per request, e.g. 16MiB; past it the request fails as too_large "
                 "(default: 4 MiB or 2 KiB per max_tokens, whichever is more)")] = None,
        probe_timeout: Annotated[str, typer.Option(
            help="Deadline of each conditions probe and page read (/version, /v1/models, /metrics)")] = "5s",
        config: Annotated[Path | None, typer.Option("--config", "-c", help="YAML configuration (prices)")] = None,
        max_failed: Annotated[str, typer.Option(
            help="A window with more failed requests than this share fails the run (exit 1)")] = "5%",
        target_b: Annotated[str | None, typer.Option(
            help="A second server, run alternately with --target in this session (A/B); compared at the end")] = None,
        model_b: Annotated[str | None, typer.Option(help="The model of --target-b (default: --model)")] = None,
        output_b: Annotated[Path, typer.Option(help="Result JSON of --target-b")] = Path("bench-result-b.json"),
        threshold: Annotated[str, typer.Option(help="With --target-b: smallest change that counts, e.g. 5%")] = "5%",
        capacity: Annotated[str | None, typer.Option(
            help="Search the highest concurrency between LOW:HIGH whose goodput holds the objectives, "
                 "e.g. 1:128 (one window a level; stops on over-saturation)")] = None,
        capacity_share: Annotated[str, typer.Option(
            help="With --capacity: share of requests that must meet TTFT and TPOT for a level to hold")] = "90%",
    ) -> None:
        """Load the endpoint at each level, measure, record the conditions, write one JSON result."""
        from monitor.loadtest.load import CLIENTS
        from monitor.loadtest.run import BenchConfig

        if client not in CLIENTS:
            raise typer.BadParameter(f"one of {', '.join(CLIENTS)}, not {client!r}", param_hint="--client")
        settings = settings_loader(config)
        bench = BenchConfig(
            target=target, model=model, scenario=_scenario(scenario), dataset=_dataset(dataset, synthetic, scenario),
            levels=_levels(concurrency, rate, scenario), duration_s=_seconds("--duration", duration), repeats=repeats,
            warmup=warmup, seed=seed, goodput=_goodput(goodput_ttft, goodput_tpot),
            timeout_s=_seconds("--timeout", timeout), max_response_bytes=_size("--max-response", max_response),
            probe_timeout_s=_seconds("--probe-timeout", probe_timeout),
            api_key=os.environ.get(api_key_env) if api_key_env else None,
            extra_body={"ignore_eos": True} if ignore_eos else {}, precision=precision, note=note,
            gpu_price_usd_per_hour=gpu_price, tokenize=tokenize, client=client,
        )
        failed_share, change = _share("--max-failed", max_failed), _share("--threshold", threshold)
        configs = [bench]
        if target_b is not None:
            configs.append(dataclasses.replace(bench, target=target_b, model=model_b or model))
        search = _search(capacity, capacity_share, failed_share, concurrency or rate, target_b)
        results = _run(configs, settings, gpu, dcgm_url, gpu_replay, search)
        from rich.console import Console

        from monitor.loadtest.result import write_result
        from monitor.loadtest.summary import print_summary
        from monitor.loadtest.verdict import failures

        console, failed = Console(), []
        for result, path in zip(results, (output, output_b), strict=False):
            write_result(result, path)
            print_summary(console, result)
            typer.echo(f"result written to {path}")
            failed += failures(result, failed_share)
        if search is not None:
            typer.secho(results[0]["capacity"]["words"], bold=True)
            if results[0]["capacity"]["concurrency"] is not None:
                failed = []  # failures past the capacity are what the search found there
        if failed:
            raise _fail("RUN FAILED: " + "\n  ".join(failed), 1)
        if len(results) == 2:
            _gate(console, (output.name, results[0]), (output_b.name, results[1]), change, threshold)

    @bench_app.command("compare")
    def compare(
        results: Annotated[list[Path], typer.Argument(help="A (the baseline) and B; or several for a table")],
        threshold: Annotated[str, typer.Option(help="Smallest change that counts, e.g. 5%")] = "5%",
        force: Annotated[bool, typer.Option(help="Compare even when the six variables differ")] = False,
        level: Annotated[str | None, typer.Option(help="For the table: the level to show, e.g. c=32")] = None,
        max_drift: Annotated[str, typer.Option(
            help="Refuse when the client machine's other load differs by more than this share of its CPUs")] = "25%",
        swap_back_budget: Annotated[str, typer.Option(
            help="KV tiering on vs off: the swap-back P99 the hypothesis allows")] = "50ms",
        table: Annotated[bool, typer.Option(
            help="One row a result, never a verdict (what three or more give): two GPUs side by side")] = False,
    ) -> None:
        """A vs B, changes beyond noise marked, exit 1 on a regression; three or more (or --table): one table."""
        from rich.console import Console

        from monitor.loadtest.compare import parse_threshold, table_rows
        from monitor.loadtest.conditions import differences
        from monitor.loadtest.summary import print_table
        from monitor.loadtest.verdict import clients, drift

        loaded = [(path.name, _load(path)) for path in results]
        console = Console()
        if len(loaded) != 2 or table:
            print_table(console, table_rows(loaded, level))
            return
        from monitor.loadtest.hypotheses import parse_budget

        try:
            share = parse_threshold(threshold)
            budget_s = parse_budget(swap_back_budget)
        except ValueError as exc:
            raise _fail(str(exc)) from None
        (name_a, a), (name_b, b) = loaded
        differ = (differences(a["conditions"], b["conditions"]) + clients(a, b)
                  + drift(a, b, _share("--max-drift", max_drift)))
        if differ:
            lines = "".join(f"  - {line}\n" for line in differ)
            advice = "comparing anyway (--force)" if force else "--force compares anyway"
            typer.secho(f"not comparable: {name_a} and {name_b} differ in\n{lines}({advice})", err=True,
                        fg=typer.colors.YELLOW)
            if not force:
                raise typer.Exit(2)
        _gate(console, (name_a, a), (name_b, b), share, threshold, budget_s)

    @bench_app.command("report")
    def report(
        result: Annotated[Path, typer.Argument(help="A result JSON")],
        output: Annotated[Path, typer.Option("--output", "-o", help="HTML file")] = Path("bench-report.html"),
    ) -> None:
        """One self-contained HTML page: conditions, latency and throughput vs load, trade-off, TTFT."""
        from monitor.loadtest.report import render_report

        output.write_text(render_report(_load(result)))
        typer.echo(f"report written to {output}")

    app.add_typer(bench_app, name="bench")


def _gate(console: Any, a: tuple[str, dict[str, Any]], b: tuple[str, dict[str, Any]], share: float,
          threshold: str, swap_back_budget_s: float | None = None) -> None:
    """A vs B printed (and, where one ran with a KV tier and the other without, the tiering
    hypothesis's verdict); exit 1 on a change for the worse beyond the threshold and the noise."""
    from monitor.loadtest.compare import compare as compare_results
    from monitor.loadtest.hypotheses import SWAP_BACK_BUDGET_S, tiering_lines
    from monitor.loadtest.summary import print_compare

    changes = compare_results(a[1], b[1], share)
    print_compare(console, changes, (a[0], b[0]))
    for line in tiering_lines(a[1], b[1], swap_back_budget_s or SWAP_BACK_BUDGET_S, (a[0], b[0])):
        console.print(line, highlight=False, overflow="fold")
    regressions = [c for c in changes if c.regression]
    if regressions:
        typer.secho(f"{len(regressions)} regression(s) beyond {threshold} and the noise: "
                    + ", ".join(f"{c.level} {c.figure} {c.relative * 100:+.1f} %" for c in regressions),
                    err=True, fg=typer.colors.RED)
        raise typer.Exit(1)


def _share(option: str, text: str) -> float:
    from monitor.loadtest.compare import parse_threshold

    try:
        return parse_threshold(text)
    except ValueError as exc:
        raise _fail(str(exc).replace("--threshold", option)) from None


def _search(capacity: str | None, share: str, max_failed: float, levels: str | None, target_b: str | None) -> Any:
    if capacity is None:
        return None
    from monitor.loadtest.capacity import CapacitySearch

    if levels or target_b:
        raise _fail("--capacity chooses its own levels: without --concurrency, --rate or --target-b")
    try:
        low, high = (int(v) for v in capacity.split(":"))
        return CapacitySearch(low, high, _share("--capacity-share", share), max_failed)
    except ValueError:
        raise _fail(f"--capacity {capacity!r}: LOW:HIGH concurrent users, 1 <= LOW <= HIGH") from None


def _run(configs: list[Any], settings: Settings, gpu: str, dcgm_url: str | None,
         replay: Path | None, search: Any = None) -> list[dict[str, Any]]:
    import httpx

    from monitor.config import ConfigError
    from monitor.cost.prices import PriceBook
    from monitor.loadtest.run import run_capacity, run_interleaved
    from monitor.loadtest.sampling import DcgmSource, GpuSource, local_source

    if gpu not in ("auto", "none"):
        raise _fail(f"--gpu {gpu!r}: auto or none")

    bench = configs[0]

    async def go() -> list[dict[str, Any]]:
        async with httpx.AsyncClient(timeout=10.0) as http:
            source: GpuSource | None = None
            if dcgm_url is not None:
                source = DcgmSource(dcgm_url, http, timeout_s=bench.probe_timeout_s, max_bytes=bench.probe_max_bytes)
            elif replay is not None or gpu == "auto":
                source = local_source(str(replay) if replay else None)
            with _progress() as progress:
                if search is not None:
                    return [await run_capacity(bench, search, source, PriceBook(settings.cost), progress)]
                return await run_interleaved(configs, source, PriceBook(settings.cost), progress)

    try:
        return asyncio.run(go())
    except ConfigError as exc:
        raise _fail(str(exc)) from None


class _progress:  # a context manager used like a function
    """A rich bar per phase and level: the warm-up by requests, a measured window by time."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[done]} requests"),
                            TimeElapsedColumn(), console=Console(stderr=True), transient=False)
        self.tasks: dict[tuple[str, str], TaskID] = {}
        self.rounds: dict[tuple[str, str], int] = {}

    def __enter__(self) -> _progress:
        self.bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.stop()

    def __call__(self, phase: str, label: str, done: float, finished: int) -> None:
        key = (phase, label)
        if done == 0.0 and finished == 0:  # a new window of this level starts
            self.rounds[key] = self.rounds.get(key, 0) + 1
            name = "warm-up" if phase == "warmup" else f"{label} run {self.rounds[key]}"
            self.tasks[key] = self.bar.add_task(name, total=1.0, done=0)
        self.bar.update(self.tasks[key], completed=done, done=finished)


def _scenario(name: str) -> Any:
    from monitor.loadtest.scenario import ScenarioError, load_scenario

    try:
        return load_scenario(name)
    except ScenarioError as exc:
        raise _fail(str(exc)) from None


def _dataset(path: Path | None, synthetic: bool, scenario: str) -> Any:
    from monitor.loadtest.data import DatasetError, load_dataset, synthetic_dataset

    if path is None and not synthetic:
        raise _fail("give --dataset FILE (ShareGPT JSON or JSONL), or --synthetic to generate prompts")
    if path is not None and synthetic:
        raise _fail("--dataset and --synthetic exclude each other")
    if synthetic:
        return synthetic_dataset(_scenario(scenario))
    try:
        return load_dataset(path)  # type: ignore[arg-type]
    except DatasetError as exc:
        raise _fail(str(exc)) from None


def _levels(concurrency: str | None, rate: str | None, scenario: str) -> Any:
    from monitor.loadtest.load import parse_levels

    try:
        return parse_levels(concurrency, rate, _scenario(scenario).concurrency)
    except ValueError as exc:
        raise _fail(str(exc)) from None


def _seconds(option: str, text: str) -> float:
    try:
        return Duration(text).seconds
    except ValueError as exc:
        raise _fail(f"{option}: {exc}") from None


def _size(option: str, text: str | None) -> int | None:
    from monitor.loadtest.bounded import parse_size

    try:
        return parse_size(text) if text is not None else None
    except ValueError as exc:
        raise _fail(f"{option}: {exc}") from None


def _goodput(ttft: str, tpot: str) -> Any:
    from monitor.loadtest.stats import Goodput

    return Goodput(_seconds("--goodput-ttft", ttft), _seconds("--goodput-tpot", tpot))


def _load(path: Path) -> dict[str, Any]:
    from monitor.loadtest.result import ResultError, load_result

    try:
        return load_result(path)
    except ResultError as exc:
        raise _fail(str(exc)) from None
