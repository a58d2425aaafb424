"""The conditions a result holds under: the six variables, observed where they can be.

    input / output lengths   the drawn requests' statistics, the data set's hash; what the server
                             served (its usage, run.py) is what two results are compared on
    concurrency              the levels that ran (what the server saw is in each level's engine block)
    GPU                      model, count, driver, CUDA, memory: NVML, a dcgm-exporter page or a replay
    serving framework        engine and generation from its page, GET /version, GET /v1/models,
                             the configuration the page shows (vLLM's *_config_info gauges) and
                             llama-server's GET /props (total_slots: `slots`)
    precision / options      what the user states: --precision, --note

A variable nobody could observe is `None` ("not observed"), never guessed; a probe that failed
says why in `server.errors` (`{"version": "timed out after 5s"}`). Each probe has one deadline for
the whole exchange and a byte cap (`monitor.scrape.fetch_page`), so a server that drips or floods
costs the run that much and no more. What a result keeps from the server is bounded too: at most
MODELS_KEPT model ids (and how many there were), every text cut to TEXT_CHARS. `comparable()`
names the variables two results differ in.
"""

from __future__ import annotations

import json
import platform
import sys
from typing import Any

import httpx

import monitor
from monitor.promtext import Parser, labels_dict
from monitor.scrape import ScrapeError, fetch_page

CONFIG_INFO = ("vllm:cache_config_info", "vllm:model_config_info", "vllm:parallel_config_info")
PROBE_TIMEOUT_S = 5.0  # one probe, connect to last byte: GET /version, /v1/models, the engine page
PROBE_MAX_BYTES = 10_000_000  # one probe's body (the monitor's own default for an engine page)
MODELS_KEPT = 20  # model ids a result records; `models_count` says how many the server listed
CONFIG_LABELS_KEPT = 64  # labels kept of one vLLM *_config_info gauge
TEXT_CHARS = 200  # any text a result records from the server (a model id, a version, a label value)


async def server_conditions(http: httpx.AsyncClient, base: str, page_text: str | None,
                            engine: str | None, generation: str | None, *, timeout_s: float = PROBE_TIMEOUT_S,
                            max_bytes: int = PROBE_MAX_BYTES, page_error: str | None = None) -> dict[str, Any]:
    """What the server says about itself: version, models, and the configuration on its page."""
    errors: dict[str, str] = {"metrics": page_error} if page_error else {}
    version = await _json(http, f"{base}/version", timeout_s, max_bytes, "version", errors)
    models = await _json(http, f"{base}/v1/models", timeout_s, max_bytes, "models", errors)
    raw_cards = models.get("data") if isinstance(models, dict) else None
    cards = [c for c in raw_cards if isinstance(c, dict)] if isinstance(raw_cards, list) else None
    max_model_len = cards[0].get("max_model_len") if cards else None
    config = page_config(page_text) if page_text else {}
    slots = None
    if engine == "llamacpp":  # its slots (-np) are on GET /props, not on its page
        props = await _json(http, f"{base}/props", timeout_s, max_bytes, "props", errors)
        config_props, slots = props_config(props)
        if config_props:
            config["props"] = config_props
    return {
        "engine": engine,
        "generation": generation,
        "version": cut(version.get("version")) if isinstance(version, dict) else None,
        "models": [cut(c.get("id")) for c in cards[:MODELS_KEPT]] if cards else [],
        "models_count": len(cards) if cards is not None else None,
        "max_model_len": max_model_len if isinstance(max_model_len, int) else None,
        "config": config,
        # requests the engine runs at once: llama-server's total_slots; vLLM publishes no max_num_seqs
        "slots": slots,
        "errors": errors,
    }


PROPS_KEPT = ("total_slots", "build_info")  # of llama-server's GET /props (never model_path: a local path)


def props_config(props: Any) -> tuple[dict[str, str], int | None]:
    """llama-server's GET /props -> ({"total_slots": "2", "n_ctx": "4096", ...}, slots)."""
    if not isinstance(props, dict):
        return {}, None
    kept = {key: cut(props[key]) or "" for key in PROPS_KEPT if props.get(key) is not None}
    settings = props.get("default_generation_settings")
    if isinstance(settings, dict) and isinstance(settings.get("n_ctx"), int):
        kept["n_ctx"] = str(settings["n_ctx"])
    slots = props.get("total_slots")
    return kept, slots if isinstance(slots, int) and not isinstance(slots, bool) and slots > 0 else None


async def _json(http: httpx.AsyncClient, url: str, timeout_s: float, max_bytes: int, name: str,
                errors: dict[str, str]) -> Any:
    """The JSON at `url`, or None with the reason in errors[name]."""
    try:
        return json.loads((await fetch_page(http, url, timeout_s, max_bytes, metrics_page=False)).text)
    except ScrapeError as exc:
        errors[name] = str(exc)
    except ValueError:
        errors[name] = "not JSON"
    return None


def cut(value: Any) -> str | None:
    """A value from the server as short text: None stays None (not observed)."""
    return None if value is None else str(value)[:TEXT_CHARS]


def page_config(text: str) -> dict[str, dict[str, str]]:
    """vLLM's info gauges -> their labels: `cache_config_info{block_size="16",…} 1.0`."""
    page = Parser().parse(text, {name: name for name in CONFIG_INFO})
    config = {}
    for name in CONFIG_INFO:
        series = page.series(name)
        if series:
            labels = labels_dict(next(iter(series)))
            labels.pop("engine", None)
            config[name.split(":", 1)[1]] = {k[:TEXT_CHARS]: v[:TEXT_CHARS]
                                             for k, v in list(labels.items())[:CONFIG_LABELS_KEPT]}
    return config


def tool_conditions() -> dict[str, Any]:
    return {"name": "infermon bench", "version": monitor.__version__, "python": sys.version.split()[0],
            "host": platform.node()}


# The six variables: where each lives in `conditions`, and how a person reads it.
SIX_VARIABLES: dict[str, tuple[str, ...]] = {
    "input-length distribution": ("workload", "lengths", "input_tokens"),
    "output-length distribution": ("workload", "lengths", "output_tokens"),
    "concurrency": ("workload", "levels"),
    "GPU": ("gpu", "model"),
    "GPU count": ("gpu", "count"),
    "CUDA / driver": ("gpu", "driver"),
    "serving framework": ("server", "engine"),
    "framework version": ("server", "version"),
    "framework configuration": ("server", "config"),
    "precision": ("user", "precision"),
    "optimizations": ("user", "note"),
}


def _at(conditions: dict[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = conditions
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """The variables A and B differ in ("GPU: NVIDIA H200 vs NVIDIA H100"); lengths by their means
    within 10 %, since two draws of one distribution differ a little: the lengths the server
    served (its `usage`) where both results have them, else the lengths asked (said so)."""
    out = []
    for name, path in SIX_VARIABLES.items():
        left, right = _at(a, path), _at(b, path)
        if "lengths" in path:
            (left, right), basis = _lengths_to_compare(a, b, path[-1])
            if not _close_means(left, right):
                out.append(f"{name} ({basis}): mean {_mean(left)} vs {_mean(right)} tokens")
        elif left != right:
            out.append(f"{name}: {_difference(left, right)}")
    return out


def _lengths_to_compare(a: dict[str, Any], b: dict[str, Any], which: str) -> tuple[tuple[Any, Any], str]:
    """(A's, B's) distribution of `which` ("input_tokens"), and which lengths they are."""
    served = _at(a, ("workload", "served", which)), _at(b, ("workload", "served", which))
    if _mean(served[0]) is not None and _mean(served[1]) is not None:
        return served, "served, the server's usage"
    asked = "estimated" if which == "input_tokens" else "max_tokens"
    return (_at(a, ("workload", "lengths", which)), _at(b, ("workload", "lengths", which))), f"asked, {asked}"


def _difference(left: Any, right: Any) -> str:
    """Two values as a person reads them: of two dicts, only the keys that differ."""
    if isinstance(left, dict) and isinstance(right, dict):
        keys = [k for k in dict.fromkeys([*left, *right]) if left.get(k) != right.get(k)]
        return ", ".join(f"{k}: {_difference(left.get(k), right.get(k))}" for k in keys)
    return f"{_short(left)} vs {_short(right)}"


def _mean(stats: Any) -> Any:
    return round(stats["mean"], 1) if isinstance(stats, dict) and stats.get("mean") is not None else None


def _close_means(a: Any, b: Any) -> bool:
    ma, mb = _mean(a), _mean(b)
    if ma is None or mb is None:
        return ma is None and mb is None
    return bool(abs(ma - mb) <= 0.1 * max(abs(ma), abs(mb), 1e-9))


def _short(value: Any) -> str:
    if isinstance(value, list) and all(isinstance(v, dict) and "label" in v for v in value):
        return ", ".join(str(v["label"]) for v in value) or "none"  # levels: c=1, c=8
    text = "not observed" if value is None else str(value)
    return text if len(text) <= 120 else text[:117] + "..."
