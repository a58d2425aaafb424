"""Prometheus text-format (0.0.4) and OpenMetrics parsing, fast for the families we use.

`prometheus_client.parser` builds a Metric object per family and a Sample per line; on a
700 KB engine page that costs ~15x Prometheus' whole scrape. Here a page becomes plain
dictionaries, only for the sample names the caller wants, and a line whose text before its value
was read on an earlier scrape (the same bytes, every 15 s: only the values change) is looked up
instead of parsed again: its value is the only thing read.

    parse(text, wanted={"vllm:num_requests_running", ...}) -> Page
    page.samples["vllm:num_requests_running"] == {(("engine", "0"), ("model_name", "m")): 12.0}

`wanted` may also map the names as written on a page to the names the caller reads them under
(`{"vllm_num_requests_running": "vllm:num_requests_running"}`): one engine table then reads
every spelling an exporter may use.

On the families it reads, the fast path gives exactly what a full parse (`wanted=None`) gives, or
refuses the page where the full parse refuses it; a family it skips is not checked.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Collection, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

Labels = tuple[tuple[str, str], ...]
"""A label set as sorted (name, value) pairs: hashable and independent of page order."""

_QUOTED = r'"(?:[^"\\\n]|\\.)*"'
# name="value" (the name may be quoted), or a bare quoted string (a metric name), then an optional ','
_LABEL_PAIR = re.compile(rf'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*|{_QUOTED})[ \t]*(?:=[ \t]*({_QUOTED}))?[ \t]*(,?)')
_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
_ESCAPES = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}
_CACHE_LIMIT = 200_000
_FAMILY_SUFFIXES = ("_total", "_bucket", "_count", "_sum", "_created", "_info", "_gcount", "_gsum")
_BLANKS = " \t"
_NAME_END = re.compile(r"[^ \t{]*")
_HASH_MISSES = 8  # other '#'s passed before `_next_type_line` searches for the whole needle
Wanted = Collection[str] | Mapping[str, str]
"""Sample names to read: a collection, or page spelling -> the name to file the samples under."""


class PageError(ValueError):
    """The page is not valid Prometheus text; like Prometheus, the whole scrape fails."""

    plain = True


_K = TypeVar("_K", bound=Hashable)


class Columns(Mapping[_K, float], Generic[_K]):
    """Series keys beside their values, in page order, where the keys are the very objects of the
    last scrape (a family's label sets from the parser's heads, a bucket plan's keys).

    What reads a family walks keys and values side by side (the extract, the series store, a
    baseline point); a dict of them would hash every key again on every scrape, in the parse and
    again in the extract (docs/performance.md). A lookup by key builds that dict, once.
    """

    __slots__ = ("_by_key", "_keys", "_values")

    def __init__(self, keys: Sequence[_K], values: Sequence[float]) -> None:
        self._keys, self._values = keys, values
        self._by_key: dict[_K, float] | None = None

    def __iter__(self) -> Iterator[_K]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def __getitem__(self, key: _K) -> float:
        if self._by_key is None:
            self._by_key = dict(zip(self._keys, self._values, strict=True))
        return self._by_key[key]

    def values(self) -> Sequence[float]:  # type: ignore[override]  # a sequence, read in order; no view
        return self._values

    def items(self) -> Iterator[tuple[_K, float]]:  # type: ignore[override]
        return zip(self._keys, self._values, strict=True)

    def __repr__(self) -> str:
        return f"Columns({dict(self.items())!r})"

    def __reduce__(self) -> tuple[type[Columns[_K]], tuple[tuple[_K, ...], tuple[float, ...]]]:
        return Columns, (tuple(self._keys), tuple(self._values))


Series = Mapping[Labels, float]
"""One sample name's series on a page: labels -> value (a dict, or `Columns`), in page order."""
_Pending = tuple[list[Labels], list[float]]
"""A sample name's labels and values as a parse reads them, line by line, before `_finish`."""
_KEYS_LIMIT = 4096  # sample names whose last label sets a parser keeps


@dataclass(slots=True)
class Page:
    samples: dict[str, Series] = field(default_factory=dict)
    types: dict[str, str] = field(default_factory=dict)
    duplicates: int = 0
    openmetrics: bool = False

    def series(self, name: str) -> Series:
        return self.samples.get(name, {})


_SKIP: tuple[str, Labels] = ("", ())
"""A line head whose sample name the caller does not want (its name was checked)."""
Heads = dict[str, tuple[str, Labels]]
# The heads read under each `wanted` (kept with it: ids are reused), shared by every parser: what a
# head means depends on the names wanted, not on the target, and the targets of one engine and
# model write the same heads, so a fleet's parsers keep one copy of them.
_SHARED_HEADS: dict[int, tuple[Wanted | None, Heads]] = {}
_SHARED_LIMIT = 64  # `wanted` objects; the engine tables' are a handful


def _shared_heads(wanted: Wanted | None) -> Heads:
    entry = _SHARED_HEADS.get(id(wanted))
    if entry is None or entry[0] is not wanted:
        if len(_SHARED_HEADS) >= _SHARED_LIMIT:
            _SHARED_HEADS.clear()
        entry = _SHARED_HEADS[id(wanted)] = (wanted, {})
    return entry[1]


def family_names(names: Collection[str]) -> frozenset[str]:
    """The families whose blocks may hold these sample names: each name, and each name without a
    counter's, histogram's or summary's suffix (`x_total` is written under `# TYPE x counter`)."""
    families = set(names)
    for name in names:
        for suffix in _FAMILY_SUFFIXES:
            if name.endswith(suffix):
                families.add(name.removesuffix(suffix))
    return frozenset(families)


class Parser:
    """A parser with a cache of line heads; keep one per target so the cache stays warm.

    A line's head is its text before the last space: `name{labels}` when the line is
    `name{labels} value`. A head is remembered, with the name the sample is filed under and its
    labels, only after a full read of a line that was exactly `head value`; a later line with the
    same head and a number after it is that same sample with a new value. Anything else (a
    timestamp, an exemplar, a value that is not a number) takes the full read, which raises
    where it must. Remembered heads belong to one `wanted`, and every parser shares them."""

    def __init__(self, shared: bool = True) -> None:
        self._labels_cache: dict[str, tuple[str | None, Labels]] = {}
        self._shared = shared  # False: heads of its own, from cold (`parse`, the tests' references)
        self._heads: Heads = {}
        self._wanted_cache: dict[int, tuple[Wanted, dict[str, str], frozenset[str]]] = {}
        self._valid_names: set[str] = set()
        self._family_patterns: dict[str, re.Pattern[str]] = {}
        # Per sample name, its label sets on the last page (shared heads' objects) and how many of
        # them were duplicates: the same sequence again is the same series, no key hashed.
        self._keys: dict[str, tuple[tuple[Labels, ...], int]] = {}

    def heads(self, wanted: Wanted | None) -> Mapping[str, tuple[str, Labels]]:
        """The line heads remembered under `wanted`: each was read in full on a line that was
        exactly `head value`."""
        return _shared_heads(wanted) if self._shared else self._heads

    def parse(self, text: str, wanted: Wanted | None = None, openmetrics: bool = False) -> Page:
        if len(self._labels_cache) > _CACHE_LIMIT:
            self._labels_cache.clear()
            self._valid_names.clear()
        if self._shared:
            self._heads = _shared_heads(wanted)
        if len(self._heads) > _CACHE_LIMIT:
            self._heads.clear()
        check_text(text)
        page = Page(openmetrics=openmetrics or _ends_with_eof(text))
        if text and not page.openmetrics and not text.endswith("\n"):
            # The format ends every line, the last one too, with a line feed: a page cut off
            # mid-line ("...} 12" of "...} 123") is detectable only this way.
            raise PageError("truncated: the last line does not end with a line feed")
        # The body ends where '# EOF' starts, so that skipping the last family never skips it.
        body_end = _eof_line(text) if page.openmetrics else len(text)
        aliases = None if wanted is None else self._aliases(wanted)
        saw_eof = False
        pending: dict[str, _Pending] = {}
        for start, end in self._spans(text, body_end, wanted, page):
            saw_eof = self._lines(text, start, end, page, pending, aliases, saw_eof)
        saw_eof = self._lines(text, body_end, len(text), page, pending, aliases, saw_eof)
        self._finish(page, pending)
        if page.openmetrics and not saw_eof:
            raise PageError("OpenMetrics page without '# EOF': truncated")
        return page

    def _aliases(self, wanted: Wanted) -> dict[str, str]:
        return self._wanted(wanted)[1]

    def _wanted(self, wanted: Wanted) -> tuple[Wanted, dict[str, str], frozenset[str]]:
        """(wanted, page name -> filed name, family names of the wanted samples), cached per object."""
        cached = self._wanted_cache.get(id(wanted))
        if cached is None or cached[0] is not wanted:
            aliases = dict(wanted) if isinstance(wanted, Mapping) else {name: name for name in wanted}
            cached = (wanted, aliases, family_names(aliases))
            self._wanted_cache[id(wanted)] = cached
        return cached

    def _spans(self, text: str, body_end: int, wanted: Wanted | None, page: Page) -> Iterator[tuple[int, int]]:
        """The parts of the page worth reading: whole families nobody wants are skipped.

        A family's block runs from its `# TYPE` line to the next one. It is skipped only when
        every other line in it is a comment, blank, or a sample of that family (its name, or its
        name with a histogram/summary/counter suffix, then a blank or '{'), so an untyped sample
        of a wanted family hiding in another family's block is still read.
        """
        if wanted is None:
            yield 0, body_end
            return
        families = self._wanted(wanted)[2]
        pending = 0
        block = 0 if text.startswith("# TYPE ") else _next_type_line(text, 0, body_end)
        while block >= 0:
            line_end = text.find("\n", block, body_end)
            line_end = body_end if line_end < 0 else line_end
            declared = text[block:line_end].split()
            family = declared[2] if len(declared) >= 3 else ""
            following = _next_type_line(text, line_end, body_end)
            block_end = body_end if following < 0 else following
            if family and family not in families and self._only_family_lines(text, line_end, block_end, family):
                yield pending, block
                Parser._comment(text[block:line_end], page)
                pending = block_end
            block = following
        yield pending, body_end

    def _only_family_lines(self, text: str, line_end: int, block_end: int, family: str) -> bool:
        # One C-speed search for a line that is not ours; text[line_end] is the '\n' before the
        # block's second line, and the block's own final '\n' is left out.
        pattern = self._family_patterns.get(family)
        if pattern is None:
            suffixes = "|".join(_FAMILY_SUFFIXES)
            pattern = re.compile(rf"\n(?![ \t]*(?:#|\n|\Z)|{re.escape(family)}(?:{suffixes})?[ \t{{])")
            self._family_patterns[family] = pattern
        stop = block_end - 1 if block_end > line_end and text[block_end - 1] == "\n" else block_end
        return pattern.search(text, line_end, stop) is None

    def _lines(
        self, text: str, start: int, end: int, page: Page, pending: dict[str, _Pending],
        aliases: dict[str, str] | None, saw_eof: bool,
    ) -> bool:
        if start >= end:
            return saw_eof
        heads = self._heads
        ascii_text = text.isascii()  # O(1) for a str; then no tail needs its own check
        filed: str | None = None  # the name `keys` and `values` are of (a family's lines come together)
        keys: list[Labels] = []
        values: list[float] = []
        for index, line in enumerate(text[start:end].split("\n")):
            if saw_eof:
                if line.strip():
                    raise PageError(f"line {_line_number(text, start, index)}: content after '# EOF'")
                continue
            head, _, tail = line.rpartition(" ")
            known = heads.get(head)
            if known is not None:
                if known is _SKIP:
                    continue
                if "_" not in tail and (ascii_text or tail.isascii()):  # else Go's reading, in the full read
                    try:
                        value = float(tail)
                    except ValueError:
                        pass  # not a number: the full read below names what is wrong
                    else:
                        name, labels = known
                        if name is not filed:
                            found = pending.get(name)
                            if found is None:
                                found = pending[name] = ([], [])
                            (keys, values), filed = found, name
                        keys.append(labels)  # duplicates are counted once the page is read (`_finish`)
                        values.append(value)
                        continue
            if not line or line.isspace():
                continue
            if line[0] == "#":
                saw_eof = self._comment(line, page)
                continue
            try:
                self._sample(line, pending, aliases)
            except (ValueError, IndexError) as exc:
                raise PageError(f"line {_line_number(text, start, index)}: {exc}: {_snippet(line)}") from None
        return saw_eof

    @staticmethod
    def _comment(line: str, page: Page) -> bool:
        parts = line.split(None, 3)
        if len(parts) >= 2 and parts[0] == "#" and parts[1] == "EOF":
            return True
        if len(parts) >= 4 and parts[0] == "#" and parts[1] == "TYPE":
            page.types[parts[2]] = parts[3].strip()
        return False

    def _sample(self, line: str, pending: dict[str, _Pending], aliases: dict[str, str] | None) -> None:
        # name{labels} value [timestamp] [# exemplar]; blanks are spaces or tabs; the name may
        # instead be quoted inside the braces ({"name", a="1"}, Prometheus 3's UTF-8 syntax).
        if line[0] == "{":
            name, labels, rest = self._quoted_name_sample(line)
        else:
            cut = _name_end(line)
            name = line[:cut]
            after = cut
            while after < len(line) and line[after] in _BLANKS:
                after += 1
            if aliases is not None and name not in aliases:
                self._check_name(name)  # not ours, but a broken line still fails the page
                self._remember(line, None)
                return
            self._check_name(name)
            if after < len(line) and line[after] == "{":
                quoted, labels, rest = self._labels_and_rest(line, after)
                if quoted is not None:
                    raise ValueError("a metric name both before and inside the braces")
            else:
                labels, rest = (), line[after:]
        if aliases is not None:
            if name not in aliases:
                self._remember(line, None)
                return
            name = aliases[name]
        value = _value(rest)
        if rest.split() == [line.rpartition(" ")[2]]:  # `head value`, nothing after the value
            self._remember(line, (name, labels))
        found = pending.get(name)
        if found is None:
            found = pending[name] = ([], [])
        found[0].append(labels)
        found[1].append(value)

    def _finish(self, page: Page, pending: dict[str, _Pending]) -> None:
        """Each sample name's series from its lines: the label sets of the last page again (the
        same objects, one comparison in C) are that page's series with these values; otherwise a
        dict, the first of duplicate series kept, as a Prometheus scrape reports them."""
        known = self._keys
        if len(known) > _KEYS_LIMIT:
            known.clear()
        for name, (keys, values) in pending.items():
            read = tuple(keys)
            last = known.get(name)
            if last is not None and not last[1] and last[0] == read:
                page.samples[name] = Columns(last[0], values)
                continue
            series: dict[Labels, float] = {}
            for labels, value in zip(read, values, strict=True):
                series.setdefault(labels, value)
            duplicates = len(read) - len(series)
            page.duplicates += duplicates
            known[name] = (read, duplicates)
            page.samples[name] = series

    def _remember(self, line: str, sample: tuple[str, Labels] | None) -> None:
        head, space, _ = line.rpartition(" ")
        if space and head:
            # One name object per family, so the fast path sees a family's next line by identity.
            self._heads[head] = _SKIP if sample is None else (sys.intern(sample[0]), sample[1])

    def _quoted_name_sample(self, line: str) -> tuple[str, Labels, str]:
        quoted, labels, rest = self._labels_and_rest(line, 0)
        if quoted is None:
            raise ValueError("no metric name")
        return quoted, labels, rest

    def _check_name(self, name: str) -> None:
        if name not in self._valid_names:
            if not _METRIC_NAME.match(name):
                raise ValueError(f"bad metric name {name!r}")
            self._valid_names.add(name)

    def _labels_and_rest(self, line: str, brace: int) -> tuple[str | None, Labels, str]:
        """(a quoted metric name inside the braces or None, the labels, the text after '}')."""
        # Fast path: a sample line has no '}' after its label block unless it carries an
        # OpenMetrics exemplar (" # {...}"), so the last '}' closes the labels.
        if " # " not in line:
            end = line.rfind("}")
            if end < brace:
                raise ValueError("unterminated label block")
            block = line[brace : end + 1]
            cached = self._labels_cache.get(block)
            if cached is None:
                quoted, labels, consumed = _parse_label_block(line, brace)
                if consumed != end + 1:
                    raise ValueError("text after the label block")
                cached = self._labels_cache[block] = (quoted, labels)
            return cached[0], cached[1], line[end + 1 :]
        quoted, labels, consumed = _parse_label_block(line, brace)
        return quoted, labels, line[consumed:]


def _name_end(line: str) -> int:
    """Index of the first blank or '{' (the end of an unquoted metric name)."""
    return _NAME_END.match(line).end()  # type: ignore[union-attr]  # [^...]* always matches


def _value(rest: str) -> float:
    """The sample value of `value [timestamp] [# exemplar]`, read as Go's ParseFloat reads it."""
    exemplar = rest.find(" # ")
    fields = (rest if exemplar < 0 else rest[:exemplar]).split()
    if not fields:
        raise ValueError("sample without a value")
    if len(fields) > 2:
        raise ValueError("text after the timestamp")
    text = fields[0]
    if "_" not in text and text.isascii():
        try:
            return float(text)  # the common case, without go_float's call
        except ValueError:
            pass
    return go_float(text)


def go_float(text: str) -> float:
    """A number as Go's strconv.ParseFloat reads it (Prometheus' sample values and `le` bounds)."""
    if "_" in text or not text.isascii():
        raise ValueError(f"bad value {text!r}")  # Python's float() reads "1_2" as 12; Go does not
    try:
        return float(text)
    except ValueError:
        if text.lstrip("+-")[:2].lower() == "0x":
            try:
                return float.fromhex(text)  # Go reads hexadecimal floats
            except ValueError:
                pass
        raise ValueError(f"bad value {text!r}") from None


def _parse_label_block(line: str, brace: int) -> tuple[str | None, Labels, int]:
    """Parse `{a="1",b="2"}` starting at `brace`: (quoted metric name, labels, index after '}')."""
    pos = brace + 1
    quoted: str | None = None
    pairs: list[tuple[str, str]] = []
    while True:
        while pos < len(line) and line[pos] in _BLANKS:
            pos += 1
        if pos < len(line) and line[pos] == "}":
            break
        match = _LABEL_PAIR.match(line, pos)
        if match is None:
            raise ValueError(f"bad label at column {pos + 1}")
        key, value = match.group(1), match.group(2)
        if key.startswith('"'):
            key = _unescape(key[1:-1])
        if value is None:  # a bare quoted string: the metric name, once, where no name came before
            if not match.group(1).startswith('"') or quoted is not None or pairs:
                raise ValueError(f"bad label at column {pos + 1}")
            quoted = key
        else:
            pairs.append((key, _unescape(value[1:-1])))
        pos = match.end()
        if not match.group(3):
            while pos < len(line) and line[pos] in _BLANKS:
                pos += 1
            if pos >= len(line) or line[pos] != "}":
                raise ValueError("unterminated label block")
            break
    names = [name for name, _ in pairs]
    if len(set(names)) != len(names):
        raise ValueError("repeated label name")
    return quoted, tuple(sorted(pairs)), pos + 1


def _unescape(value: str) -> str:
    if "\\" not in value:
        return value
    return re.sub(r"\\[\\\"n]", lambda m: _ESCAPES[m.group(0)], value)


def check_text(text: str) -> None:
    """Reject what is plainly not an exposition (a login page, an error page) before any parsing."""
    first = text.lstrip()[:1]
    if first == "<":
        raise PageError("not Prometheus text: the body looks like HTML")
    if first in ("{", "[") and _is_json(text):
        raise PageError("not Prometheus text: the body is JSON (an API's answer, not a metrics page); "
                        "the engines serve their page at /metrics")


def _is_json(text: str) -> bool:
    # Checked in full: a UTF-8 exposition may start with a quoted name in braces ({"a.b"} 1).
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def _next_type_line(text: str, position: int, end: int) -> int:
    """Where the first `# TYPE ` line after the line feed at or after `position` starts; -1: none.

    Looked for by its '#' (a memchr in CPython: ~35 us over a 342 KB page, where the 8-character
    needle's search takes ~155 us), then checked; a page with many other '#'s (in HELP text, in
    label values) falls back to the needle's search after a few of them.
    """
    at = text.find("#", position + 1, end)
    for _ in range(_HASH_MISSES):
        if at < 0:
            return -1
        if text[at - 1] == "\n" and text.startswith("# TYPE ", at, end):
            return at
        at = text.find("#", at + 1, end)
    if at < 0:
        return -1
    found = text.find("\n# TYPE ", at - 1, end)
    return found + 1 if found >= 0 else -1


def _eof_line(text: str) -> int:
    """Where the final '# EOF' line starts (the page's length when there is none)."""
    stripped = text.rstrip()
    if not stripped.endswith("# EOF"):
        return len(text)
    start = stripped.rfind("\n", 0, len(stripped) - 5) + 1
    return start if stripped[start:].split() == ["#", "EOF"] else len(text)


def _line_number(text: str, start: int, index: int) -> int:
    return text.count("\n", 0, start) + index + 1


def _ends_with_eof(text: str) -> bool:
    return text.rstrip().endswith("# EOF")


def _snippet(line: str) -> str:
    return repr(line[:80] + ("…" if len(line) > 80 else ""))


def parse(text: str, wanted: Wanted | None = None, openmetrics: bool = False) -> Page:
    """Parse a page once, without a warm cache (tests, one-off reads)."""
    return Parser(shared=False).parse(text, wanted, openmetrics)


def labels_dict(labels: Labels) -> dict[str, str]:
    return dict(labels)
