"""A page that answered but is no engine we read: what it holds, said so an operator can act.

Prometheus' `up` means the scrape succeeded, and so does ours: a valid page whose families match
no engine table is up, with its engine unrecognised (`inference_target_engine_recognized 0`),
and the reason names what was found and what to set:

    reachable, 17 families (process_*, python_*), none of vLLM / SGLang / TGI / llama.cpp / Dynamo / GAIE EPP;
    set `engine:` or `metric_prefix:`

A target that pins its engine (`engine: vllm`) gets the families that were expected and missing.
A body that is not Prometheus text at all (JSON, HTML) fails the scrape, as in Prometheus.
"""

from __future__ import annotations

from monitor.promtext import Page, PageError, Parser
from monitor.service.engines import ENGINES, HTTP_SAMPLES, spellings, suggest_prefix

_DISPLAY = {"vllm": "vLLM", "sglang": "SGLang", "tgi": "TGI", "llamacpp": "llama.cpp", "dynamo": "Dynamo",
            "gaie-epp": "GAIE EPP"}
_SUFFIXES = ("_total", "_bucket", "_count", "_sum", "_created", "_info", "_gcount", "_gsum")
_SHOWN_PREFIXES = 5


def display(engine: str) -> str:
    return _DISPLAY.get(engine, engine)


def known_engines() -> str:
    return " / ".join(dict.fromkeys(display(spec.engine) for spec in ENGINES))


def families(page: Page) -> list[str]:
    """Family names on a fully parsed page: its # TYPE lines, and untyped samples by name."""
    found = set(page.types)
    for name in page.samples:
        if name not in found and not any(name.removesuffix(s) in found for s in _SUFFIXES if name.endswith(s)):
            found.add(name)
    return sorted(found)


def unrecognized_reason(text: str, parser: Parser, prefix: str = "", pinned: str | None = None) -> str:
    """Why a page is no engine's (PageError when it is not Prometheus text at all)."""
    try:
        page = parser.parse(text)  # every family: validates the page, as Prometheus' scrape does
    except PageError as exc:
        raise PageError(f"not Prometheus text: {exc}") from None
    names = families(page)
    found = f"reachable, {len(names)} {'family' if len(names) == 1 else 'families'}{_prefixes(names)}"
    if pinned is not None:
        return f"{found}, but not the pinned engine {display(pinned)}: {_missing(page, pinned, prefix)}"
    behind = f" behind metric_prefix {prefix!r}" if prefix else ""
    reason = f"{found}, none of {known_engines()}{behind}"
    suggested = None if prefix else suggest_prefix(text)
    if suggested:
        return f"{reason}; they appear behind the prefix {suggested!r}: set metric_prefix: {suggested} on this target"
    return f"{reason}; set `engine:` or `metric_prefix:`"


def _prefixes(names: list[str]) -> str:
    """The families' name prefixes, a few: (process_*, python_*)."""
    heads = list(dict.fromkeys(_head(name) for name in names))
    if not heads:
        return ""
    more = ", ..." if len(heads) > _SHOWN_PREFIXES else ""
    return f" ({', '.join(heads[:_SHOWN_PREFIXES])}{more})"


def _head(name: str) -> str:
    for separator in (":", "_"):
        if separator in name.strip(separator):
            return name.split(separator, 1)[0] + separator + "*"
    return name


def _missing(page: Page, engine: str, prefix: str) -> str:
    """Expected marker families (one of them identifies each generation) and how many of the rest are there."""
    specs = [spec for spec in ENGINES if spec.engine == engine]
    expected = " or ".join(f"{prefix}{marker}" for spec in specs for marker in spec.markers)
    wanted = {name for spec in specs for name in spec.wanted} - set(HTTP_SAMPLES)  # not engine-specific
    present = sorted(name for name in wanted if any(s in page.samples for s in spellings(name, prefix)))
    other = [display(spec.engine) for spec in ENGINES if spec.engine != engine
             and any(s in page.samples for m in spec.markers for s in spellings(m, prefix))]
    text = f"expected {expected}, missing; {len(present)} of its {len(wanted)} families present"
    text += f" ({', '.join(present[:3])})" if present else ""
    return text + (f"; the page looks like {other[0]}" if other else "")
