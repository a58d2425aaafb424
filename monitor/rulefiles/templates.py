"""Alert label and annotation templates, rendered as Prometheus renders them.

Prometheus expands them with Go's text/template (option missingkey=zero) after the header
`{{$labels := .Labels}}{{$externalLabels := .ExternalLabels}}{{$externalURL := .ExternalURL}}
{{$value := .Value}}`. We implement the part alert rules use, exactly:

    {{ $value }}  {{ .Value }}  {{ $labels.target }}  {{ .Labels.target }}  {{ $externalURL }}
    {{ humanize $value }}  {{ $value | humanizePercentage }}  {{ humanizeDuration $value }}
    {{ printf "%.2f" $value }}  {{ $labels.model | toUpper }}  toLower  title
    "{{-" / "-}}" trim markers, string and number literals, pipelines with "|"

Anything else (if/range/with, variables, `query`, other functions) raises `TemplateError` at
load time: a user's rule using it is left to Prometheus. Numbers print as Go prints a float64
(`fmt`'s %v: shortest digits, exponent from 1e+06 and below 1e-04, "+Inf", "NaN").
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal

Value = str | float | int | Mapping[str, str]


class TemplateError(ValueError):
    """A template outside the supported subset (or malformed)."""


@dataclass(frozen=True)
class TemplateData:
    labels: Mapping[str, str]
    value: float
    external_url: str = ""


_ACTION = re.compile(r"\{\{(-\s)?(.*?)(\s-)?\}\}", re.DOTALL)
_ARG = re.compile(r'\s*("(?:[^"\\]|\\.)*"|`[^`]*`|\||[^\s|"`]+)')
_KEYWORDS = {"if", "else", "end", "range", "with", "define", "template", "block", "break", "continue", "nil"}
_PRINTF_VERB = re.compile(r"%([-+# 0]*)(\d+)?(?:\.(\d+))?([a-zA-Z%])")


def go_float(value: float) -> str:
    """A float64 as Go's fmt prints it with %v (strconv 'g', shortest, exponent at 1e+06)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    sign, digits, exponent = Decimal(repr(value)).normalize().as_tuple()
    text = "".join(map(str, digits))
    point = len(text) + int(exponent)  # position of the decimal point in the digit string
    minus = "-" if sign else ""
    if point - 1 < -4 or point - 1 >= 6:
        mantissa = text[0] + ("." + text[1:] if len(text) > 1 else "")
        return f"{minus}{mantissa}e{'-' if point - 1 < 0 else '+'}{abs(point - 1):02d}"
    if point <= 0:
        return f"{minus}0.{'0' * -point}{text}"
    if point >= len(text):
        return minus + text + "0" * (point - len(text))
    return f"{minus}{text[:point]}.{text[point:]}"


def _go_g(value: float, spec: str = ".4") -> str:
    # Go's %g / %f / %e agree with C's (hence Python's) except for infinities and NaN.
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return format(value, spec)


def _to_float(value: Value) -> float:
    if isinstance(value, Mapping):
        raise TemplateError("cannot convert a map to a number")
    try:
        return float(value)
    except ValueError:
        raise TemplateError(f"cannot convert {value!r} to a number") from None


def humanize(value: Value) -> str:
    v = _to_float(value)
    if v == 0 or math.isnan(v) or math.isinf(v):
        return _go_g(v, ".4g")
    prefix = ""
    if abs(v) >= 1:
        for candidate in ("k", "M", "G", "T", "P", "E", "Z", "Y"):
            if abs(v) < 1000:
                break
            prefix, v = candidate, v / 1000
        return _go_g(v, ".4g") + prefix
    for candidate in ("m", "u", "n", "p", "f", "a", "z", "y"):
        if abs(v) >= 1:
            break
        prefix, v = candidate, v * 1000
    return _go_g(v, ".4g") + prefix


def humanize_percentage(value: Value) -> str:
    return _go_g(_to_float(value) * 100, ".4g") + "%"


def humanize_duration(value: Value) -> str:
    v = _to_float(value)
    if math.isnan(v) or math.isinf(v):
        return _go_g(v, ".4g")
    if v == 0:
        return _go_g(v, ".4g") + "s"
    if abs(v) >= 1:
        sign = "-" if v < 0 else ""
        v = abs(v)
        whole = int(v)
        days, hours = whole // 86400, whole // 3600 % 24
        minutes, seconds = whole // 60 % 60, whole % 60
        if days:
            return f"{sign}{days}d {hours}h {minutes}m {seconds}s"
        if hours:
            return f"{sign}{hours}h {minutes}m {seconds}s"
        if minutes:
            return f"{sign}{minutes}m {seconds}s"
        return f"{sign}{_go_g(v, '.4g')}s"
    prefix = ""
    for candidate in ("m", "u", "n", "p", "f", "a", "z", "y"):
        if abs(v) >= 1:
            break
        prefix = candidate
        v *= 1000
    return f"{_go_g(v, '.4g')}{prefix}s"


def _go_type(value: Value) -> str:
    return "string" if isinstance(value, str) else "int" if isinstance(value, int) else "float64"


def printf(fmt: str, *args: Value) -> str:
    """Go's fmt.Sprintf for the verbs templates use: %v %s %d %f %e %g %q %%."""
    out: list[str] = []
    remaining = list(args)
    position = 0
    for match in _PRINTF_VERB.finditer(fmt):
        out.append(fmt[position:match.start()])
        position = match.end()
        flags, width, precision, verb = match.groups()
        if verb == "%":
            out.append("%")
            continue
        if not remaining:
            out.append(f"%!{verb}(MISSING)")
            continue
        out.append(_format_one(remaining.pop(0), flags, width, precision, verb))
    out.append(fmt[position:])
    for extra in remaining:
        out.append(f"%!(EXTRA {_go_type(extra)}={_print(extra)})")
    return "".join(out)


def _format_one(arg: Value, flags: str, width: str | None, precision: str | None, verb: str) -> str:
    spec = f"{flags}{width or ''}{'.' + precision if precision is not None else ''}"
    if isinstance(arg, Mapping):
        raise TemplateError("printf of a map is not supported")
    if verb == "v":
        return _print(arg)
    if verb == "s" and isinstance(arg, str):
        return format(arg, f"{'<' if '-' in flags else '>'}{width or ''}{'.' + precision if precision else ''}")
    if verb == "q" and isinstance(arg, str):
        return '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if verb == "d" and isinstance(arg, int):
        return format(arg, spec + "d")
    if verb in "feEgG" and not isinstance(arg, str):
        return _go_g(float(arg), spec + verb) if math.isfinite(arg) else _go_g(float(arg))
    return f"%!{verb}({_go_type(arg)}={_print(arg)})"


def _print(value: Value) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool | int):
        return str(value)
    if isinstance(value, float):
        return go_float(value)
    raise TemplateError("printing a whole map is not supported")


_FUNCTIONS: dict[str, Callable[..., str]] = {
    "humanize": humanize,
    "humanizePercentage": humanize_percentage,
    "humanizeDuration": humanize_duration,
    "printf": printf,
    "toUpper": lambda s: str(s).upper(),
    "toLower": lambda s: str(s).lower(),
    "title": lambda s: re.sub(r"\b[a-z]", lambda m: m.group().upper(), str(s)),
}


class Template:
    """A compiled template; `render(data)` never fails on data our samples can produce."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.parts: list[str | list[list[str]]] = []  # text, or a pipeline of commands (token lists)
        position = 0
        for match in _ACTION.finditer(text):
            before = text[position:match.start()]
            self.parts.append(before.rstrip() if match.group(1) else before)
            self.parts.append(_pipeline(match.group(2)))
            position = match.end()
            if match.group(3):
                rest = text[position:]
                position += len(rest) - len(rest.lstrip())
        tail = text[position:]
        if "{{" in tail or "}}" in tail:
            raise TemplateError("unbalanced {{ }}")
        self.parts.append(tail)
        self.render(TemplateData({}, 0.0))  # check every name now, not at the first alert

    @property
    def constant(self) -> bool:
        """Does it render the same text whatever the data (no action in it)?"""
        return all(isinstance(part, str) for part in self.parts)

    def render(self, data: TemplateData) -> str:
        out: list[str] = []
        for part in self.parts:
            out.append(part if isinstance(part, str) else _print(_run(part, data)))
        return "".join(out)


def _pipeline(action: str) -> list[list[str]]:
    tokens = [m.group(1) for m in _ARG.finditer(action.strip())]
    if not tokens or tokens[0].startswith("/*"):
        raise TemplateError(f"empty action or comment: {{{{{action}}}}}")
    if tokens[0] in _KEYWORDS or ":=" in tokens or "=" in tokens:
        raise TemplateError(f"{tokens[0]!r} actions and variables are outside the supported template subset")
    commands: list[list[str]] = [[]]
    for token in tokens:
        if token == "|":
            commands.append([])
        else:
            commands[-1].append(token)
    if any(not command for command in commands):
        raise TemplateError(f"empty command in pipeline {action!r}")
    return commands


def _run(pipeline: list[list[str]], data: TemplateData) -> Value:
    piped: Value | None = None
    for command in pipeline:
        head, args = command[0], [_operand(t, data) for t in command[1:]]
        if piped is not None:
            args.append(piped)
        if head in _FUNCTIONS:
            piped = _FUNCTIONS[head](*args)
        elif not args:
            piped = _operand(head, data)
        else:
            raise TemplateError(f"{head!r} is not a supported function")
    assert piped is not None
    return piped


def _operand(token: str, data: TemplateData) -> Value:
    if token[0] in "\"`":
        return token[1:-1] if token[0] == "`" else bytes(token[1:-1], "utf-8").decode("unicode_escape")
    if re.fullmatch(r"-?\d+", token):
        return int(token)
    if re.fullmatch(r"-?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?", token):
        return float(token)
    root, *fields = token.split(".") if token[0] == "$" else ["", *token[1:].split(".")] if token[0] == "." else [token]
    values: dict[str, Value] = {
        "$value": data.value, "Value": data.value, "$labels": data.labels, "Labels": data.labels,
        "$externalURL": data.external_url, "ExternalURL": data.external_url,
        "$externalLabels": {}, "ExternalLabels": {},
    }
    if root == "" and fields:
        root, fields = fields[0], fields[1:]
    if root not in values:
        raise TemplateError(f"{token!r} is not a supported function or variable")
    value = values[root]
    for name in fields:
        if not isinstance(value, Mapping):
            raise TemplateError(f"{token!r}: cannot take a field of a number or string")
        value = value.get(name, "")  # missingkey=zero: a missing label prints as ""
    return value
