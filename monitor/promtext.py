"""Prometheus text-format (0.0.4) and OpenMetrics parsing, fast for the families we use.

`prometheus_client.parser` builds a Metric object per family and a Sample per line; on a
700 KB engine page that costs ~15x Prometheus' whole scrape. Here a page becomes plain
dictionaries, only for the sample names the caller wants, and a label block seen on the
previous scrape (the same bytes, every 15 s) is looked up instead of parsed again.

    parse(text, wanted={"vllm:num_requests_running", ...}) -> Page
    page.samples["vllm:num_requests_running"] == {(("engine", "0"), ("model_name", "m")): 12.0}
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field

Labels = tuple[tuple[str, str], ...]
"""A label set as sorted (name, value) pairs: hashable and independent of page order."""

_LABEL_PAIR = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\\n]|\\.)*)"\s*(,?)')
_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
_ESCAPES = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}
_CACHE_LIMIT = 200_000
_FAMILY_SUFFIXES = ("_total", "_bucket", "_count", "_sum", "_created", "_info")


class PageError(ValueError):
    """The page is not valid Prometheus text; like Prometheus, the whole scrape fails."""

    plain = True


@dataclass(slots=True)
class Page:
    samples: dict[str, dict[Labels, float]] = field(default_factory=dict)
    types: dict[str, str] = field(default_factory=dict)
    duplicates: int = 0
    openmetrics: bool = False

    def series(self, name: str) -> dict[Labels, float]:
        return self.samples.get(name, {})


class Parser:
    """A parser with a label-block cache; keep one per target so the cache stays warm."""

    def __init__(self) -> None:
        self._labels_cache: dict[str, Labels] = {}
        self._families_cache: dict[int, tuple[Collection[str], frozenset[str]]] = {}

    def parse(
        self, text: str, wanted: Collection[str] | None = None, openmetrics: bool = False
    ) -> Page:
        if len(self._labels_cache) > _CACHE_LIMIT:
            self._labels_cache.clear()
        check_text(text)
        page = Page(openmetrics=openmetrics or _ends_with_eof(text))
        if text and not page.openmetrics and not text.endswith("\n"):
            # The format ends every line, the last one too, with a line feed: a page cut off
            # mid-line ("...} 12" of "...} 123") is detectable only this way.
            raise PageError("truncated: the last line does not end with a line feed")
        saw_eof = False
        for start, end in self._spans(text, wanted, page):
            saw_eof = self._lines(text, start, end, page, wanted, saw_eof)
        if page.openmetrics and not saw_eof:
            raise PageError("OpenMetrics page without '# EOF': truncated")
        return page

    def _spans(self, text: str, wanted: Collection[str] | None, page: Page) -> Iterator[tuple[int, int]]:
        """The parts of the page worth reading: whole families nobody wants are skipped.

        A family's block runs from its `# TYPE` line to the next one. It is skipped only when
        every line in it is a comment or starts with the family's name, so an untyped sample
        of a wanted family hiding in another family's block is still read.
        """
        if wanted is None:
            yield 0, len(text)
            return
        families = self._wanted_families(wanted)
        pending = 0
        block = 0 if text.startswith("# TYPE ") else _next_type_line(text, 0)
        while block >= 0:
            line_end = text.find("\n", block)
            line_end = len(text) if line_end < 0 else line_end
            family = text[block + 7 : line_end].split(" ", 1)[0]
            following = _next_type_line(text, line_end)
            block_end = len(text) if following < 0 else following
            if family not in families and _only_family_lines(text, line_end + 1, block_end, family):
                yield pending, block
                Parser._comment(text[block:line_end], page)
                pending = block_end
            block = following
        yield pending, len(text)

    def _wanted_families(self, wanted: Collection[str]) -> frozenset[str]:
        key = id(wanted)
        cached = self._families_cache.get(key)
        if cached is None or cached[0] is not wanted:
            names = set(wanted)
            for name in wanted:
                for suffix in _FAMILY_SUFFIXES:
                    if name.endswith(suffix):
                        names.add(name.removesuffix(suffix))
            cached = (wanted, frozenset(names))
            self._families_cache[key] = cached
        return cached[1]

    def _lines(
        self, text: str, start: int, end: int, page: Page, wanted: Collection[str] | None, saw_eof: bool
    ) -> bool:
        for index, line in enumerate(text[start:end].split("\n")):
            if saw_eof:
                if line.strip():
                    raise PageError(f"line {_line_number(text, start, index)}: content after '# EOF'")
                continue
            if not line or line.isspace():
                continue
            if line[0] == "#":
                saw_eof = self._comment(line, page)
                continue
            try:
                self._sample(line, page, wanted)
            except (ValueError, IndexError) as exc:
                raise PageError(f"line {_line_number(text, start, index)}: {exc}: {_snippet(line)}") from None
        return saw_eof

    @staticmethod
    def _comment(line: str, page: Page) -> bool:
        parts = line.split(None, 3)
        if len(parts) >= 2 and parts[1] == "EOF":
            return True
        if len(parts) >= 4 and parts[1] == "TYPE":
            page.types[parts[2]] = parts[3].strip()
        return False

    def _sample(self, line: str, page: Page, wanted: Collection[str] | None) -> None:
        brace = line.find("{")
        if brace > 0 and line.endswith(" # ", 0, brace):
            brace = -1  # that '{' opens an OpenMetrics exemplar: the sample itself has no labels
        if brace < 0:
            name, _, rest = line.partition(" ")
            if wanted is not None and name not in wanted:
                return
            labels: Labels = ()
        else:
            name = line[:brace]
            if wanted is not None and name not in wanted:
                return
            labels, rest = self._labels_and_rest(line, brace)
        if wanted is None and not _METRIC_NAME.match(name):  # wanted names are valid by construction
            raise ValueError(f"bad metric name {name!r}")
        fields = rest.split()
        if not fields:
            raise ValueError("sample without a value")
        value = float(fields[0])
        series = page.samples.setdefault(name, {})
        if labels in series:
            page.duplicates += 1  # first one wins, like a Prometheus scrape reports it
            return
        series[labels] = value

    def _labels_and_rest(self, line: str, brace: int) -> tuple[Labels, str]:
        # Fast path: a sample line has no '}' after its label block unless it carries an
        # OpenMetrics exemplar (" # {...}"), so the last '}' closes the labels.
        if " # " not in line:
            end = line.rfind("}")
            if end < brace:
                raise ValueError("unterminated label block")
            block = line[brace : end + 1]
            cached = self._labels_cache.get(block)
            if cached is None:
                cached, consumed = _parse_label_block(line, brace)
                if consumed != end + 1:
                    raise ValueError("text after the label block")
                self._labels_cache[block] = cached
            return cached, line[end + 1 :]
        labels, consumed = _parse_label_block(line, brace)
        rest = line[consumed:]
        exemplar = rest.find(" # ")
        return labels, rest if exemplar < 0 else rest[:exemplar]


def _parse_label_block(line: str, brace: int) -> tuple[Labels, int]:
    """Parse `{a="1",b="2"}` starting at `brace`; returns the labels and the index after '}'."""
    pos = brace + 1
    pairs: list[tuple[str, str]] = []
    while True:
        while pos < len(line) and line[pos] == " ":
            pos += 1
        if pos < len(line) and line[pos] == "}":
            break
        match = _LABEL_PAIR.match(line, pos)
        if match is None:
            raise ValueError(f"bad label at column {pos + 1}")
        pairs.append((match.group(1), _unescape(match.group(2))))
        pos = match.end()
        if not match.group(3):
            while pos < len(line) and line[pos] == " ":
                pos += 1
            if pos >= len(line) or line[pos] != "}":
                raise ValueError("unterminated label block")
            break
    names = [name for name, _ in pairs]
    if len(set(names)) != len(names):
        raise ValueError("repeated label name")
    return tuple(sorted(pairs)), pos + 1


def _unescape(value: str) -> str:
    if "\\" not in value:
        return value
    return re.sub(r"\\[\\\"n]", lambda m: _ESCAPES[m.group(0)], value)


def check_text(text: str) -> None:
    """Reject what is plainly not an exposition (a login page, an error page) before any parsing."""
    if text.lstrip()[:1] == "<":
        raise PageError("not Prometheus text: the body looks like HTML")


def _next_type_line(text: str, position: int) -> int:
    found = text.find("\n# TYPE ", position)
    return found + 1 if found >= 0 else -1


def _only_family_lines(text: str, start: int, end: int, family: str) -> bool:
    # Count, without splitting, the lines of text[start:end] that start with the family's
    # name, with '#', or are empty; the block can be skipped when that is all of them.
    lines = text.count("\n", start, end) + (0 if text.endswith("\n", start, end) or start >= end else 1)
    body = "\n" + text[start:end]
    accounted = body.count("\n" + family) + body.count("\n#") + body.count("\n\n")
    return accounted >= lines


def _line_number(text: str, start: int, index: int) -> int:
    return text.count("\n", 0, start) + index + 1


def _ends_with_eof(text: str) -> bool:
    return text.rstrip().endswith("# EOF")


def _snippet(line: str) -> str:
    return repr(line[:80] + ("…" if len(line) > 80 else ""))


def parse(text: str, wanted: Collection[str] | None = None, openmetrics: bool = False) -> Page:
    """Parse a page once, without a warm cache (tests, one-off reads)."""
    return Parser().parse(text, wanted, openmetrics)


def labels_dict(labels: Labels) -> dict[str, str]:
    return dict(labels)
