import pytest
from prometheus_client.parser import text_string_to_metric_families

from monitor.promtext import PageError, Parser, parse
from tests.conftest import FIXTURES


def test_fixture_page_matches_prometheus_client_parser() -> None:
    text = (FIXTURES / "sample_vllm_v1.prom").read_text()
    ours = parse(text)
    reference: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for fam in text_string_to_metric_families(text):
        for sample in fam.samples:
            reference.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    assert ours.samples == reference
    assert ours.types["vllm:time_to_first_token_seconds"] == "histogram"


def test_wanted_filters_and_cache_reuse() -> None:
    text = 'a{x="1"} 1\nb{x="1"} 2\na{x="2"} 3\n'
    parser = Parser()
    page = parser.parse(text, wanted={"a"})
    assert set(page.samples) == {"a"}
    again = parser.parse(text.replace(" 3", " 4"), wanted={"a"})
    assert again.samples["a"][(("x", "2"),)] == 4


def test_escapes_label_order_spaces_and_timestamps() -> None:
    text = 'm{b="2", a="q\\"uo\\\\te}\\n"} 1.5 1712345678000\nm{a="z",b="}"} -Inf\n'
    page = parse(text)
    series = page.samples["m"]
    assert series[(("a", 'q"uo\\te}\n'), ("b", "2"))] == 1.5
    assert series[(("a", "z"), ("b", "}"))] == float("-inf")


def test_duplicates_counted_first_wins() -> None:
    page = parse('m{a="1"} 1\nm{a="1"} 2\n')
    assert page.duplicates == 1
    assert page.samples["m"][(("a", "1"),)] == 1


def test_a_warm_parse_files_interleaved_families_and_counts_duplicates_as_a_cold_one() -> None:
    # Remembered heads take the fast path: a family that comes back after another one goes into
    # its own series, and a second line of one series (same labels, written in another order) is
    # a duplicate there too, the first value kept.
    def page(k: int) -> str:
        return (f'a{{x="1",y="2"}} {k}\nb 7\na{{x="2"}} {k + 1}\nb{{z="1"}} 8\n'
                f'a{{y="2",x="1"}} {k + 2}\na{{x="3"}} {k + 3}\n')

    warm = Parser(shared=False)
    warm.parse(page(1))
    for k in (10, 20):
        cold = parse(page(k))
        again = warm.parse(page(k))
        assert again.samples == cold.samples
        assert again.duplicates == cold.duplicates == 1
        assert again.samples["a"] == {(("x", "1"), ("y", "2")): k, (("x", "2"),): k + 1, (("x", "3"),): k + 3}
        assert list(again.samples["a"]) == list(cold.samples["a"])  # the page's order


def test_a_warm_parse_gives_the_last_pages_series_in_columns_and_a_changed_family_as_a_dict() -> None:
    # The label sets of the last page again (the same objects, from the heads): keys beside values,
    # no key hashed; any change to a family's series (one gone, one added, a duplicate) reads it
    # afresh as a dict, duplicates counted as a cold parse counts them.
    from monitor.promtext import Columns

    def page(k: int, extra: str = "") -> str:
        return f'# TYPE a gauge\na{{x="1"}} {k}\na{{x="2"}} {k + 1}\n{extra}# TYPE b gauge\nb{{z="1"}} {k + 2}\n'

    warm = Parser(shared=False)
    pages = [page(1), page(2), page(3, 'a{x="3"} 9\n'), page(4, 'a{x="3"} 9\n'), page(5, 'a{x="1"} 7\n'),
             page(6, 'a{x="1"} 7\n'), page(7), page(8)]
    kinds = []
    for text in pages:
        cold, again = parse(text), warm.parse(text)
        assert again.samples == cold.samples and dict(again.samples["a"]) == dict(cold.samples["a"])
        assert list(again.samples["a"].items()) == list(cold.samples["a"].items())  # the page's order
        assert again.duplicates == cold.duplicates
        kinds.append(type(again.samples["a"]).__name__)
        for labels, value in cold.samples["a"].items():
            assert again.samples["a"][labels] == value and labels in again.samples["a"]
    # first read, then the same series; a series added; the same again; a duplicate (first wins,
    # counted every time: such a family is never columns); back to the first series, then the same
    assert kinds == ["dict", "Columns", "dict", "Columns", "dict", "dict", "dict", "Columns"]
    assert warm.parse(pages[4]).duplicates == 1
    assert isinstance(warm.parse(pages[7]).samples["b"], Columns)


def test_openmetrics_eof_and_exemplars() -> None:
    text = (
        "# TYPE r counter\nr_total{a=\"1\"} 3.0\n"
        'h_bucket{le="0.1"} 2 # {trace_id="abc"} 0.05 1.0\n# EOF\n'
    )
    page = parse(text, openmetrics=True)
    assert page.samples["r_total"][(("a", "1"),)] == 3.0
    assert page.samples["h_bucket"][(("le", "0.1"),)] == 2.0
    with pytest.raises(PageError, match="EOF"):
        parse(text.replace("# EOF\n", ""), openmetrics=True)


@pytest.mark.parametrize(
    "bad",
    [
        "<html><body>Not found</body></html>",
        'm{a="1" 1\n',
        'm{a=1} 1\n',
        "m\n",
        "m abc\n",
        "9bad 1\n",
        'm{a="1",a="2"} 1\n',
    ],
)
def test_malformed_pages_fail_whole(bad: str) -> None:
    with pytest.raises(PageError):
        parse(bad)


def test_skipping_unwanted_families_loses_nothing_wanted() -> None:
    text = (FIXTURES / "sample_vllm_v1.prom").read_text()
    wanted = {"vllm:time_to_first_token_seconds_bucket", "vllm:request_success_total", "http_requests_total"}
    full = parse(text)
    assert parse(text, wanted).samples == {name: full.samples[name] for name in wanted}
    # An untyped wanted sample placed inside another family's block is still read.
    hidden = "# TYPE other gauge\nother 1\nwanted_one 5\n# TYPE more gauge\nmore 2\n"
    assert parse(hidden, {"wanted_one"}).samples == {"wanted_one": {(): 5.0}}


@pytest.mark.parametrize("hashes", [0, 3, 8, 9, 40])
def test_type_lines_are_found_among_other_hashes(hashes: int) -> None:
    # `# TYPE` lines are found by their '#': HELP lines and '#'s in label values and HELP text pass
    # before them, past the few the search checks one by one (then it searches for the whole needle).
    noise = "#" * hashes
    text = (f"# HELP skipped help with {noise} in it\n# TYPE skipped gauge\n"
            + "".join(f'skipped{{v="{noise}{i}"}} {i}\n' for i in range(5))
            + f"# HELP wanted_one {noise}\n# TYPE wanted_one counter\n"
            + f'wanted_one_total{{v="{noise}"}} 7\n'
            + "# TYPE other gauge\nother 1\n#TYPE not_a_type_line gauge\n"
            + "# TYPE wanted_two gauge\nwanted_two 9\n")
    wanted = {"wanted_one_total", "wanted_two"}
    full = parse(text)
    page = Parser().parse(text, wanted)
    assert page.samples == {name: full.samples[name] for name in wanted}
    assert page.types == full.types  # every family's TYPE read, skipped or not
    assert page.types["skipped"] == "gauge" and page.types["wanted_two"] == "gauge"


def test_truncated_page_without_final_line_feed() -> None:
    with pytest.raises(PageError, match="truncated"):
        parse('m{a="1"} 1\nm{a="2"} 12')
