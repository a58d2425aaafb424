"""The PromQL subset both evaluators understand: parse it, and evaluate it on one instant.

    expr     := setop
    setop    := compare (("and" | "or" | "unless") [on(...) | ignoring(...)] compare)*
                 ("or" binds looser than "and"/"unless", all left-associative, as in PromQL)
    compare  := operand (cmp number)*  |  number cmp operand
    operand  := selector | "(" expr ")"
    selector := name ["{" matcher ("," matcher)* "}"]      matcher: label (= | != | =~ | !~) "string"

Anything else (functions, arithmetic, range selectors, offset, `bool`, vector-vector
comparison) raises `OutsideSubset`, whose message says what was found: Prometheus evaluates it,
we do not pretend to.

Semantics are Prometheus' (promql/engine.go): a comparison filters and keeps the vector's
sample (value and labels, `__name__` included); `and`/`or`/`unless` match on every label but
`__name__`, or on the `on(...)` list, or on every label but `__name__` and the `ignoring(...)`
list; `or` keeps all of the left side and the right-side samples whose match is not on the left.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import overload

Labels = Mapping[str, str]
Sample = tuple[Labels, float]
Samples = Mapping[str, Sequence[Sample]]  # metric name -> its series (labels include __name__)


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


class OutsideSubset(ValueError):
    """The expression is valid PromQL, or not, but not in the subset we evaluate."""


_TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<number>0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
  | (?P<ident>[a-zA-Z_:][a-zA-Z0-9_:]*)
  | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
  | (?P<op>=~|!~|==|!=|>=|<=|[=<>(){},\[\]+\-*/%^@])
""", re.VERBOSE)
_COMPARISONS: dict[str, Callable[[float, float], bool]] = {
    "==": operator.eq, "!=": operator.ne, ">": operator.gt, "<": operator.lt, ">=": operator.ge, "<=": operator.le,
}
_SWAPPED = {"==": "==", "!=": "!=", ">": "<", "<": ">", ">=": "<=", "<=": ">="}
_SET_OPS = ("and", "or", "unless")
_STRING_ESCAPES = {"n": "\n", "t": "\t", "\\": "\\", '"': '"', "'": "'"}


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

    def eval(self, samples: Samples) -> list[Sample]:
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


@dataclass(frozen=True)
class Compare:
    operand: Node
    op: str
    threshold: float

    def eval(self, samples: Samples) -> list[Sample]:
        test = _COMPARISONS[self.op]
        return [s for s in self.operand.eval(samples) if test(s[1], self.threshold)]


@dataclass(frozen=True)
class SetOp:
    op: str  # and | or | unless
    left: Node
    right: Node
    on: tuple[str, ...] | None = None  # on(...) labels; None: every label but __name__ and `ignoring`
    ignoring: tuple[str, ...] = ()

    def signature(self, labels: Labels) -> tuple[tuple[str, str], ...]:
        if self.on is not None:
            return tuple((name, labels.get(name, "")) for name in self.on)
        skip = {"__name__", *self.ignoring}
        return tuple(sorted((k, v) for k, v in labels.items() if k not in skip))

    def eval(self, samples: Samples) -> list[Sample]:
        left, right = self.left.eval(samples), self.right.eval(samples)
        if self.op == "or":
            seen = {self.signature(s[0]) for s in left}
            return left + [s for s in right if self.signature(s[0]) not in seen]
        matched = {self.signature(s[0]) for s in right}
        keep = self.op == "and"
        return [s for s in left if (self.signature(s[0]) in matched) == keep]


Node = Selector | Compare | SetOp


def metric_names(node: Node) -> set[str]:
    if isinstance(node, Selector):
        return {node.name}
    if isinstance(node, Compare):
        return metric_names(node.operand)
    return metric_names(node.left) | metric_names(node.right)


MAX_DEPTH = 100  # operators and parentheses nested in one expression (the shipped rules use 3)
TOO_DEEP = f"expression nested too deep (at most {MAX_DEPTH} levels of operators and parentheses)"


class TooDeep(ValueError):
    """An expression no rule file needs: evaluating it would exhaust the stack."""


def parse(text: str) -> Node:
    """Parse an expression of the subset; `OutsideSubset` says why one is not, `TooDeep` refuses
    one nested past MAX_DEPTH (a 20,000-term `or` chain, 50,000 parentheses)."""
    parser = _Parser(_tokens(text))
    try:
        node = parser.setop()
    except RecursionError:
        raise TooDeep(TOO_DEEP) from None
    if parser.peek() is not None:
        raise OutsideSubset(f"unexpected {parser.peek()!r} after a complete expression")
    if depth(node) > MAX_DEPTH:
        raise TooDeep(TOO_DEEP)
    return node


def _chained(count: int) -> int:
    """One more operator in a chain (each nests the chain one level deeper): refuse a 20,000-term
    `or` at its 101st term instead of building it first."""
    if count + 1 > MAX_DEPTH:
        raise TooDeep(TOO_DEEP)
    return count + 1


def depth(node: Node) -> int:
    """Levels of the tree, counted without recursion (the tree may be deeper than the stack)."""
    deepest, stack = 0, [(node, 1)]
    while stack:
        current, level = stack.pop()
        deepest = max(deepest, level)
        if isinstance(current, Compare):
            stack.append((current.operand, level + 1))
        elif isinstance(current, SetOp):
            stack += [(current.left, level + 1), (current.right, level + 1)]
    return deepest


def _tokens(text: str) -> list[tuple[str, str]]:
    tokens, position = [], 0
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None:
            raise OutsideSubset(f"cannot read {text[position:position + 20]!r}")
        position = match.end()
        kind = match.lastgroup or ""
        if kind != "space":
            tokens.append((kind, match.group()))
    return tokens


class _Parser:
    def __init__(self, tokens: list[tuple[str, str]]) -> None:
        self.tokens = tokens
        self.position = 0

    def peek(self) -> str | None:
        return self.tokens[self.position][1] if self.position < len(self.tokens) else None

    def kind(self) -> str | None:
        return self.tokens[self.position][0] if self.position < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        token = self.peek()
        if token is None:
            raise OutsideSubset(f"expression ends where {expected or 'more'!r} was expected")
        if expected is not None and token != expected:
            raise OutsideSubset(f"expected {expected!r}, found {token!r}")
        self.position += 1
        return token

    def setop(self) -> Node:
        node, chained = self.intersection(), 0
        while self.peek() == "or":
            node, chained = self.matching(self.take(), node, self.intersection), _chained(chained)
        return node

    def intersection(self) -> Node:
        node, chained = self.compare(), 0
        while self.peek() in ("and", "unless"):
            node, chained = self.matching(self.take(), node, self.compare), _chained(chained)
        return node

    def matching(self, op: str, left: Node, right: Callable[[], Node]) -> SetOp:
        on: tuple[str, ...] | None = None
        ignoring: tuple[str, ...] = ()
        if self.peek() == "on":
            self.take()
            on = self.label_list()
        elif self.peek() == "ignoring":
            self.take()
            ignoring = self.label_list()
        if self.peek() in ("group_left", "group_right"):
            raise OutsideSubset(f"{self.peek()} is not allowed with {op}")
        return SetOp(op, left, right(), on, ignoring)

    def label_list(self) -> tuple[str, ...]:
        self.take("(")
        names: list[str] = []
        while self.peek() != ")":
            if self.kind() != "ident":
                raise OutsideSubset(f"expected a label name, found {self.peek()!r}")
            names.append(self.take())
            if self.peek() == ",":
                self.take()
        self.take(")")
        return tuple(names)

    def compare(self) -> Node:
        if self.kind() == "number" or self.peek() in ("-", "+", "Inf", "NaN", "inf", "nan"):
            threshold = self.number()
            op = self.comparison()
            return Compare(self.operand(), _SWAPPED[op], threshold)  # 1 < x keeps x's samples
        node = self.operand()
        while self.peek() in _COMPARISONS:
            op = self.comparison()
            node = Compare(node, op, self.number())
        return node

    def comparison(self) -> str:
        op = self.take()
        if op not in _COMPARISONS:
            raise OutsideSubset(f"expected a comparison, found {op!r}")
        if self.peek() == "bool":
            raise OutsideSubset("the `bool` modifier is outside the subset")
        return op

    def number(self) -> float:
        sign = -1.0 if self.peek() == "-" else 1.0
        if self.peek() in ("-", "+"):
            self.take()
        token = self.take()
        if token.lower() in ("inf", "nan"):
            return sign * float(token)
        if self.tokens[self.position - 1][0] != "number":
            raise OutsideSubset(f"expected a number, found {token!r} (a comparison between two vectors)")
        return sign * (float(int(token, 16)) if token[:2].lower() == "0x" else float(token))

    def operand(self) -> Node:
        if self.peek() == "(":
            self.take()
            node = self.setop()
            self.take(")")
            return node
        return self.selector()

    def selector(self) -> Selector:
        kind, token = (self.kind(), self.peek())
        if kind != "ident" or token in (*_SET_OPS, "on", "ignoring", "bool"):
            raise OutsideSubset(f"expected a metric selector, found {token!r}")
        name = self.take()
        if self.peek() == "(":
            raise OutsideSubset(f"function {name}() is outside the subset")
        matchers = self.matchers() if self.peek() == "{" else ()
        if self.peek() in ("[", "offset", "@"):
            raise OutsideSubset(f"{self.peek()!r} after a selector (range or time modifier) is outside the subset")
        if self.peek() in ("+", "-", "*", "/", "%", "^"):
            raise OutsideSubset(f"arithmetic ({self.peek()!r}) is outside the subset")
        return Selector(name, matchers)

    def matchers(self) -> tuple[Matcher, ...]:
        self.take("{")
        found: list[Matcher] = []
        while self.peek() != "}":
            if self.kind() != "ident":
                raise OutsideSubset(f"expected a label name, found {self.peek()!r}")
            label, op = self.take(), self.take()
            if op not in ("=", "!=", "=~", "!~"):
                raise OutsideSubset(f"expected a label matcher operator, found {op!r}")
            if self.kind() != "string":
                raise OutsideSubset(f"expected a quoted label value, found {self.peek()!r}")
            value = _unquote(self.take())
            if op in ("=~", "!~"):
                _check_regex(value)
            found.append(Matcher(label, op, value))
            if self.peek() == ",":
                self.take()
        self.take("}")
        if any(m.label == "__name__" for m in found):
            raise OutsideSubset("a __name__ matcher is outside the subset: name the metric")
        return tuple(found)


def _unquote(token: str) -> str:
    if token[0] == "`":
        return token[1:-1]
    return re.sub(r"\\(.)", lambda m: _STRING_ESCAPES.get(m.group(1), "\\" + m.group(1)), token[1:-1])


def _check_regex(value: str) -> None:
    try:
        re.compile(value)
    except re.error as exc:
        raise OutsideSubset(f"regex {value!r} does not compile here: {exc}") from None
