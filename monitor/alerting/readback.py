"""The rules' read-back of the /metrics page this process rendered, tick after tick.

`infermon serve` renders /metrics once per publish tick; the embedded rules then read the samples
they need back from that page, so they see exactly what a Prometheus scrape of it gets. At 1,000
targets of 10 models the rules read 143,000 series of a 74 MB page: parsing their lines took
~0.4 s a tick and matching them ~0.2 s more, yet tick after tick the series are the same and
only their values move.

`PageReader` reads only the families the rules read, each from its `# TYPE` line to the next
comment (the renderer writes a family's samples there and nowhere else). A family's lines whose
text without their values equals the last tick's (one comparison of two byte strings) are the
same series in the same order: only the values are read, in C, and the series keep their label
dicts and the selectors' matches (`expr.Series`). When series came or went (a target stale, or
back), each line's head is looked up among those the parser read in full before, on a line that
was exactly `head value`; a family with a head never read (a new series), or a line that is not
`head value`, is parsed in full, as `exposition_samples` parses the whole page. Either way the
family's layout is what the next tick compares with.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from monitor.alerting.expr import Matcher, Sample, Series
from monitor.promtext import Labels, Parser, family_names

_TYPE = b"\n# TYPE "
# A line's last blank-separated field (its value, on a line that is `head value`), and the same
# field when it can be a value read by `float` as the parser reads it (no '_', no blank).
_TAIL = re.compile(rb" [^ \n]*$", re.MULTILINE)
_VALUE = re.compile(rb" ([^ \n_]+)$", re.MULTILINE)

Matches = dict[tuple[Matcher, ...], list[int]]


@dataclass
class KeptLabels:
    """The label dicts a reader of page after page hands the rules, kept from page to page."""

    series: dict[tuple[str, Labels], Mapping[str, str]] = field(default_factory=dict)  # by (name, labels)
    # name -> the page's series of that name, in page order, their dicts and the selectors' matches
    # on them: the same page layout tick after tick (at 1,000 targets of 10 models, 143,000 series
    # the rules read) is one comparison of two tuples, in C, instead of a hash of every label set.
    families: dict[str, tuple[tuple[Labels, ...], list[Mapping[str, str]], Matches]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.series)

    def clear(self) -> None:
        self.series.clear()
        self.families.clear()

    def of(self, name: str, keys: tuple[Labels, ...], values: list[float]) -> Series:
        """The samples of `name` whose label sets are `keys`, in that order, with these values."""
        known = self.families.get(name)
        if known is None or not (known[0] is keys or known[0] == keys):
            dicts: list[Mapping[str, str]] = []
            for labels in keys:
                found = self.series.get((name, labels))
                if found is None:
                    found = self.series[(name, labels)] = {**{k: v for k, v in labels if v != ""}, "__name__": name}
                dicts.append(found)
            known = self.families[name] = (keys, dicts, {})
        return Series(known[1], values, known[2])


def exposition_samples(body: bytes, names: Collection[str], parser: Parser | None = None,
                       kept: KeptLabels | None = None) -> dict[str, Series]:
    """The samples of `names` read from a whole /metrics page, every line parsed: the same samples
    `registry_samples` takes from the registry (the reference `PageReader` is tested against).
    A reader of page after page passes its `parser` and the series' label dicts it `kept`."""
    page = (parser or Parser()).parse(body.decode(), wanted=names)
    kept = KeptLabels() if kept is None else kept
    return {name: kept.of(name, tuple(series), list(series.values())) for name, series in page.samples.items()}


@dataclass
class _Layout:
    """A family's lines as last read: their text without the values, and the series they are."""

    heads: bytes
    name: str
    keys: tuple[Labels, ...]


class PageReader:
    """Reads the samples of `names` back from the pages this process renders, tick after tick."""

    def __init__(self, names: Collection[str], limit: int = 500_000) -> None:
        self.names = names
        self.families = family_names(names)
        self.kept = KeptLabels()
        self.limit = limit  # series label dicts kept; past it, forgotten and built again
        self.layouts: dict[str, _Layout] = {}
        self._parser = Parser()
        self.values_only = 0  # families with samples read by their values alone (all `read` calls)
        self.parsed = 0  # families with samples parsed in full

    def read(self, body: bytes) -> dict[str, Sequence[Sample]]:
        if len(self.kept) > self.limit:
            self.kept.clear()
            self.layouts.clear()
        out: dict[str, Sequence[Sample]] = {}
        seen: set[str] = set()
        for start in _type_lines(body):
            line_end = body.find(b"\n", start)
            if line_end < 0:
                line_end = len(body)
            declared = body[start:line_end].split()
            family = declared[2].decode() if len(declared) >= 3 else ""
            if family not in self.families:
                continue
            if family in seen:  # a family twice: not a page this process renders; read all of it
                return dict(exposition_samples(body, self.names, self._parser, self.kept))
            seen.add(family)
            run_end = body.find(b"\n#", line_end)
            run_end = len(body) if run_end < 0 else run_end + 1
            self._run(family, body[start:line_end + 1], body[line_end + 1:run_end], out)
        return out

    def _run(self, family: str, type_line: bytes, run: bytes, out: dict[str, Sequence[Sample]]) -> None:
        """Read one family's sample lines (`run`) into `out`."""
        if not run:
            return  # a family without samples (its layout kept for when they are back)
        heads = _TAIL.sub(b"", run)
        layout = self.layouts.get(family)
        if layout is None or layout.heads != heads:
            # Series come or gone (a target stale, or back): their lines were read before, each
            # head is looked up, none parsed (a family of 60,000 lines parsed again took ~0.2 s).
            layout = self._known(heads)
        values = None if layout is None else _values(run, len(layout.keys))
        if layout is not None and values is not None:
            self.values_only += 1
            self._file(family, layout, values, out)
            return
        self.parsed += 1
        self.layouts.pop(family, None)
        page = self._parser.parse((type_line + run).decode(), wanted=self.names)
        for name, series in page.samples.items():
            out[name] = self.kept.of(name, tuple(series), list(series.values()))
        layout = self._known(heads)  # the heads the parse just remembered
        if layout is not None:
            self.layouts[family] = _Layout(heads, layout.name, self.kept.families[layout.name][0])

    def _file(self, family: str, layout: _Layout, values: list[float], out: dict[str, Sequence[Sample]]) -> None:
        out[layout.name] = self.kept.of(layout.name, layout.keys, values)
        # The very keys tuple `kept` compares with next time: one identity check, not 60,000.
        self.layouts[family] = _Layout(layout.heads, layout.name, self.kept.families[layout.name][0])

    def _known(self, heads: bytes) -> _Layout | None:
        """The series of lines with these heads, when every head was read in full before on a line
        that was exactly `head value` (so the parser remembered it), all of one wanted name, none twice."""
        lines = heads.decode().split("\n")[:-1]
        remembered = self._parser.heads(self.names)
        found = list(map(remembered.get, lines))
        if not found or None in found:
            return None
        names = {entry[0] for entry in found if entry is not None}
        if len(names) != 1 or "" in names:  # "": a head of a name not wanted
            return None
        keys = tuple(entry[1] for entry in found if entry is not None)
        if len(set(keys)) != len(keys):
            return None  # a series twice: the parse counts its duplicates
        return _Layout(heads, names.pop(), keys)


def _values(run: bytes, count: int) -> list[float] | None:
    """The `count` values of a family's lines, read as the parser reads them; None when a line's
    value is not one (the full parse then says what it is)."""
    tails = _VALUE.findall(run)
    if len(tails) != count:
        return None
    try:
        return list(map(float, tails))
    except ValueError:
        return None


def _type_lines(body: bytes) -> Iterator[int]:
    """Where each `# TYPE` line starts."""
    if body.startswith(_TYPE[1:]):
        yield 0
    at = body.find(_TYPE)
    while at >= 0:
        yield at + 1
        at = body.find(_TYPE, at + 1)
