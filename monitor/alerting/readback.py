"""The rules' read-back of the /metrics page this process rendered, tick after tick.

`infermon serve` renders /metrics once per publish tick; the embedded rules then read the samples
they need back from that page, so they see exactly what a Prometheus scrape of it gets. Parsing
and matching a large fleet's page in full every tick is most of an evaluation, yet tick after
tick the series are the same and only their values move (docs/history/measurements-2026.md has the numbers).

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
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from monitor.promtext import Labels, Parser, family_names
from monitor.rulefiles.promql import Matcher, Sample, Series

# A line's last blank-separated field (its value, on a line that is `head value`), and the same
# field when it can be a value read by `float` as the parser reads it (no '_', no blank).
_TAIL = re.compile(rb" [^ \n]*$", re.MULTILINE)
_VALUE = re.compile(rb" ([^ \n_]+)$", re.MULTILINE)
# A family's lines are read this many bytes at a time, each piece one call of `re` in C that holds
# the GIL: a large family read in one call held it long, and the event loop (/healthz) waited
# that long; a slice holds it briefly (docs/performance.md).
SLICE = 1 << 18

Matches = dict[tuple[Matcher, ...], list[int]]


@dataclass
class KeptLabels:
    """The label dicts a reader of page after page hands the rules, kept from page to page."""

    series: dict[tuple[str, Labels], Mapping[str, str]] = field(default_factory=dict)  # by (name, labels)
    # name -> the page's series of that name, in page order, their dicts and the selectors' matches
    # on them: the same page layout tick after tick (on a large fleet, every series the rules
    # read) is one comparison of two tuples, in C, instead of a hash of every label set.
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

    def read(self, body: bytes | Sequence[bytes]) -> dict[str, Sequence[Sample]]:
        """The samples of the page `body`: one bytes object, or the render's pieces in order
        (`Exposition.chunks`; a family cut between two pieces is joined, the page never)."""
        if len(self.kept) > self.limit:
            self.kept.clear()
            self.layouts.clear()
        chunks = (body,) if isinstance(body, bytes) else body
        out: dict[str, Sequence[Sample]] = {}
        seen: set[str] = set()
        for family, type_line, run in _families(chunks, self.families):
            if family in seen:  # a family twice: not a page this process renders; read all of it
                return dict(exposition_samples(b"".join(chunks), self.names, self._parser, self.kept))
            seen.add(family)
            self._run(family, type_line, run, out)
        return out

    def _run(self, family: str, type_line: bytes, run: bytes, out: dict[str, Sequence[Sample]]) -> None:
        """Read one family's sample lines (`run`) into `out`."""
        if not run:
            return  # a family without samples (its layout kept for when they are back)
        heads = b"".join([_TAIL.sub(b"", piece) for piece in _slices(run)])
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
    values: list[float] = []
    try:
        for piece in _slices(run):
            values += map(float, _VALUE.findall(piece))
    except ValueError:
        return None
    return values if len(values) == count else None


def _slices(run: bytes) -> Iterator[memoryview]:
    """`run` in pieces of about `SLICE` bytes, each a whole number of lines (the GIL is free
    between them)."""
    view, start, size = memoryview(run), 0, len(run)
    while start < size:
        end = run.find(b"\n", start + SLICE - 1)
        end = size if end < 0 else end + 1
        yield view[start:end]
        start = end


def _families(chunks: Iterable[bytes], wanted: Collection[str]) -> Iterator[tuple[str, bytes, bytes]]:
    """Each `wanted` family of the page: its name, its `# TYPE` line (with its line end) and the lines
    after it up to the next comment line (its samples), across the page's pieces in order."""
    current: tuple[str, bytes, list[bytes]] | None = None  # the family being read, its lines so far
    for chunk in _whole_lines(chunks):
        at, size = 0, len(chunk)
        while at < size:
            if current is not None:  # its samples run to the next line that starts with '#'
                if chunk.startswith(b"#", at):
                    end = at
                else:
                    hit = chunk.find(b"\n#", at)
                    end = size if hit < 0 else hit + 1
                if end > at:
                    current[2].append(chunk[at:end])
                if end == size:
                    break  # it goes on in the next piece
                yield current[0], current[1], b"".join(current[2])  # one piece: itself, not a copy
                current, at = None, end
            # The next `# TYPE` line (a family not wanted is passed over to it: no search for its end).
            if chunk.startswith(b"# TYPE ", at):
                start = at
            else:
                hit = chunk.find(b"\n# TYPE ", at)
                if hit < 0:
                    break
                start = hit + 1
            line_end = chunk.find(b"\n", start)
            line_end = size if line_end < 0 else line_end + 1
            type_line = chunk[start:line_end]
            declared = type_line.split()
            family = declared[2].decode() if len(declared) >= 3 else ""
            if family in wanted:
                current = (family, type_line, [])
            at = line_end
    if current is not None:
        yield current[0], current[1], b"".join(current[2])


def _whole_lines(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """The pieces, a piece that ends within a line joined with the next (the renders' never do)."""
    carry: list[bytes] = []
    for chunk in chunks:
        carry.append(chunk)
        if chunk.endswith(b"\n"):
            yield b"".join(carry)  # one piece: itself, not a copy
            carry = []
    if carry:
        yield b"".join(carry)
