"""The rule language on a page: what parses, what is refused, and Prometheus' semantics on one instant."""

from __future__ import annotations

import math

import pytest

from monitor.rulefiles.promql import MAX_DEPTH, Matcher, OutsideSubset, Sample, Series, TooDeep, parse


def series(name: str, value: float, **labels: str) -> Sample:
    return ({"__name__": name, **labels}, value)


SAMPLES: dict[str, list[Sample]] = {
    "a": [series("a", 5, node="n1", gpu="0"), series("a", 0.5, node="n1", gpu="1"),
          series("a", 20, node="n2", gpu="2"), series("a", math.nan, node="n3", gpu="3")],
    "b": [series("b", 1, node="n1"), series("b", 0, node="n2")],
    "c": [series("c", 7, node="n1", gpu="0")],
}


def run(text: str) -> list[tuple[dict[str, str], float]]:
    return sorted(((dict(labels), value) for labels, value in parse(text).eval(SAMPLES)),
                  key=lambda s: sorted(s[0].items()))


def gpus(text: str) -> list[str]:
    return sorted(labels.get("gpu", labels.get("node", "")) for labels, _ in run(text))


def test_comparison_filters_and_keeps_the_sample_with_its_name() -> None:
    assert run("a > 4") == [({"__name__": "a", "node": "n1", "gpu": "0"}, 5.0),
                            ({"__name__": "a", "node": "n2", "gpu": "2"}, 20.0)]
    assert gpus("4 < a") == ["0", "2"]  # a number on the left keeps the vector's samples
    assert gpus("a != 5") == ["1", "2", "3"]  # NaN != 5, as in Go
    assert gpus("a >= 5 <= 5") == ["0"]  # chained comparisons, left to right
    assert gpus("a == 0.5") == ["1"] and gpus("a > -1e3") == ["0", "1", "2"]


def test_matchers_and_anchored_regexes() -> None:
    assert gpus('a{gpu="1"}') == ["1"]
    assert gpus('a{gpu!="1",node=~"n[12]"}') == ["0", "2"]
    assert gpus('a{node=~"n"}') == []  # anchored: "n" does not match "n1"
    assert gpus('a{gpu!~"0|1"} > 0') == ["2"]
    assert gpus('a{missing=""}') == ["0", "1", "2", "3"]  # an absent label equals ""


def test_set_operators_match_on_all_labels_but_the_name() -> None:
    assert gpus("a > 1 and c > 0") == ["0"]  # same labels, different metric names
    assert gpus("a > 1 unless c > 0") == ["2"]
    assert [labels["__name__"] for labels, _ in run("c > 100 or a > 10")] == ["a"]
    names = [labels["__name__"] for labels, _ in parse("c > 0 or a > 1").eval(SAMPLES)]
    assert names == ["c", "a"]  # all of the left side; a{gpu="0"} matched c's labels, so only a{gpu="2"}


def test_on_and_ignoring() -> None:
    assert gpus("a > 0 and on(node) b == 1") == ["0", "1"]
    assert gpus("a > 0 unless on(node) b == 1") == ["2"]
    assert gpus("b > 0 and ignoring(gpu) c > 0") == ["n1"]
    assert gpus("(a > 10 or c > 0) and on(node) (b == 0)") == ["2"]
    assert gpus("a > 0 and on() b > 0") == ["0", "1", "2"]  # on(): one group, both sides non-empty


def test_or_binds_looser_than_and() -> None:
    # a > 10 or (c > 0 and b > 0): c has no b partner with identical labels
    assert gpus("a > 10 or c > 0 and b > 0") == ["2"]


@pytest.mark.parametrize("text", [
    "rate(a[5m]) > 1", "a[5m]", "a @ 100 > 1", "sum(a) > 1", "a > bool 1", "a > 1 and on(node) group_left b",
    "a >", "(a > 1", "a > 1 and", 'a{node=~"("} > 1', 'a{node=~"(?<x>y)"} > 1', "1 > 2", "a > 1 b", "a > 1 and 2",
    'a{__name__=~"a|b"} > 1', "clamp_min(a, b) > 1", 'a{node="n1"} or on(node) group_right b',
])
def test_outside_what_is_evaluated_is_refused_with_a_reason(text: str) -> None:
    with pytest.raises(OutsideSubset) as caught:
        parse(text)
    assert str(caught.value)


def test_arithmetic_and_vector_comparisons_on_a_page_have_prometheus_semantics() -> None:
    # arithmetic drops the name; a comparison with a number then filters
    assert run("a + 1 > 2") == [({"node": "n1", "gpu": "0"}, 6.0), ({"node": "n2", "gpu": "2"}, 21.0)]
    assert run("-c") == [({"node": "n1", "gpu": "0"}, -7.0)]
    assert run("a / on(node, gpu) c") == [({"node": "n1", "gpu": "0"}, 5 / 7)]
    # two vectors compared: matched one to one, the left sample kept with its name
    assert run("c > a") == [({"__name__": "c", "node": "n1", "gpu": "0"}, 7.0)]
    assert run("a > b") == []  # a's series carry gpu, b's do not: nothing matches
    assert run('{__name__="c"} >= 7') == run("c >= 7") != []
    assert run("abs(a - 10) < 6") == [({"node": "n1", "gpu": "0"}, 5.0)]


def test_the_past_on_a_page_is_empty() -> None:
    """`offset` and ranges read the history; a page holds one instant, so they select nothing there."""
    expr = parse("a offset 5m > 1")
    assert expr.reads_history and expr.eval(SAMPLES) == []
    assert parse("max_over_time(a[1h]) > 1").eval(SAMPLES) == []
    assert not parse("a > 1 and c > 0").reads_history


@pytest.mark.parametrize("text", [
    "(" * 50_000 + "a" + ")" * 50_000 + " > 1", " or ".join(["a > 1"] * 20_000),
    "(" * (MAX_DEPTH + 1) + "a" + ")" * (MAX_DEPTH + 1), " or ".join(["a > 1"] * (MAX_DEPTH + 1)),
])
def test_too_deep_is_refused_before_the_parser_reads_it(text: str) -> None:
    with pytest.raises(TooDeep):
        parse(text)
    assert parse(" or ".join(["a > 1"] * 40)).eval(SAMPLES)  # what a rule writes parses


def test_metric_names_of_an_expression() -> None:
    assert parse("(a > 1 or c > 0) and on(node) b == 1").metric_names == {"a", "b", "c"}


EXPRESSIONS = ['a{gpu="1"}', 'a{gpu!="1",node=~"n[12]"}', 'a{node=~"n"}', 'a{gpu!~"0|1"} > 0', "a > 1 and c > 0",
               "a > 0 unless on(node) b == 1", "(a > 10 or c > 0) and on(node) (b == 0)", "a", 'a{missing=""} > 1']


def test_a_kept_series_list_gives_what_the_plain_list_gives_and_keeps_each_selectors_matches() -> None:
    matches: dict[str, dict[tuple[Matcher, ...], list[int]]] = {name: {} for name in SAMPLES}
    labels = {name: [labels for labels, _ in found] for name, found in SAMPLES.items()}

    def kept(shift: float) -> dict[str, Series]:  # the same label dicts, values of another tick
        return {name: Series(labels[name], [value + shift for _, value in found], matches[name])
                for name, found in SAMPLES.items()}

    for shift in (0.0, 0.0, 3.0, -0.4):
        plain = {name: [(labels, value + shift) for labels, value in found] for name, found in SAMPLES.items()}
        for text in EXPRESSIONS:
            got, want = parse(text).eval(kept(shift)), parse(text).eval(plain)
            assert [(dict(s[0]), repr(s[1])) for s in got] == [(dict(s[0]), repr(s[1])) for s in want], text
    # Each selector's matches kept once, by its own matchers: two selectors of `a` do not share them.
    assert matches["a"][(Matcher("gpu", "=", "1"),)] == [1]
    assert matches["a"][(Matcher("gpu", "!=", "1"), Matcher("node", "=~", "n[12]"))] == [0, 2]
    assert () not in matches["a"]  # no matcher: every series, nothing to keep
    other = Series([{"__name__": "a", "gpu": "9", "node": "n1"}], [2.0], {})  # another layout: its own matches
    assert parse('a{node="n1"}').eval({"a": other}) == [({"__name__": "a", "gpu": "9", "node": "n1"}, 2.0)]


def test_a_series_list_is_a_sequence_of_samples() -> None:
    found = Series([{"__name__": "a", "x": "1"}, {"__name__": "a", "x": "2"}], [1.0, 2.0], {})
    assert len(found) == 2 and found[1] == ({"__name__": "a", "x": "2"}, 2.0)
    assert found[:1] == [({"__name__": "a", "x": "1"}, 1.0)] and found == list(found)
    with pytest.raises(ValueError, match="2 label sets for 1 values"):
        Series(found.labels, [1.0], {})
