"""The rules' read-back of the page this process renders: page after page, what a full parse of the
whole page gives (`exposition_samples`), whether a family's values alone were read or its lines
parsed again."""

from __future__ import annotations

import itertools
import math
import random
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from monitor.alerting import readback
from monitor.alerting.embedded import EmbeddedEvaluator
from monitor.alerting.readback import PageReader, exposition_samples
from monitor.config import SHIPPED_RULE_FILES
from monitor.exporter import make_registry, render_text
from monitor.promtext import PageError
from monitor.rulefiles.promql import Sample
from monitor.rulefiles.rules import load_rules
from monitor.service.render import render_service
from monitor.store.session import Store
from tests.support.fleet import build

ROOT = Path(__file__).resolve().parents[2]
COUNTER = (b"# HELP inference_test_requests Requests.\n# TYPE inference_test_requests counter\n"
           b'inference_test_requests_total{target="a"} 3.0\ninference_test_requests_created{target="a"} 1.7e9\n')


def shown(samples: Mapping[str, Sequence[Sample]]) -> dict[str, list[tuple[dict[str, str], str]]]:
    """Comparable, NaN included: each value by its repr."""
    return {name: [(dict(labels), repr(value)) for labels, value in found] for name, found in samples.items()}


@pytest.fixture(scope="module")
def pages() -> dict[str, bytes]:
    collector, now = build(3, 2)
    view = collector.assemble(now)

    def render() -> bytes:
        return render_text(make_registry([lambda: render_service(view)])) + COUNTER

    first = render()
    for target in view.targets.values():
        for stats in target.stats.values():
            stats.quantiles = {key: {q: v * 1.01 for q, v in by_q.items()} for key, by_q in stats.quantiles.items()}
    moved = render()
    ttft = re.compile(rb'^(inference_ttft_seconds\{[^\n]*target="t1"[^\n]*\}) \S+$', re.M)
    assert len(ttft.findall(first)) >= 4 and moved != first
    # The values Go writes apart from plain decimals, each read as the full parse reads it.
    odd_values = iter([b"NaN", b"+Inf", b"-0.0", b"1e+21", b"-Inf", b"5e-324"] * 10)
    odd = ttft.sub(lambda found: found.group(1) + b" " + next(odd_values), moved)
    assert odd.count(b"NaN") > moved.count(b"NaN") and b"5e-324" in odd
    line = re.search(rb'^inference_ttft_seconds\{[^\n]*target="t2"[^\n]*\n', first, re.M)
    pair = re.search(rb'^(inference_ttft_seconds\{[^\n]*target="t1"[^\n]*\n)(inference_ttft[^\n]*\n)', first, re.M)
    assert line is not None and pair is not None
    return {
        "first": first, "moved": moved, "odd": odd,
        "one series gone": first.replace(line.group(), b""),
        "a label changed": first.replace(line.group(), line.group().replace(b'target="t2"', b'target="t9"')),
        "two lines swapped": first.replace(pair.group(), pair.group(2) + pair.group(1)),
        "a series twice": first.replace(pair.group(1), pair.group(1) + pair.group(1).replace(b" ", b" 7")),
        "a family empty": re.sub(rb"^inference_target_up\{.*\n", b"", first, flags=re.M),
    }


def names() -> set[str]:
    rules = load_rules([ROOT / "alerts" / f"{name}.yml" for name in SHIPPED_RULE_FILES])
    return EmbeddedEvaluator(rules, Store("sqlite://").engine).metrics | {"inference_test_requests_total"}


# A family's lines are read a slice at a time (the GIL free between slices): whole, a line each, and
# pieces of a few lines give the same samples, the same values-only reads and the same refusals.
SLICES = pytest.mark.parametrize("slice_bytes", [readback.SLICE, 1, 300])


@SLICES
def test_page_after_page_the_reader_gives_what_a_full_parse_gives(pages: dict[str, bytes], slice_bytes: int,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(readback, "SLICE", slice_bytes)
    wanted = names()
    reader = PageReader(wanted)
    order = ["first", "first", "moved", "odd", "moved", "one series gone", "one series gone", "first",
             "a label changed", "a label changed", "moved", "two lines swapped", "first", "a family empty", "moved",
             "a series twice", "first"]
    values_only, parsed = [], []
    for name in order:
        before = reader.values_only, reader.parsed
        got = reader.read(pages[name])
        assert shown(got) == shown(exposition_samples(pages[name], wanted)), name
        values_only.append(reader.values_only - before[0])
        parsed.append(reader.parsed - before[1])
        assert "inference_ttft_seconds" in got and "inference_test_requests_total" in got
    every = values_only[1]  # the same page again: every family by its values, but the counter's
    assert every >= 5 and parsed[0] == every + 1
    # A family whose lines were all read before (series gone, come back, moved within the family,
    # values odd) is read by its values; one with a line never read (a new label value) is parsed,
    # as the counter's (two names) always is; a family without samples is neither.
    assert values_only == [0, every, every, every, every, every, every, every, every - 1, every, every, every, every,
                           every - 1, every, every - 1, every]
    assert parsed == [every + 1, 1, 1, 1, 1, 1, 1, 1, 2, 1, 1, 1, 1, 1, 1, 2, 1]


@SLICES
def test_a_line_that_is_not_head_value_is_never_read_by_its_values(pages: dict[str, bytes], slice_bytes: int,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(readback, "SLICE", slice_bytes)
    stamped = (b"# HELP inference_target_up x\n# TYPE inference_target_up gauge\n"
               b'inference_target_up{target="a"} 1 1700000000000\n')
    reader = PageReader({"inference_target_up"})
    one = {"inference_target_up": [({"target": "a", "__name__": "inference_target_up"}, "1.0")]}
    for _ in range(3):  # a timestamp after the value: the value is 1, every time
        assert shown(reader.read(stamped)) == one
    assert reader.values_only == 0
    plain = stamped.replace(b" 1700000000000", b"")
    reader.read(plain)
    assert reader.values_only == 0 and reader.read(plain) and reader.values_only == 1
    for broken in (plain.replace(b"} 1\n", b"} 1_0\n"), plain.replace(b"} 1\n", b"} one\n"),
                   plain.replace(b"} 1\n", b"}\n")):  # refused as the full parse refuses them
        with pytest.raises(PageError):
            exposition_samples(broken, {"inference_target_up"})
        with pytest.raises(PageError):
            reader.read(broken)
        assert shown(reader.read(plain))["inference_target_up"][0][1] == "1.0"  # and the next page read again
    two = plain + b'inference_target_up{target="b"} 0\n'
    reader.read(two)
    # One line's head unknown (a timestamp after its value), another's value not read by `float`:
    # as many values as known heads, yet none of them is theirs. Refused, as the full parse refuses it.
    mixed = two.replace(b"} 1\n", b"} 1 1700000000000\n").replace(b"} 0\n", b"} 1_0\n")
    with pytest.raises(PageError):
        exposition_samples(mixed, {"inference_target_up"})
    with pytest.raises(PageError):
        reader.read(mixed)


def test_a_family_written_twice_is_read_as_the_full_parse_reads_it(pages: dict[str, bytes]) -> None:
    twice = pages["first"] + COUNTER.replace(b'target="a"', b'target="b"')
    wanted = names()
    got = PageReader(wanted).read(twice)
    assert shown(got) == shown(exposition_samples(twice, wanted))
    assert [dict(labels)["target"] for labels, _ in got["inference_test_requests_total"]] == ["a", "b"]


def test_the_series_keep_their_dicts_and_their_matches_while_the_layout_holds(pages: dict[str, bytes]) -> None:
    reader = PageReader(names())
    first = reader.read(pages["first"])["inference_ttft_seconds"]
    moved = reader.read(pages["moved"])["inference_ttft_seconds"]
    assert moved.labels is first.labels and moved.matches is first.matches  # type: ignore[attr-defined]
    assert not math.isclose(moved[0][1], first[0][1], rel_tol=1e-3)
    changed = reader.read(pages["a label changed"])["inference_ttft_seconds"]
    assert changed.matches is not first.matches  # type: ignore[attr-defined]
    assert changed.labels[0] is first.labels[0]  # type: ignore[attr-defined]  # a series kept: its dict kept


def test_a_page_in_pieces_reads_as_the_whole_page(pages: dict[str, bytes]) -> None:
    # The render's pieces (`Exposition.chunks`) cut between lines, a family across several of them;
    # pieces cut within a line, or at a comment line, read the same too.
    wanted = names()
    whole, pieces = PageReader(wanted), PageReader(wanted)
    rng = random.Random(3)
    for name in ["first", "moved", "odd", "one series gone", "first", "a family empty", "a series twice", "first"]:
        page = pages[name]
        lines = page.splitlines(keepends=True)
        cuts = sorted(rng.sample(range(1, len(lines)), 40))
        by_lines = [b"".join(lines[a:b]) for a, b in zip([0, *cuts], [*cuts, len(lines)], strict=True)]
        anywhere = sorted(rng.sample(range(1, len(page)), 60))
        by_bytes = [page[a:b] for a, b in zip([0, *anywhere], [*anywhere, len(page)], strict=True)]
        expected = shown(whole.read(page))
        counts: list[tuple[int, int]] = []
        assert expected == shown(exposition_samples(page, wanted)), name
        for form in (by_lines, by_bytes, [page]):
            counts.append((pieces.values_only, pieces.parsed))
            assert shown(pieces.read(form)) == expected, name
        counts.append((pieces.values_only, pieces.parsed))
        steps = [(b[0] - a[0], b[1] - a[1]) for a, b in itertools.pairwise(counts)]
        # The same page again, in pieces cut anywhere or whole: read by its values alike.
        assert steps[1] == steps[2], (name, steps)
        assert name == "a series twice" or steps[1][0] > 5, (name, steps)
