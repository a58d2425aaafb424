"""The engine tables against one page per engine layout (tests/fixtures/pages/README.md).

Every page must be valid exposition, be detected as its own engine and generation, and carry at
least one candidate of every counter, histogram and gauge its table lists: the tables and the pages
agree. Names a table leaves out (TGI has no TTFT) are simply absent, never asserted.
"""

from functools import cache

import pytest
from prometheus_client.parser import text_string_to_metric_families

from monitor.promtext import Page, Parser, parse
from monitor.service.engines import ENGINES, EngineSpec, detect
from tests.conftest import FIXTURES

PAGES = FIXTURES / "pages"
EXPECTED = {
    "vllm_v1.prom": ("vllm", "v1"),
    "vllm_v0.prom": ("vllm", "v0"),
    "vllm_multiproc.prom": ("vllm", "v1"),
    "sglang.prom": ("sglang", "v0.4+"),
    "tgi.prom": ("tgi", "v1+"),
    "llamacpp.prom": ("llamacpp", "server"),
}


@cache
def page_text(name: str) -> str:
    return (PAGES / name).read_text()


def spec_for(engine: str, generation: str) -> EngineSpec:
    return next(s for s in ENGINES if (s.engine, s.generation) == (engine, generation))


def missing_from(spec: EngineSpec, page: Page) -> list[str]:
    """Our metrics for which none of the table's candidates is on the page (optional ones aside)."""
    missing = [m for m, sel in spec.counters.items()
               if m not in spec.optional and not any(s.sample in page.samples for s in sel)]
    missing += [m for m, bases in spec.histograms.items()
                if m not in spec.optional and not any(f"{b}_bucket" in page.samples for b in bases)]
    missing += [m for m, g in spec.gauges.items()
                if m not in spec.optional and not any(c in page.samples for c in g.candidates)]
    return missing


def test_every_page_file_is_covered() -> None:
    assert {p.name for p in PAGES.glob("*.prom")} == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_page_is_valid_exposition(name: str) -> None:
    families = list(text_string_to_metric_families(page_text(name)))
    assert families
    reference = {s.name for fam in families for s in fam.samples}
    page = parse(page_text(name))
    # prometheus_client names a counter's samples `<family>_total` even when the page (TGI's
    # Rust exporter) prints the bare family name.
    ours = {n + "_total" if page.types.get(n) == "counter" and not n.endswith("_total") else n for n in page.samples}
    assert ours == reference


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_detects_its_engine_and_generation(name: str) -> None:
    spec = detect(page_text(name))
    assert spec is not None
    assert (spec.engine, spec.generation) == EXPECTED[name]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_table_and_page_agree(name: str) -> None:
    spec = spec_for(*EXPECTED[name])
    page = Parser().parse(page_text(name), spec.wanted)
    assert missing_from(spec, page) == []


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_no_marker_of_another_engine_on_the_page(name: str) -> None:
    samples = set(parse(page_text(name)).samples)
    for spec in ENGINES:
        if spec.engine != EXPECTED[name][0]:
            assert not samples & set(spec.markers), f"{spec.engine} marker on {name}"


def test_v1_pages_with_v0_names_stay_v1() -> None:
    # --show-hidden-metrics-for-version brings back vllm:gpu_cache_usage_perc, V0's marker.
    text = page_text("vllm_multiproc.prom")
    assert "\nvllm:gpu_cache_usage_perc{" in text
    assert detect(text) is spec_for("vllm", "v1")


def test_detect_finds_no_engine_on_other_pages() -> None:
    assert detect("# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 1.0\n") is None
    # A marker named only in a HELP/TYPE line (no sample yet) is not enough.
    assert detect("# TYPE sglang:num_running_reqs gauge\n") is None


def test_tgi_errors_exclude_client_side_failures() -> None:
    tgi = spec_for("tgi", "v1+")
    page = parse(page_text("tgi.prom"))
    failures = page.series("tgi_request_failure")
    errors = {labels: v for labels, v in failures.items() if tgi.counters["errors"][0].accepts(labels)}
    assert {dict(labels)["err"] for labels in errors} == {"generation"}
    finished = sum(
        value
        for selector in tgi.counters["requests"]
        for labels, value in page.series(selector.sample).items()
        if selector.accepts(labels)
    )
    # Finished requests = success + admitted failures = the latency histogram's count + failures.
    assert finished == page.series("tgi_request_duration_count")[()] + sum(errors.values()) + sum(
        v for labels, v in failures.items() if dict(labels)["err"] == "dropped"
    )


def test_multiproc_kv_cache_copies_differ_per_pid() -> None:
    # 0.11.0 keeps one kv_cache_usage_perc series per API-server process; only one holds the value.
    series = parse(page_text("vllm_multiproc.prom")).series("vllm:kv_cache_usage_perc")
    assert len(series) == 2
    assert all(any(k == "pid" for k, _ in labels) for labels in series)
    assert sorted(series.values())[0] == 0.0
    v1 = spec_for("vllm", "v1")
    assert v1.gauges["kv_cache"].combine == "max"
    assert "pid" in v1.process_labels


def test_engines_order_and_markers_do_not_collide() -> None:
    markers = [m for spec in ENGINES for m in spec.markers]
    assert len(markers) == len(set(markers))
    # Generations of one engine share names: the newer one must be tried first.
    assert ENGINES.index(spec_for("vllm", "v1")) < ENGINES.index(spec_for("vllm", "v0"))


@pytest.mark.parametrize("with_engine_names", [False, True])
def test_a_router_page_is_said_to_be_a_router_not_an_engine(with_engine_names: bool) -> None:
    # A router page with no engine's marker is ruled out by a scan of its text; one that also
    # carries an engine's names (detected as that engine) by the parse of those names.
    import asyncio

    import httpx

    from monitor.config import load_settings
    from monitor.promtext import Parser
    from monitor.runtime import Monitor
    from monitor.service.engines import is_router, router_sample

    text = (FIXTURES / "router_production_stack.prom").read_text()
    assert is_router(text) and is_router(text.replace("vllm:", "vllm_"))
    assert not any(is_router(page_text(name)) for name in EXPECTED)
    for name in EXPECTED:  # no engine page reads as a router's through its parse either
        engine = page_text(name)
        spec = detect(engine)
        assert spec is not None and not router_sample(Parser().parse(engine, spec.page_names()))
    if with_engine_names:
        text = page_text("vllm_v1.prom") + text
        for spelled in (text, text.replace("vllm:", "vllm_")):
            spec = detect(spelled)
            assert spec is not None and router_sample(Parser().parse(spelled, spec.page_names()))
    settings = load_settings(None, {"infra": {"nvml": {"enabled": "false"}}, "alerting": {"enabled": False},
                                    "service": {"targets": [{"name": "router", "url": "http://router/metrics"}]}})

    async def run() -> list[dict[str, object]]:
        client = httpx.AsyncClient(transport=httpx.MockTransport(lambda _: httpx.Response(200, text=text)))
        monitor = Monitor(settings, client=client)
        await monitor.run_once()
        await monitor.aclose()
        return monitor.service.status()

    (row,) = asyncio.run(run())
    assert row["engine"] is None and "router" in str(row["error"]) and "not a serving engine" in str(row["error"])


def test_a_selector_remembers_its_answers_within_a_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    # A selector keeps its answer per label set (the same tuples every scrape), never more than
    # _ACCEPTED_LIMIT of them: a label that changes every scrape must not grow it without end.
    from monitor.service import engines

    monkeypatch.setattr(engines, "_ACCEPTED_LIMIT", 8)
    selector = engines.Selector("x_total", (("reason", "error"),), (("kind", "abort"),))
    cases = [((("reason", "error"),), True), ((("reason", "stop"),), False),
             ((("kind", "abort"), ("reason", "error")), False), ((), False)]
    for _ in range(2):  # asked, then answered from what it kept
        assert [selector.accepts(labels) for labels, _ in cases] == [expected for _, expected in cases]
    for i in range(50):
        assert selector.accepts((("reason", "error"), ("request", str(i))))
        assert not selector.accepts((("reason", "stop"), ("request", str(i))))
        assert len(selector._accepted) <= 8
    assert selector == engines.Selector("x_total", (("reason", "error"),), (("kind", "abort"),))
