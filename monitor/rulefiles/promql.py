"""The trend half of the rule language: PromQL over a history, as Prometheus evaluates it.

The instant subset (`expr.py`) reads one page; a trend rule reads days of a series: range
selectors, `offset`, the `*_over_time` functions, `deriv`/`predict_linear` and arithmetic between
vectors. Parsing that by hand would be a second PromQL parser; the expression is parsed by the
`promql-parser` package (Rust, the grammar of Prometheus' own parser) and evaluated here, over
a `History`: every stored point of a metric's series, oldest first.

What is evaluated, with Prometheus' semantics (promql/engine.go and functions.go, 2.x):

- an instant selector takes each series' newest point in [t - 5m, t] (`offset` shifts t);
- a range selector `v[r] offset o` takes the points in [t - o - r, t - o] (2.x: both ends in;
  Prometheus 3 leaves the left end out, which moves nothing on a history of 5-minute points
  evaluated off its grid);
- `avg_, sum_, min_, max_, count_, last_, stddev_over_time`, `quantile_over_time(φ, v)`,
  `deriv(v)`, `predict_linear(v, s)` (the least-squares line through the points, read at the
  evaluation time plus s), `changes(v)`, `abs`, `clamp_min`, `clamp_max`, `ln`, `exp`; a function drops the
  metric name (but `last_over_time`);
- `+ - * / %` and comparisons between a vector and a number or two vectors matched one to one
  (on every label but the name, or `on(...)` / `ignoring(...)`): arithmetic drops the name, a
  comparison filters and keeps the left sample; `and`, `or`, `unless` as in the instant subset.

Anything else (aggregations, subqueries, `group_left`, `bool`, `@`) raises `OutsideSubset` when
the rule is loaded; data that cannot be evaluated (two right-hand series for one left-hand one)
raises `TrendError`, the rule's evaluation error.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import promql_parser

from monitor.rulefiles.expr import Labels, Matcher, OutsideSubset, Sample

LOOKBACK = 300.0  # Prometheus' default lookback delta for an instant selector

_ARITHMETIC: dict[str, Callable[[float, float], float]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": lambda a, b: _divide(a, b),
    "%": lambda a, b: math.fmod(a, b) if b != 0 else math.nan, "^": lambda a, b: _power(a, b),
}
_COMPARISON: dict[str, Callable[[float, float], bool]] = {
    "==": operator.eq, "!=": operator.ne, ">": operator.gt, "<": operator.lt, ">=": operator.ge, "<=": operator.le,
}
_SET = ("and", "or", "unless")


def _divide(a: float, b: float) -> float:
    if b == 0:
        return math.nan if a == 0 or math.isnan(a) else math.copysign(math.inf, a) * math.copysign(1.0, b)
    return a / b


def _power(a: float, b: float) -> float:
    try:
        return float(a ** b)
    except (OverflowError, ZeroDivisionError):
        return math.inf


class TrendError(ValueError):
    """An expression that cannot be evaluated on this data (as Prometheus' own evaluation errors)."""


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
    newest point in the lookback), so the instant subset reads it as it reads a page."""

    def __init__(self, history: History, ts: float) -> None:
        self.history, self.ts = history, ts
        # A range function's vector at this instant, by its node: the trend rules share their
        # levels (the same `avg_over_time(x[6h] offset 1w)` in many rules), each read once.
        self.cache: dict[Any, Vector] = {}

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


# --- the tree we evaluate ---------------------------------------------------------------------

_MATCH_OPS = {"MatchOp.Equal": "=", "MatchOp.NotEqual": "!=", "MatchOp.Re": "=~", "MatchOp.NotRe": "!~"}


@dataclass(frozen=True)
class _Selector:
    name: str
    matchers: tuple[Matcher, ...]
    offset: float
    range: float | None  # seconds, for a range selector

    def tracks(self, history: History) -> list[Track]:
        return [t for t in history.tracks(self.name) if all(m.matches(t.labels) for m in self.matchers)]


@dataclass(frozen=True)
class _Number:
    value: float


@dataclass(frozen=True)
class _Call:
    name: str
    args: tuple[Any, ...]  # nodes; a range selector where the function takes one


@dataclass(frozen=True)
class _Negate:
    operand: Any


@dataclass(frozen=True)
class _Binary:
    op: str
    left: Any
    right: Any
    on: tuple[str, ...] | None
    ignoring: tuple[str, ...]


_RANGE_FUNCTIONS = {"avg_over_time", "sum_over_time", "min_over_time", "max_over_time", "count_over_time",
                    "last_over_time", "stddev_over_time", "quantile_over_time", "deriv", "predict_linear", "changes"}
_INSTANT_FUNCTIONS = {"abs", "clamp_min", "clamp_max", "ln", "exp"}


def _convert(node: Any) -> Any:
    kind = type(node).__name__
    if kind == "ParenExpr":
        return _convert(node.expr)
    if kind == "NumberLiteral":
        return _Number(float(node.val))
    if kind == "UnaryExpr":
        return _Negate(_convert(node.expr))
    if kind == "VectorSelector":
        return _selector(node, None)
    if kind == "MatrixSelector":
        return _selector(node.vector_selector, node.range.total_seconds())
    if kind == "Call":
        name = node.func.name
        if name not in _RANGE_FUNCTIONS | _INSTANT_FUNCTIONS:
            raise OutsideSubset(f"the function {name}() is not evaluated by the embedded trend rules")
        args = tuple(_convert(arg) for arg in node.args)
        ranged = [a for a in args if isinstance(a, _Selector) and a.range is not None]
        if (name in _RANGE_FUNCTIONS) != bool(ranged):
            raise OutsideSubset(f"{name}() takes {'a range' if name in _RANGE_FUNCTIONS else 'an instant'} vector")
        return _Call(name, args)
    if kind == "BinaryExpr":
        return _binary(node)
    raise OutsideSubset(f"{kind} is not evaluated by the embedded trend rules (aggregations and subqueries "
                        "are left to Prometheus)")


def _selector(node: Any, seconds: float | None) -> _Selector:
    if node.at is not None:
        raise OutsideSubset("the @ modifier is not evaluated by the embedded trend rules")
    matchers = []
    name = node.name or ""
    for m in node.matchers.matchers:
        op = _MATCH_OPS[str(m.op)]
        if m.name == "__name__" and op == "=":
            name = m.value
            continue
        matchers.append(Matcher(m.name, op, m.value))
    if not name or node.matchers.or_matchers:
        raise OutsideSubset("a selector needs a metric name (and no `or` matchers) in the embedded trend rules")
    offset = node.offset.total_seconds() if node.offset is not None else 0.0
    return _Selector(name, tuple(matchers), offset, seconds)


def _binary(node: Any) -> _Binary:
    op = str(node.op)
    modifier = node.modifier
    on: tuple[str, ...] | None = None
    ignoring: tuple[str, ...] = ()
    if modifier is not None:
        if modifier.return_bool:
            raise OutsideSubset("`bool` comparisons are not evaluated by the embedded trend rules")
        if str(modifier.card) not in ("VectorMatchCardinality.OneToOne", "VectorMatchCardinality.ManyToMany"):
            raise OutsideSubset("group_left/group_right are not evaluated by the embedded trend rules")
        matching = modifier.matching
        if matching is not None:
            labels = tuple(matching.labels)
            if str(matching.type) == "LabelModifierType.Include":
                on = labels
            else:
                ignoring = labels
    if op not in _ARITHMETIC and op not in _COMPARISON and op not in _SET:
        raise OutsideSubset(f"the operator {op!r} is not evaluated by the embedded trend rules")
    return _Binary(op, _convert(node.lhs), _convert(node.rhs), on, ignoring)


# --- evaluation -------------------------------------------------------------------------------

Vector = list[tuple[Labels, float]]


class TrendExpr:
    """A parsed trend expression; `eval` on a `HistoryAt` gives the vector at its instant (on
    anything else, a page without a history behind it, the empty vector: nothing to compare)."""

    def __init__(self, text: str) -> None:
        try:
            tree = promql_parser.parse(text)
        except ValueError as exc:
            raise OutsideSubset(f"not valid PromQL: {exc}") from None
        self.text = text
        self.root = _convert(tree)
        if isinstance(self.root, _Number):
            raise OutsideSubset("a rule expression must select a series")

    def eval(self, samples: Mapping[str, Sequence[Sample]]) -> Vector:
        if not isinstance(samples, HistoryAt):
            return []
        result = _eval(self.root, samples.history, samples.ts, samples.cache)
        if isinstance(result, float):
            return []
        return result

    @property
    def metric_names(self) -> set[str]:
        return _names(self.root)

    @property
    def selectors(self) -> list[tuple[str, tuple[Matcher, ...]]]:
        """Every selector's metric name and matchers (what the history must keep for this rule)."""
        return _selectors(self.root)

    @property
    def longest_reach(self) -> float:
        """How far back, in seconds, the expression reads (the history it needs)."""
        return _reach(self.root)

    @property
    def shortest_range(self) -> float:
        """The shortest range selector's range in seconds (inf without one)."""
        return _shortest(self.root)

    def __repr__(self) -> str:
        return f"TrendExpr({self.text!r})"


def _names(node: Any) -> set[str]:
    if isinstance(node, _Selector):
        return {node.name}
    if isinstance(node, _Call):
        return set().union(*(_names(a) for a in node.args))
    if isinstance(node, _Negate):
        return _names(node.operand)
    if isinstance(node, _Binary):
        return _names(node.left) | _names(node.right)
    return set()


def _selectors(node: Any) -> list[tuple[str, tuple[Matcher, ...]]]:
    if isinstance(node, _Selector):
        return [(node.name, node.matchers)]
    if isinstance(node, _Call):
        return [found for a in node.args for found in _selectors(a)]
    if isinstance(node, _Negate):
        return _selectors(node.operand)
    if isinstance(node, _Binary):
        return _selectors(node.left) + _selectors(node.right)
    return []


def _reach(node: Any) -> float:
    if isinstance(node, _Selector):
        return node.offset + (node.range if node.range is not None else LOOKBACK)
    if isinstance(node, _Call):
        return max((_reach(a) for a in node.args), default=0.0)
    if isinstance(node, _Negate):
        return _reach(node.operand)
    if isinstance(node, _Binary):
        return max(_reach(node.left), _reach(node.right))
    return 0.0


def _shortest(node: Any) -> float:
    if isinstance(node, _Selector):
        return node.range if node.range is not None else math.inf
    if isinstance(node, _Call):
        return min((_shortest(a) for a in node.args), default=math.inf)
    if isinstance(node, _Negate):
        return _shortest(node.operand)
    if isinstance(node, _Binary):
        return min(_shortest(node.left), _shortest(node.right))
    return math.inf


def _without_name(labels: Labels) -> Labels:
    return {k: v for k, v in labels.items() if k != "__name__"}


def _eval(node: Any, history: History, ts: float, cache: dict[Any, Vector]) -> Vector | float:
    if isinstance(node, _Number):
        return node.value
    if isinstance(node, _Selector):
        at = ts - node.offset
        return [(t.labels, v) for t in node.tracks(history) if (v := _instant(t, at)) is not None]
    if isinstance(node, _Negate):
        operand = _eval(node.operand, history, ts, cache)
        if isinstance(operand, float):
            return -operand
        return [(_without_name(labels), -value) for labels, value in operand]
    if isinstance(node, _Call):
        if node.name in _INSTANT_FUNCTIONS:
            return _call(node, history, ts, cache)
        found = cache.get(node)
        if found is None:
            found = cache[node] = _call(node, history, ts, cache)
        return found
    return _binary_eval(node, history, ts, cache)


def _call(node: _Call, history: History, ts: float, cache: dict[Any, Vector]) -> Vector:
    if node.name in _INSTANT_FUNCTIONS:
        vector = _eval(node.args[0], history, ts, cache)
        if isinstance(vector, float):
            raise OutsideSubset(f"{node.name}() takes a vector")
        bound = [_scalar(a, history, ts, cache) for a in node.args[1:]]
        fn: Callable[[float], float] = {
            "abs": abs, "clamp_min": lambda v: max(v, bound[0]), "clamp_max": lambda v: min(v, bound[0]),
            "ln": _ln, "exp": _exp,
        }[node.name]
        return [(_without_name(labels), fn(value)) for labels, value in vector]
    selector = next(a for a in node.args if isinstance(a, _Selector) and a.range is not None)
    end = ts - selector.offset
    assert selector.range is not None
    start = end - selector.range
    parameter = [_scalar(a, history, ts, cache) for a in node.args if a is not selector]
    out: Vector = []
    for track in selector.tracks(history):
        times, values = points_between(track, start, end)
        value = _over_time(node.name, times, values, parameter, ts)
        if value is not None:  # last_over_time keeps the metric name, as in Prometheus
            out.append((track.labels if node.name == "last_over_time" else _without_name(track.labels), value))
    return out


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


def _scalar(node: Any, history: History, ts: float, cache: dict[Any, Vector]) -> float:
    value = _eval(node, history, ts, cache)
    if not isinstance(value, float):
        raise OutsideSubset("a function parameter must be a number in the embedded trend rules")
    return value


def _over_time(name: str, times: np.ndarray, values: np.ndarray, parameter: list[float], ts: float) -> float | None:
    n = len(values)
    if n == 0:
        return None
    if name == "avg_over_time":
        return _mean(values)
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


def _mean(values: np.ndarray) -> float:
    return float(np.mean(values))


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


def _signature(labels: Labels, on: tuple[str, ...] | None, ignoring: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    if on is not None:
        return tuple((name, labels.get(name, "")) for name in on)
    skip = {"__name__", *ignoring}
    return tuple(sorted((k, v) for k, v in labels.items() if k not in skip))


def _binary_eval(node: _Binary, history: History, ts: float, cache: dict[Any, Vector]) -> Vector | float:
    left, right = _eval(node.left, history, ts, cache), _eval(node.right, history, ts, cache)
    op = node.op
    if op in _SET:
        if isinstance(left, float) or isinstance(right, float):
            raise OutsideSubset(f"`{op}` needs a vector on both sides")
        return _set(op, left, right, node)
    if isinstance(left, float) and isinstance(right, float):
        if op in _COMPARISON:
            raise OutsideSubset("a comparison between two numbers needs `bool`")
        return _ARITHMETIC[op](left, right)
    if isinstance(left, float) or isinstance(right, float):
        return _with_number(op, left, right)
    index: dict[tuple[tuple[str, str], ...], tuple[Labels, float]] = {}
    for labels, value in right:
        key = _signature(labels, node.on, node.ignoring)
        if key in index:
            raise TrendError(f"many-to-many matching in {op!r}: two right-hand series match {dict(key)}")
        index[key] = (labels, value)
    out: Vector = []
    matched: set[tuple[tuple[str, str], ...]] = set()
    for labels, value in left:
        key = _signature(labels, node.on, node.ignoring)
        match = index.get(key)
        if match is None:
            continue
        if key in matched:
            raise TrendError(f"many-to-one matching in {op!r}: two left-hand series match {dict(key)} "
                             "(group_left is left to Prometheus)")
        matched.add(key)
        if op in _COMPARISON:
            if _COMPARISON[op](value, match[1]):
                out.append((labels, value))
        else:
            result = _without_name(labels)
            if node.on is not None:
                result = {k: v for k, v in result.items() if k in node.on}
            elif node.ignoring:
                result = {k: v for k, v in result.items() if k not in node.ignoring}
            out.append((result, _ARITHMETIC[op](value, match[1])))
    return out


def _with_number(op: str, left: Vector | float, right: Vector | float) -> Vector:
    vector_left = not isinstance(left, float)
    vector = left if vector_left else right
    number = right if vector_left else left
    assert not isinstance(vector, float) and isinstance(number, float)
    out: Vector = []
    for labels, value in vector:
        a, b = (value, number) if vector_left else (number, value)
        if op in _COMPARISON:
            if _COMPARISON[op](a, b):
                out.append((labels, value))
        else:
            out.append((_without_name(labels), _ARITHMETIC[op](a, b)))
    return out


def _set(op: str, left: Vector, right: Vector, node: _Binary) -> Vector:
    def key(labels: Labels) -> tuple[tuple[str, str], ...]:
        return _signature(labels, node.on, node.ignoring)

    if op == "or":
        seen = {key(labels) for labels, _ in left}
        return left + [s for s in right if key(s[0]) not in seen]
    matched = {key(labels) for labels, _ in right}
    keep = op == "and"
    return [s for s in left if (key(s[0]) in matched) == keep]
