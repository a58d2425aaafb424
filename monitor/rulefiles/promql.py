"""The rule language: PromQL, parsed by `promql-parser` and evaluated here, on a page or over a history.

Every rule expression, instant or trend, is parsed by the `promql-parser` package (Rust, the grammar
of Prometheus' own parser) into one tree and evaluated by that tree's own nodes, with Prometheus'
semantics (promql/engine.go and functions.go, 2.x), on one of two sources:

- a page, `Samples`: metric name -> its series, as the readers of /metrics pages keep them (an
  instant rule, every tick; `Series` keeps each selector's matches while the page's series stay);
- a `HistoryAt`: a `History` (every stored point of a metric's series, oldest first) read at one
  instant. An instant selector takes each series' newest point in [t - 5m, t] (`offset` shifts t);
  a range selector `v[r] offset o` the points in [t - o - r, t - o] (2.x: both ends in; Prometheus
  3 leaves the left end out, which moves nothing on a history of 5-minute points evaluated off its
  grid).

An expression that reads the past (a range selector or `offset`) reads the history
(`Expr.reads_history`); on a page its past is empty, and so is what it selects there.

What is evaluated:

- selectors with `=`, `!=`, `=~`, `!~` matchers (regexes anchored, as in PromQL);
- `avg_, sum_, min_, max_, count_, last_, stddev_over_time`, `quantile_over_time(φ, v)`,
  `deriv(v)`, `predict_linear(v, s)` (the least-squares line through the points, read at the
  evaluation time plus s), `changes(v)`, `abs`, `clamp_min`, `clamp_max`, `ln`, `exp`; a function
  drops the metric name (but `last_over_time`);
- `+ - * / % ^` and comparisons between a vector and a number or two vectors matched one to one
  (on every label but the name, or `on(...)` / `ignoring(...)`): arithmetic drops the name, a
  comparison filters and keeps the left sample (a number on the left keeps the vector's sample);
- `and`, `or`, `unless`, matching on every label but `__name__`, or on the `on(...)` list, or on
  every label but `__name__` and the `ignoring(...)` list; `or` keeps all of the left side and the
  right-side samples whose match is not on the left; `or` binds looser than `and`/`unless`.

Anything else (aggregations, subqueries, `rate()` and the other functions, `group_left`, `bool`,
`@`) raises `OutsideSubset` when the rule is loaded, saying what was found: Prometheus evaluates
it, we do not pretend to. Data that cannot be evaluated (two right-hand series for one left-hand
one) raises `TrendError`, the rule's evaluation error. An expression nested past `MAX_DEPTH`
raises `TooDeep` before the parser sees it (the Rust parser's stack is the process').
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Protocol, overload

import numpy as np
import promql_parser

Labels = Mapping[str, str]
Sample = tuple[Labels, float]
Samples = Mapping[str, Sequence[Sample]]  # metric name -> its series (labels include __name__)
Vector = list[tuple[Labels, float]]

LOOKBACK = 300.0  # Prometheus' default lookback delta for an instant selector

# The one table of comparison operators (the rule files' thresholds and the causes read it too).
COMPARISONS: dict[str, Callable[[float, float], bool]] = {
    "==": operator.eq, "!=": operator.ne, ">": operator.gt, "<": operator.lt, ">=": operator.ge, "<=": operator.le,
}
SWAPPED = {"==": "==", "!=": "!=", ">": "<", "<": ">", ">=": "<=", "<=": ">="}  # 1 < x is x > 1


def _divide(a: float, b: float) -> float:
    if b == 0:
        return math.nan if a == 0 or math.isnan(a) else math.copysign(math.inf, a) * math.copysign(1.0, b)
    return a / b


def _power(a: float, b: float) -> float:
    try:
        return float(a ** b)
    except (OverflowError, ZeroDivisionError):
        return math.inf


ARITHMETIC: dict[str, Callable[[float, float], float]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": _divide,
    "%": lambda a, b: math.fmod(a, b) if b != 0 else math.nan, "^": _power,
}
SET_OPS = ("and", "or", "unless")


class OutsideSubset(ValueError):
    """The expression is valid PromQL, or not, but not what the embedded evaluator evaluates."""


class TooDeep(ValueError):
    """An expression no rule file needs: parsing or evaluating it would exhaust the stack."""


class TrendError(ValueError):
    """An expression that cannot be evaluated on this data (as Prometheus' own evaluation errors)."""


MAX_DEPTH = 100  # operators and parentheses nested in one expression (the shipped rules use at most 30)
MAX_OPERATORS = 1000  # in one expression (the shipped rules use at most 150): the parser's time grows as its square
TOO_DEEP = f"expression nested too deep (at most {MAX_DEPTH} levels of operators and parentheses)"


# --- the sources ------------------------------------------------------------------------------

class Series(Sequence[Sample]):
    """One metric's samples as a reader of page after page keeps them: the label dicts (the same
    list while the page's series stay as they were) beside this page's values. A selector keeps
    which series it matched in `matches`, which lives as long as that list: on a large fleet the
    rules' matchers ran on every series every tick, with the same answer."""

    __slots__ = ("labels", "matches", "values")

    def __init__(self, labels: Sequence[Labels], values: Sequence[float],
                 matches: dict[tuple[Matcher, ...], list[int]]) -> None:
        if len(labels) != len(values):
            raise ValueError(f"{len(labels)} label sets for {len(values)} values")
        self.labels, self.values, self.matches = labels, values, matches

    def __len__(self) -> int:
        return len(self.values)

    @overload
    def __getitem__(self, index: int) -> Sample: ...
    @overload
    def __getitem__(self, index: slice) -> list[Sample]: ...
    def __getitem__(self, index: int | slice) -> Sample | list[Sample]:
        if isinstance(index, slice):
            return list(zip(self.labels[index], self.values[index], strict=True))
        return self.labels[index], self.values[index]

    def __iter__(self) -> Iterator[Sample]:
        return zip(self.labels, self.values, strict=True)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, str):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # a sequence that compares by content

    def __repr__(self) -> str:
        return f"Series({list(self)!r})"


@dataclass(frozen=True)
class Track:
    """One series' points, oldest first: `ts` in seconds and `values`, as numpy float arrays."""

    labels: Labels  # with __name__
    ts: np.ndarray
    values: np.ndarray


class History(Protocol):
    def tracks(self, name: str) -> Sequence[Track]:
        """Every series of the metric `name` with its points."""
        ...


class HistoryAt(Mapping[str, Sequence[Sample]]):
    """A history read at the instant `ts`: as a mapping, the instant samples there (each series'
    newest point in the lookback), so whatever reads a page reads it too."""

    def __init__(self, history: History, ts: float) -> None:
        self.history, self.ts = history, ts
        # A range function's vector at this instant, by its node: the trend rules share their
        # levels (the same `avg_over_time(x[6h] offset 1w)` in many rules), each read once.
        self.cache: dict[Call, Vector] = {}

    def __getitem__(self, name: str) -> Sequence[Sample]:
        return [(track.labels, value) for track in self.history.tracks(name)
                if (value := _instant(track, self.ts)) is not None]

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


def _instant(track: Track, at: float) -> float | None:
    end = int(np.searchsorted(track.ts, at, side="right"))
    if end == 0 or track.ts[end - 1] < at - LOOKBACK:
        return None
    return float(track.values[end - 1])


def points_between(track: Track, start: float, end: float) -> tuple[np.ndarray, np.ndarray]:
    """The track's points in [start, end] (a range selector's, Prometheus 2.x: both ends in)."""
    lo = int(np.searchsorted(track.ts, start, side="left"))
    hi = int(np.searchsorted(track.ts, end, side="right"))
    return track.ts[lo:hi], track.values[lo:hi]


# --- the tree, each node its own evaluation ------------------------------------------------------

@dataclass(frozen=True)
class Matcher:
    label: str
    op: str  # = != =~ !~
    value: str

    def matches(self, labels: Labels) -> bool:
        actual = labels.get(self.label, "")
        if self.op == "=":
            return actual == self.value
        if self.op == "!=":
            return actual != self.value
        found = re.fullmatch(self.value, actual) is not None  # PromQL regexes are anchored
        return found if self.op == "=~" else not found


@dataclass(frozen=True)
class Selector:
    name: str
    matchers: tuple[Matcher, ...] = ()
    offset: float = 0.0  # seconds
    range: float | None = None  # seconds, for a range selector (a function's argument)

    def eval(self, samples: Samples) -> Vector:
        if isinstance(samples, HistoryAt):
            at = samples.ts - self.offset
            return [(t.labels, v) for t in self.tracks(samples.history) if (v := _instant(t, at)) is not None]
        if self.offset:
            return []  # a page has no past
        found = samples.get(self.name, ())
        if not isinstance(found, Series):
            return [s for s in found if all(m.matches(s[0]) for m in self.matchers)]
        labels, values = found.labels, found.values
        if not self.matchers:
            return list(zip(labels, values, strict=True))
        chosen = found.matches.get(self.matchers)
        if chosen is None:
            chosen = found.matches[self.matchers] = [
                index for index, series in enumerate(labels) if all(m.matches(series) for m in self.matchers)]
        return [(labels[index], values[index]) for index in chosen]

    def tracks(self, history: History) -> list[Track]:
        return [t for t in history.tracks(self.name) if all(m.matches(t.labels) for m in self.matchers)]


@dataclass(frozen=True)
class Number:
    value: float

    def eval(self, samples: Samples) -> float:
        return self.value


@dataclass(frozen=True)
class Compare:
    """A vector compared with a number: the vector's samples that pass, value and labels kept."""

    operand: Node
    op: str  # as if the number were on the right (`1 < x` is `x > 1`)
    threshold: float

    def eval(self, samples: Samples) -> Vector:
        test = COMPARISONS[self.op]
        found = self.operand.eval(samples)
        assert not isinstance(found, float)
        return [s for s in found if test(s[1], self.threshold)]


@dataclass(frozen=True)
class SetOp:
    op: str  # and | or | unless
    left: Node
    right: Node
    on: tuple[str, ...] | None = None  # on(...) labels; None: every label but __name__ and `ignoring`
    ignoring: tuple[str, ...] = ()

    def signature(self, labels: Labels) -> tuple[tuple[str, str], ...]:
        return _signature(labels, self.on, self.ignoring)

    def eval(self, samples: Samples) -> Vector:
        left, right = self.left.eval(samples), self.right.eval(samples)
        assert not isinstance(left, float) and not isinstance(right, float)
        if self.op == "or":
            seen = {self.signature(s[0]) for s in left}
            return left + [s for s in right if self.signature(s[0]) not in seen]
        matched = {self.signature(s[0]) for s in right}
        keep = self.op == "and"
        return [s for s in left if (self.signature(s[0]) in matched) == keep]


@dataclass(frozen=True)
class Negate:
    operand: Node

    def eval(self, samples: Samples) -> Vector:
        found = self.operand.eval(samples)
        assert not isinstance(found, float)
        return [(_without_name(labels), -value) for labels, value in found]


@dataclass(frozen=True)
class Binary:
    """Arithmetic (a vector and a number, or two vectors) and comparison of two vectors, matched
    one to one."""

    op: str
    left: Node
    right: Node
    on: tuple[str, ...] | None = None
    ignoring: tuple[str, ...] = ()

    def eval(self, samples: Samples) -> Vector:
        left, right = self.left.eval(samples), self.right.eval(samples)
        if isinstance(left, float) or isinstance(right, float):
            return _with_number(self.op, left, right)
        return self._matched(left, right)

    def _matched(self, left: Vector, right: Vector) -> Vector:
        op = self.op
        index: dict[tuple[tuple[str, str], ...], tuple[Labels, float]] = {}
        for labels, value in right:
            key = _signature(labels, self.on, self.ignoring)
            if key in index:
                raise TrendError(f"many-to-many matching in {op!r}: two right-hand series match {dict(key)}")
            index[key] = (labels, value)
        out: Vector = []
        matched: set[tuple[tuple[str, str], ...]] = set()
        for labels, value in left:
            key = _signature(labels, self.on, self.ignoring)
            match = index.get(key)
            if match is None:
                continue
            if key in matched:
                raise TrendError(f"many-to-one matching in {op!r}: two left-hand series match {dict(key)} "
                                 "(group_left is left to Prometheus)")
            matched.add(key)
            if op in COMPARISONS:
                if COMPARISONS[op](value, match[1]):
                    out.append((labels, value))
                continue
            result = _without_name(labels)
            if self.on is not None:
                result = {k: v for k, v in result.items() if k in self.on}
            elif self.ignoring:
                result = {k: v for k, v in result.items() if k not in self.ignoring}
            out.append((result, ARITHMETIC[op](value, match[1])))
        return out


RANGE_FUNCTIONS = frozenset({"avg_over_time", "sum_over_time", "min_over_time", "max_over_time", "count_over_time",
                             "last_over_time", "stddev_over_time", "quantile_over_time", "deriv", "predict_linear",
                             "changes"})
INSTANT_FUNCTIONS = frozenset({"abs", "clamp_min", "clamp_max", "ln", "exp"})


@dataclass(frozen=True)
class Call:
    name: str
    args: tuple[Node, ...]  # a range selector where the function takes one; numbers for its parameters

    def eval(self, samples: Samples) -> Vector:
        if self.name in INSTANT_FUNCTIONS:
            return self._instant(samples)
        if not isinstance(samples, HistoryAt):
            return []  # a page has no past
        found = samples.cache.get(self)
        if found is None:
            found = samples.cache[self] = self._over_range(samples)
        return found

    def _parameters(self) -> list[float]:
        return [a.value for a in self.args if isinstance(a, Number)]

    def _instant(self, samples: Samples) -> Vector:
        vector = self.args[0].eval(samples)
        assert not isinstance(vector, float)
        bound = self._parameters()
        fn: Callable[[float], float] = {
            "abs": abs, "clamp_min": lambda v: max(v, bound[0]), "clamp_max": lambda v: min(v, bound[0]),
            "ln": _ln, "exp": _exp,
        }[self.name]
        return [(_without_name(labels), fn(value)) for labels, value in vector]

    def _over_range(self, at: HistoryAt) -> Vector:
        selector = next(a for a in self.args if isinstance(a, Selector) and a.range is not None)
        assert selector.range is not None
        end = at.ts - selector.offset
        start = end - selector.range
        parameter = self._parameters()
        out: Vector = []
        for track in selector.tracks(at.history):
            times, values = points_between(track, start, end)
            value = _over_time(self.name, times, values, parameter, at.ts)
            if value is not None:  # last_over_time keeps the metric name, as in Prometheus
                out.append((track.labels if self.name == "last_over_time" else _without_name(track.labels), value))
        return out


Node = Selector | Number | Compare | SetOp | Negate | Binary | Call


def children(node: Node) -> tuple[Node, ...]:
    if isinstance(node, Compare | Negate):
        return (node.operand,)
    if isinstance(node, SetOp | Binary):
        return (node.left, node.right)
    if isinstance(node, Call):
        return node.args
    return ()


def walk(node: Node) -> Iterator[Node]:
    """Every node of the tree, without recursion."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(children(current)))


def depth(node: Node) -> int:
    """Levels of the tree, counted without recursion."""
    deepest, stack = 0, [(node, 1)]
    while stack:
        current, level = stack.pop()
        deepest = max(deepest, level)
        stack += [(child, level + 1) for child in children(current)]
    return deepest


# --- an expression --------------------------------------------------------------------------

class Expr:
    """A parsed rule expression; `eval` gives its vector on a page or on a `HistoryAt`."""

    __slots__ = ("metric_names", "root", "selectors", "text")

    def __init__(self, text: str, root: Node) -> None:
        self.text, self.root = text, root
        self.selectors = tuple(node for node in walk(root) if isinstance(node, Selector))
        self.metric_names = frozenset(selector.name for selector in self.selectors)

    def eval(self, samples: Samples) -> Vector:
        result = self.root.eval(samples)
        return [] if isinstance(result, float) else result

    @property
    def selector(self) -> Selector | None:
        """The expression's one instant selector, when that is all it is."""
        root = self.root
        return root if isinstance(root, Selector) and not root.offset and root.range is None else None

    @property
    def reads_history(self) -> bool:
        """Whether it reads the past (a range selector or an offset): a trend expression."""
        return any(s.offset or s.range is not None for s in self.selectors)

    @property
    def longest_reach(self) -> float:
        """How far back, in seconds, the expression reads (the history it needs)."""
        return max((s.offset + (s.range if s.range is not None else LOOKBACK) for s in self.selectors),
                   default=0.0)

    @property
    def shortest_range(self) -> float:
        """The shortest range selector's range in seconds (inf without one)."""
        return min((s.range for s in self.selectors if s.range is not None), default=math.inf)

    def __repr__(self) -> str:
        return f"Expr({self.text!r})"


_LEXEME = re.compile(r"""
    "(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`      # strings: nothing in them counts
  | \#[^\n]*                                        # a comment
  | (?P<open>\() | (?P<close>\))
  | (?P<op>\b(?:and|or|unless)\b|==|!=|>=|<=|[<>+\-*/%^])
""", re.VERBOSE)


def _guard(text: str) -> None:
    """Refuse what would take the parser past its stack or its patience, from the text alone."""
    level = operators = 0
    for match in _LEXEME.finditer(text):
        if match.lastgroup == "open":
            level += 1
            if level > MAX_DEPTH:
                raise TooDeep(TOO_DEEP)
        elif match.lastgroup == "close":
            level -= 1
        elif match.lastgroup == "op":
            operators += 1
            if operators > MAX_OPERATORS:
                raise TooDeep(TOO_DEEP)


def _parsed_depth(tree: Any) -> int:
    """Levels of promql-parser's tree, counted without recursion, before it is converted."""
    deepest, stack = 0, [(tree, 1)]
    while stack:
        current, level = stack.pop()
        deepest = max(deepest, level)
        if deepest > MAX_DEPTH:
            break
        kind = type(current).__name__
        if kind == "BinaryExpr":
            stack += [(current.lhs, level + 1), (current.rhs, level + 1)]
        elif kind in ("ParenExpr", "UnaryExpr"):
            stack.append((current.expr, level + 1))
        elif kind == "Call":
            stack += [(arg, level + 1) for arg in current.args]
    return deepest


@lru_cache(maxsize=512)  # an `Expr` does not change; the trend views parse the same few texts again and again
def parse(text: str) -> Expr:
    """Parse a rule expression: `OutsideSubset` says why one is not evaluated here, `TooDeep`
    refuses one nested past MAX_DEPTH (a 20,000-term `or` chain, 50,000 parentheses)."""
    _guard(text)
    try:
        tree = promql_parser.parse(text)
    except ValueError as exc:
        raise OutsideSubset(f"not valid PromQL: {exc}") from None
    if _parsed_depth(tree) > MAX_DEPTH:
        raise TooDeep(TOO_DEEP)
    root = _convert(tree)
    if isinstance(root, Number):
        raise OutsideSubset("a rule expression must select a series")
    if isinstance(root, Selector) and root.range is not None:
        raise OutsideSubset("a range selector is a function's argument, not a rule's result")
    return Expr(text, root)


# --- promql-parser's tree into ours ---------------------------------------------------------------

_MATCH_OPS = {"MatchOp.Equal": "=", "MatchOp.NotEqual": "!=", "MatchOp.Re": "=~", "MatchOp.NotRe": "!~"}


def _convert(node: Any) -> Node:
    kind = type(node).__name__
    if kind == "ParenExpr":
        return _convert(node.expr)
    if kind == "NumberLiteral":
        return Number(float(node.val))
    if kind == "UnaryExpr":
        operand = _convert(node.expr)
        return Number(-operand.value) if isinstance(operand, Number) else Negate(operand)
    if kind == "VectorSelector":
        return _selector(node, None)
    if kind == "MatrixSelector":
        return _selector(node.vector_selector, node.range.total_seconds())
    if kind == "Call":
        return _call(node)
    if kind == "BinaryExpr":
        return _binary(node)
    if kind == "AggregateExpr":
        raise OutsideSubset(f"the aggregation {node.op!s}() is left to Prometheus")
    raise OutsideSubset(f"{kind} is left to Prometheus (subqueries, strings)")


def _selector(node: Any, seconds: float | None) -> Selector:
    if node.at is not None:
        raise OutsideSubset("the @ modifier is left to Prometheus")
    matchers = []
    name = node.name or ""
    for m in node.matchers.matchers:
        op = _MATCH_OPS[str(m.op)]
        if m.name == "__name__" and op == "=":
            name = m.value
            continue
        if op in ("=~", "!~"):
            _check_regex(m.value)
        matchers.append(Matcher(m.name, op, m.value))
    if not name or node.matchers.or_matchers:
        raise OutsideSubset("a selector needs a metric name (and no `or` matchers)")
    offset = node.offset.total_seconds() if node.offset is not None else 0.0
    return Selector(name, tuple(matchers), offset, seconds)


def _call(node: Any) -> Call:
    name = node.func.name
    if name not in RANGE_FUNCTIONS | INSTANT_FUNCTIONS:
        raise OutsideSubset(f"the function {name}() is left to Prometheus")
    args = tuple(_convert(arg) for arg in node.args)
    ranged = [a for a in args if isinstance(a, Selector) and a.range is not None]
    if (name in RANGE_FUNCTIONS) != bool(ranged):
        raise OutsideSubset(f"{name}() takes {'a range' if name in RANGE_FUNCTIONS else 'an instant'} vector")
    if any(not isinstance(a, Number | Selector) for a in args if a not in ranged) and name in RANGE_FUNCTIONS:
        raise OutsideSubset(f"a parameter of {name}() must be a number")
    if name in INSTANT_FUNCTIONS and any(not isinstance(a, Number) for a in args[1:]):
        raise OutsideSubset(f"a parameter of {name}() must be a number")
    return Call(name, args)


def _binary(node: Any) -> Node:
    op = str(node.op)
    modifier = node.modifier
    on: tuple[str, ...] | None = None
    ignoring: tuple[str, ...] = ()
    if modifier is not None:
        if modifier.return_bool:
            raise OutsideSubset("the `bool` modifier is left to Prometheus")
        if str(modifier.card) not in ("VectorMatchCardinality.OneToOne", "VectorMatchCardinality.ManyToMany"):
            raise OutsideSubset(f"group_left/group_right are left to Prometheus (with {op!r})")
        matching = modifier.matching
        if matching is not None:
            labels = tuple(matching.labels)
            if str(matching.type) == "LabelModifierType.Include":
                on = labels
            else:
                ignoring = labels
    if op not in ARITHMETIC and op not in COMPARISONS and op not in SET_OPS:
        raise OutsideSubset(f"the operator {op!r} is left to Prometheus")
    left, right = _convert(node.lhs), _convert(node.rhs)
    numbers = isinstance(left, Number), isinstance(right, Number)
    if op in SET_OPS:
        if any(numbers):
            raise OutsideSubset(f"`{op}` needs a vector on both sides")
        return SetOp(op, left, right, on, ignoring)
    if all(numbers):
        if op in COMPARISONS:
            raise OutsideSubset("a comparison between two numbers needs `bool`")
        assert isinstance(left, Number) and isinstance(right, Number)
        return Number(ARITHMETIC[op](left.value, right.value))
    if op in COMPARISONS and isinstance(right, Number):
        return Compare(left, op, right.value)
    if op in COMPARISONS and isinstance(left, Number):
        return Compare(right, SWAPPED[op], left.value)
    return Binary(op, left, right, on, ignoring)


def _check_regex(value: str) -> None:
    try:
        re.compile(value)
    except re.error as exc:
        raise OutsideSubset(f"regex {value!r} does not compile here: {exc}") from None


# --- evaluation's arithmetic ------------------------------------------------------------------

def _without_name(labels: Labels) -> Labels:
    return {k: v for k, v in labels.items() if k != "__name__"}


def _signature(labels: Labels, on: tuple[str, ...] | None, ignoring: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    if on is not None:
        return tuple((name, labels.get(name, "")) for name in on)
    skip = {"__name__", *ignoring}
    return tuple(sorted((k, v) for k, v in labels.items() if k not in skip))


def _with_number(op: str, left: Vector | float, right: Vector | float) -> Vector:
    """Arithmetic between a vector and a number (comparisons with a number are `Compare`s)."""
    vector_left = not isinstance(left, float)
    vector = left if vector_left else right
    number = right if vector_left else left
    assert not isinstance(vector, float) and isinstance(number, float)
    fn = ARITHMETIC[op]
    if vector_left:
        return [(_without_name(labels), fn(value, number)) for labels, value in vector]
    return [(_without_name(labels), fn(number, value)) for labels, value in vector]


def _ln(value: float) -> float:
    """Go's math.Log: -Inf at 0, NaN below."""
    if value > 0 or math.isnan(value):
        return math.log(value) if value != math.inf else math.inf
    return -math.inf if value == 0 else math.nan


def _exp(value: float) -> float:
    try:
        return math.exp(value)
    except OverflowError:
        return math.inf


def _over_time(name: str, times: np.ndarray, values: np.ndarray, parameter: list[float], ts: float) -> float | None:
    n = len(values)
    if n == 0:
        return None
    if name == "avg_over_time":
        return float(np.mean(values))
    if name == "sum_over_time":
        return float(np.sum(values))
    if name == "min_over_time":
        return float(np.min(values))
    if name == "max_over_time":
        return float(np.max(values))
    if name == "count_over_time":
        return float(n)
    if name == "last_over_time":
        return float(values[-1])
    if name == "stddev_over_time":
        return float(np.std(values))
    if name == "changes":
        return float(np.count_nonzero(values[1:] != values[:-1]))
    if name == "quantile_over_time":
        return _quantile(parameter[0], values)
    if n < 2:
        return None  # a line needs two points
    slope, intercept = _regression(times, values, ts)
    if name == "deriv":
        return slope
    return intercept + slope * parameter[0]  # predict_linear


def _quantile(phi: float, values: np.ndarray) -> float:
    if math.isnan(phi):
        return math.nan
    if phi < 0:
        return -math.inf
    if phi > 1:
        return math.inf
    ordered = np.sort(values)
    rank = phi * (len(ordered) - 1)
    lower = max(0, math.floor(rank))
    upper = min(len(ordered) - 1, lower + 1)
    weight = rank - math.floor(rank)
    return float(ordered[lower] * (1 - weight) + ordered[upper] * weight)


def _regression(times: np.ndarray, values: np.ndarray, intercept_time: float) -> tuple[float, float]:
    """Least squares through the points, x measured from `intercept_time` (Prometheus' linearRegression)."""
    x = times - intercept_time
    n = float(len(values))
    sum_x, sum_y = float(np.sum(x)), float(np.sum(values))
    sum_xy, sum_x2 = float(np.dot(x, values)), float(np.dot(x, x))
    covariance = sum_xy - sum_x * sum_y / n
    variance = sum_x2 - sum_x * sum_x / n
    slope = covariance / variance if variance != 0 else 0.0
    return slope, sum_y / n - slope * sum_x / n
