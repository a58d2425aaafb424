"""The fast path (wanted names only, unwanted families skipped) against the full parse.

On the families it reads, the fast path must give exactly what a full parse gives (filtered to
the wanted names, under the names the engine table files them as), or refuse the page where the
full parse refuses it. Pages are built from the engine fixtures' real families, shuffled, spelled
as exporters spell them, and bent in the ways the text format allows.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.openmetrics import exposition as openmetrics
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from monitor import promtext
from monitor.promtext import Labels, PageError, Parser, parse
from monitor.service.engines import ENGINES, EngineSpec, detect
from tests.conftest import FIXTURES

PAGES = [*sorted((FIXTURES / "pages").glob("*.prom")), FIXTURES / "sample_vllm_v1.prom"]


def blocks(text: str) -> list[str]:
    """A page cut into family blocks, each from its # HELP/# TYPE lines to the next family."""
    cut = re.split(r"(?m)^(?=# HELP )", text)
    return [block if block.endswith("\n") else block + "\n" for block in cut if block.strip()]


BLOCKS = [block for path in PAGES for block in blocks(path.read_text())]
ALL_NAMES: dict[str, str] = {}
for _spec in ENGINES:
    ALL_NAMES.update(_spec.page_names())


def reference(text: str, names: dict[str, str], openmetrics_page: bool) -> dict[str, dict[Labels, float]]:
    full = parse(text, openmetrics=openmetrics_page)
    filed: dict[str, dict[Labels, float]] = {}
    for page_name, series in full.samples.items():
        if page_name in names:
            filed.setdefault(names[page_name], {}).update(series)
    return filed


def assert_agree(text: str, names: dict[str, str], openmetrics_page: bool = False) -> None:
    try:
        expected = reference(text, names, openmetrics_page)
    except PageError:
        with pytest.raises(PageError):
            Parser().parse(text, names, openmetrics_page)
        return
    assert Parser().parse(text, names, openmetrics_page).samples == expected


def escaped(text: str) -> str:
    """prometheus_client's OpenMetrics `escaping=underscores`: sample lines lose their colons."""
    return re.sub(r"(?m)^([a-zA-Z_:][a-zA-Z0-9_:]*)", lambda m: m.group(1).replace(":", "_"), text)


def bend(text: str, how: str) -> str:
    if how == "tabs":  # tabs are blanks too
        return re.sub(r"(?m)^([^#\n][^ \n]*) ", "\\1\t", text)
    if how == "space-before-brace":
        return re.sub(r"(?m)^([a-zA-Z_:][a-zA-Z0-9_:]*)\{", "\\1 {", text)
    if how == "wide-type-lines":
        return text.replace("# TYPE ", "# TYPE  ").replace(" counter\n", "  counter\n")
    if how == "escaped":
        return escaped(text)
    return text


@st.composite
def pages(draw: st.DrawFn) -> str:
    chosen = draw(st.lists(st.sampled_from(BLOCKS), min_size=1, max_size=10, unique=True))
    how = draw(st.sampled_from(["plain", "tabs", "space-before-brace", "wide-type-lines", "escaped"]))
    text = "".join(chosen)
    if draw(st.booleans()):
        # An untyped sample of a wanted family inside the block of a family whose name its own
        # name extends (`vllm:num_requests` -> `vllm:num_requests_running`).
        wanted = draw(st.sampled_from(sorted(n for n in ALL_NAMES if "_" in n.split(":")[-1])))
        stem = wanted[: wanted.rindex("_")]
        text += f"# HELP {stem} x\n# TYPE {stem} gauge\n{stem} 1\n{wanted}{{model_name=\"m\"}} 5\n"
    return bend(text, how)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pages())
def test_fast_path_equals_full_parse(text: str) -> None:
    for spec in ENGINES:
        assert_agree(text, spec.page_names())


@pytest.mark.parametrize(
    "text",
    [
        "# TYPE  vllm:num_requests_running  gauge\nvllm:num_requests_running 3\n",  # blanks in TYPE
        "# TYPE vllm:num_requests gauge\nvllm:num_requests 1\nvllm:num_requests_running 7\n",
        'vllm:num_requests_running {model_name="m"} 4\n',  # a blank before the labels
        'vllm:num_requests_running\t{model_name="m"}\t4\t1712345678000\n',  # tabs
        '{"vllm:num_requests_running", model_name="m"} 4\n',  # Prometheus 3 quoted name
        'vllm:num_requests_running{model_name="m"} 1_2\n',  # Go refuses digit underscores
        "bad-name 1\nvllm:num_requests_running 1\n",
        'vllm:num_requests_running{model_name="m"} 0x1p-2\n',  # Go reads hexadecimal floats
    ],
)
def test_documented_disagreements_are_gone(text: str) -> None:
    assert_agree(text, ENGINES[0].page_names())


def test_values_read_as_go_reads_them() -> None:
    assert parse("m 0x1p-2\n").samples["m"][()] == 0.25
    assert parse('{"m", a="1"} 4\n').samples["m"][(("a", "1"),)] == 4.0
    assert parse("m\t{a=\"1\"}\t5\n").samples["m"][(("a", "1"),)] == 5.0
    for bad in ("m 1_2\n", "m ١٢\n", "m 1 2 3\n", '{"m" a="1"} 1\n', '{a="1"} 1\n'):
        with pytest.raises(PageError):
            parse(bad)


class _Reexposed(Collector):
    def __init__(self, families: Iterable[Metric]) -> None:
        self.families = list(families)

    def collect(self) -> Iterator[Metric]:
        yield from self.families


@pytest.mark.parametrize("path", PAGES, ids=lambda p: Path(p).stem)
def test_engine_pages_as_openmetrics_with_an_unread_family_last(path: Path) -> None:
    # prometheus_client re-exposes the page as OpenMetrics (colons kept), with a family the
    # monitor does not read last: its block used to swallow '# EOF' and the page was refused.
    families = list(text_string_to_metric_families(path.read_text()))
    unread = GaugeMetricFamily("zz_build_info", "Not read by any engine table", labels=["version"])
    unread.add_metric(["1.0"], 1.0)
    registry = CollectorRegistry()
    registry.register(_Reexposed([*families, unread]))
    text = openmetrics.generate_latest(registry, escaping="allow-utf-8").decode()
    assert text.rstrip().endswith("zz_build_info{version=\"1.0\"} 1.0\n# EOF")
    spec: EngineSpec | None = detect(text)
    assert spec is not None
    page = Parser().parse(text, spec.page_names(), openmetrics=True)
    assert page.samples == reference(text, spec.page_names(), True)
    assert page.samples  # the engine's families were read


# What may follow a line's head on the next scrape: new numbers, Go-only numbers, a timestamp,
# an exemplar, and what is not a value at all.
NEXT_VALUES = ["7", "-0.5", "1e3", "+Inf", "NaN", "0x1p-2", "1_2", "١٢", "}", "", "x", "3 1712345678000",
               "3\t1712345678000", '2 # {trace_id="a"} 0.5', "4\r", "5 6 7"]


@st.composite
def next_scrapes(draw: st.DrawFn) -> tuple[str, str]:
    """A page, and the same page a scrape later: some lines keep their head and get a new value."""
    first = draw(pages())
    lines = first.split("\n")
    for index, line in enumerate(lines):
        if line and not line.startswith("#") and " " in line and draw(st.booleans()):
            lines[index] = line.rpartition(" ")[0] + " " + draw(st.sampled_from(NEXT_VALUES))
    return first, "\n".join(lines)


def warm_parse(warm: Parser, text: str, names: dict[str, str]) -> dict[str, dict[Labels, str]] | None:
    """The samples (values as text, so that NaN equals NaN), or None where the page is refused."""
    try:
        samples = warm.parse(text, names).samples
    except PageError:
        return None
    return {name: {labels: repr(value) for labels, value in series.items()} for name, series in samples.items()}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(next_scrapes())
def test_a_parser_warm_from_the_last_scrape_equals_a_fresh_one(scrapes: tuple[str, str]) -> None:
    # The heads a parser remembers from one scrape read the next one exactly as a fresh parser
    # does: the same samples, or the same refusal.
    first, second = scrapes
    for spec in ENGINES:
        names = spec.page_names()
        warm = Parser(shared=False)
        warm_parse(warm, first, names)
        expected = warm_parse(Parser(shared=False), second, names)
        assert warm_parse(warm, second, names) == expected
        assert warm_parse(warm, second, names) == expected  # and warm from the page itself


def test_a_remembered_head_reads_only_a_new_number() -> None:
    parser = Parser(shared=False)
    names = ENGINES[0].page_names()
    line = 'vllm:num_requests_running{engine="0",model_name="m"}'
    assert parser.parse(f"{line} 3\n", names).samples["vllm:num_requests_running"] == {
        (("engine", "0"), ("model_name", "m")): 3.0}
    assert parser.parse(f"{line} 4\n", names).samples["vllm:num_requests_running"] == {
        (("engine", "0"), ("model_name", "m")): 4.0}
    for bad in (f"{line} 1_2\n", f"{line} }}\n", f"{line} ١\n", f"{line} 1 2 3\n"):
        with pytest.raises(PageError):
            parser.parse(bad, names)
    assert parser.parse(f"{line} 5 1712345678000\n{line} 6\n", names).duplicates == 1


def test_parsers_share_the_heads_of_one_wanted(monkeypatch: pytest.MonkeyPatch) -> None:
    # Two targets of one engine write the same heads: the second target's parser reads them from
    # what the first one remembered (no label block parsed again), and gives what a cold parse gives.
    names = ENGINES[0].page_names()
    text = (FIXTURES / "sample_vllm_v1.prom").read_text()
    Parser().parse(text, names)
    again = re.sub(r"(?m) ([0-9.e+-]+)$", lambda m: f" {float(m.group(1)) + 1}", text)
    expected = reference(again, names, False)
    blocks: list[int] = []
    parse_block = promtext._parse_label_block
    monkeypatch.setattr(promtext, "_parse_label_block", lambda *a: blocks.append(1) or parse_block(*a))
    assert Parser().parse(again, names).samples == expected
    assert blocks == []
    assert Parser(shared=False).parse(again, names).samples == expected and blocks  # a cold one parses them
