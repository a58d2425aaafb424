"""One typed settings model: a YAML file, overridden by INFERMON_<SECTION>__<KEY> variables.

Read once at start-up (`load_settings`) and passed down; a bad value fails right there with
the key and the reason (`ConfigError`), never later inside a collector. The model checks what a
value says by itself; whether a named engine, clock-event reason or redaction pattern exists is
the layers' knowledge, checked where the settings are assembled (`monitor/settings_check.py`).
"""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path
from typing import Annotated, Any, Literal

import pydantic
import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import core_schema
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict, SettingsError

from monitor.redaction import redact_urls
from monitor.settings_keys import Loc, env_var_for, env_vars_under, suggest

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}



def known_zone(value: str) -> str:
    """`value` when it is an IANA time zone name (the digest's and the quality run's schedules)."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError("unknown time zone (use an IANA name, e.g. Asia/Shanghai)") from None
    return value

class ConfigError(Exception):
    """A configuration problem, naming the key: `service.scrape_interval: ...`."""


_HTTP_URL = re.compile(r"https?://[^/\s?#]+(?:[/?#]\S*)?")


def http_url(value: str, example: str) -> str:
    """`value` if it is an http(s) URL with a host; the error never quotes it (it may hold a token)."""
    if not _HTTP_URL.fullmatch(value):
        raise ValueError(f"not an http(s) URL (e.g. {example})")
    return value


class Duration:
    """A duration written as text (`500ms`, `15s`, `1m`, `1h`); keeps the text for labels."""

    __slots__ = ("seconds", "text")

    def __init__(self, text: str) -> None:
        match = _DURATION.match(text)
        if match is None:
            raise ValueError("not a duration (use e.g. 500ms, 15s, 1m, 1h)")  # never quoted: a pasted token
        self.seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2) or "s"]
        self.text = text.strip() if match.group(2) else f"{match.group(1)}s"
        if self.seconds <= 0:
            raise ValueError("a duration must be positive")

    @classmethod
    def _validate(cls, value: Any) -> Duration:
        if isinstance(value, Duration):
            return value
        if isinstance(value, int | float) and not isinstance(value, bool):
            return cls(f"{value}s")
        if isinstance(value, str):
            return cls(value)
        raise ValueError(f"not a duration: a {type(value).__name__}, not text (use e.g. 15s)")

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        return core_schema.no_info_plain_validator_function(
            cls._validate, serialization=core_schema.plain_serializer_function_ser_schema(str)
        )

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"Duration({self.text!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Duration) and other.seconds == self.seconds

    def __hash__(self) -> int:
        return hash(self.seconds)


# The least each kind of duration may be: below these a job spins (an interval of 0.000001ms
# is a busy loop that never answers, not a fast monitor) or every call fails at once.
# (bench/gpu_check.py replays a recording 25 times faster: a 40 ms NVML interval is real use.)
_FLOORS = (("interval", Duration("20ms")), ("wait", Duration("20ms")),
           ("timeout", Duration("10ms")), ("", Duration("1ms")))


def duration_floor(field: str) -> Duration:
    """The smallest value allowed for a duration setting, by what its name says it is."""
    return next(floor for part, floor in _FLOORS if part in field)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @field_validator("*", mode="after")
    @classmethod
    def _at_least_floor(cls, value: Any, info: pydantic.ValidationInfo) -> Any:
        durations = value if isinstance(value, list) else [value]
        for duration in durations:
            if isinstance(duration, Duration):
                floor = duration_floor(info.field_name or "")
                if duration.seconds < floor.seconds:
                    raise ValueError(f"{duration.text} is too short: at least {floor.text}")
        return value


class Target(_Section):
    name: str = Field(min_length=1, description="Label value `target` on every series of this engine")
    url: str = Field(description="The engine's metrics page, e.g. http://10.0.0.5:8000/metrics")
    model: str | None = Field(None, description="Model name for engines whose page has no model label (TGI)")
    metric_prefix: str = Field(
        "", description="Prefix before every engine name on the page (KServe's queue-proxy: kserve_)"
    )
    engine: str | None = Field(
        None, description="Pin the engine (vllm, sglang, tgi): a page without its families is an error, not a guess"
    )  # a name of the engine tables: checked in monitor/settings_check.py

    @field_validator("metric_prefix")
    @classmethod
    def _name_prefix(cls, value: str) -> str:
        if value and not re.match(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$", value):
            raise ValueError("not a metric-name prefix ([a-zA-Z_:][a-zA-Z0-9_:]*)")
        return value

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not re.fullmatch(r"https?://[^/\s]+(/\S*)?", value):
            raise ValueError("not an http(s) URL (http://host:port/path)")  # never quoted: it may hold a password
        return value


class ServiceTarget(Target):
    """A serving-engine target; `node`/`gpus`/`pod` say which GPUs serve it (monitor/topology.py)."""

    node: str | None = Field(None, description="Node of the GPUs serving it (default: infra.node when gpus is set)")
    gpus: list[int] | None = Field(None, description="GPU indices on `node` serving it (default: all of the node)")
    pod: str | None = Field(None, description="Kubernetes pod name or glob (vllm-a-*) whose GPUs dcgm-exporter labels")
    namespace: str | None = Field(None, description="Kubernetes namespace the pod must be in")

    @field_validator("gpus")
    @classmethod
    def _gpu_indices(cls, value: list[int] | None) -> list[int] | None:
        if value is None:
            return None
        if not value:
            raise ValueError("an empty list serves nothing: leave gpus out for the whole node")
        if any(index < 0 for index in value) or len(set(value)) != len(value):
            raise ValueError(f"GPU indices must be distinct and >= 0: {value}")
        return value


class SloSettings(_Section):
    ttft: Duration = Field(Duration("200ms"), description="Real-time chat objective for TTFT")
    tpot: Duration = Field(Duration("50ms"), description="Real-time chat objective for TPOT")


class ShardSettings(_Section):
    """This monitor's share of the targets when several monitors split a fleet (monitor/service/shard.py)."""

    index: int = Field(ge=0, description="This monitor's shard, 0 to count - 1")
    count: int = Field(ge=1, description="How many monitors share the targets")

    @model_validator(mode="after")
    def _index_in_range(self) -> ShardSettings:
        if self.index >= self.count:
            raise ValueError(f"index {self.index} is not below count {self.count} (shards are 0 to count - 1)")
        return self


class ServiceSettings(_Section):
    scrape_interval: Duration = Field(Duration("15s"), description="How often each target is scraped")
    scrape_timeout: Duration = Field(Duration("10s"), description="Deadline for one whole scrape")
    windows: list[Duration] = Field(
        default_factory=lambda: [Duration("1m"), Duration("5m")],
        description="Windows of the rates and quantiles (label `window`); each longer than scrape_interval")
    baseline_window: Duration = Field(Duration("1h"), description="Trailing throughput baseline")
    baseline_min_coverage: float = Field(
        0.9, gt=0, le=1, description="Share of a baseline window that must hold samples before it counts")
    max_page_bytes: int = Field(10_000_000, gt=0, description="Larger pages fail the scrape")
    max_series_per_target: int = Field(
        200_000, ge=100, description="A page with more samples is refused unparsed (a 10-model vLLM page has ~4,000)")
    max_models_per_target: int = Field(
        1_000, ge=1, description="A page naming more models is refused before its numbers are derived")
    max_ingest_time: Duration = Field(
        Duration("10s"), description="A page that takes longer to parse and derive refuses its target for 10 "
        "scrapes (in a parse worker: the worker is replaced)")
    targets: list[ServiceTarget] = Field(default_factory=list)
    file_sd: list[str] = Field(
        default_factory=list, description="Prometheus file_sd files (JSON/YAML, globs allowed), followed live"
    )
    slo: SloSettings = Field(default_factory=SloSettings, description="Objectives of inference_slo_attainment_ratio")
    shard: ShardSettings | None = Field(
        None, description="Keep only this shard's targets, static and file_sd (hashmod on the target name)"
    )
    parse_workers: int = Field(
        0, ge=0, le=64, description="Processes that parse the pages and derive the targets under `infermon serve` "
        "(each target in one of them); 0: one thread of the monitor's own process")
    engine_version: bool = Field(
        False, description="Ask each engine its version beside its page (vLLM GET /version, SGLang /get_server_info, "
        "TGI /info, llama.cpp /props) when it comes up and every 10 minutes: the `version` label of "
        "inference_target_info, and a latency step at a version change named as such")

    @field_validator("windows")
    @classmethod
    def _windows(cls, value: list[Duration]) -> list[Duration]:
        if not value:
            raise ValueError("at least one window is needed")
        labels = [w.text for w in value]
        if len(set(labels)) != len(labels):
            raise ValueError(f"duplicate window: {labels}")
        return value

    @field_validator("targets")
    @classmethod
    def _unique_names(cls, value: list[Target]) -> list[Target]:
        names = [t.name for t in value]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"duplicate target names: {duplicates}")
        return value

    @model_validator(mode="after")
    def _fits_the_interval(self) -> ServiceSettings:
        # A scrape outliving the interval overlaps the next one; a rate needs two scrapes in its window.
        interval = self.scrape_interval
        if "scrape_timeout" not in self.model_fields_set and self.scrape_timeout.seconds > interval.seconds:
            self.scrape_timeout = interval  # the default deadline, shortened to a short interval
        if self.scrape_timeout.seconds > interval.seconds:
            raise ValueError(f"scrape_timeout {self.scrape_timeout} is longer than scrape_interval {interval}")
        # (t - w, t] holds the scrapes at t and t - interval only when w > interval (Prometheus'
        # docs advise 4x for jitter and missed scrapes; two is what a rate cannot do without).
        short = [w.text for w in self.windows if w.seconds <= interval.seconds]
        if short:
            raise ValueError(f"windows {short} hold fewer than two scrapes at scrape_interval {interval} "
                             "(a rate needs two)")
        return self


class NvmlSettings(_Section):
    enabled: Literal["auto", "true", "false"] = Field(
        "auto", description="Read the GPUs through NVML: auto uses it where the driver library loads")

    @field_validator("enabled", mode="before")
    @classmethod
    def _bool_text(cls, value: Any) -> Any:
        return str(value).lower() if isinstance(value, bool) else value


class DcgmSettings(_Section):
    targets: list[Target] = Field(default_factory=list, description="dcgm-exporter pages to read the GPUs from")


class ReplaySettings(_Section):
    file: Path | None = Field(None, description="Recorded NVML trace to play as a live GPU")


class InfraSettings(_Section):
    interval: Duration = Field(Duration("5s"), description="How often the GPUs are read")
    timeout: Duration = Field(Duration("2s"), description="Deadline for one GPU's NVML reads")
    node: str = Field(default_factory=socket.gethostname, description="Label `node` of this machine's GPUs")
    nvml: NvmlSettings = Field(default_factory=NvmlSettings, description="This machine's GPUs through NVML")
    dcgm: DcgmSettings = Field(default_factory=DcgmSettings, description="GPUs read from dcgm-exporter pages")
    replay: ReplaySettings = Field(default_factory=ReplaySettings, description="A recorded trace played as GPUs")


class StorageSettings(_Section):
    url: str = Field("sqlite:///./infermon.db", description="SQLAlchemy URL: SQLite embedded, PostgreSQL at scale")
    retention: Duration = Field(Duration("30d"), description="History older than this is pruned")
    check_interval: Duration = Field(
        Duration("10s"), description="How often the store collector checks the database answers (and its file is there)"
    )

    @field_validator("url")
    @classmethod
    def _known_url(cls, value: str) -> str:
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError, NoSuchModuleError

        try:
            url = make_url(value)
        except ArgumentError:
            raise ValueError("not a database URL (e.g. sqlite:///./infermon.db)") from None
        # Checked here, not at the first connection: `check` must not say OK for a store that cannot load.
        # The scheme is quoted, never the URL: it may hold a password.
        backend = url.get_backend_name()
        if backend not in ("sqlite", "postgresql"):
            hint = "write postgresql+psycopg://" if backend == "postgres" else "use sqlite:///PATH or postgresql+psycopg://"
            raise ValueError(f"the store is SQLite or PostgreSQL, not {backend!r}: {hint}")
        try:
            url.get_dialect().import_dbapi()
        except NoSuchModuleError:
            raise ValueError(f"unknown driver {url.drivername!r}: use sqlite:///PATH or "
                             "postgresql+psycopg://") from None
        except ImportError as exc:
            raise ValueError(f"the {url.drivername!r} driver's module {exc.name} is not installed: use "
                             "postgresql+psycopg:// with pip install 'inference-monitor[postgres]'") from None
        return value


# What the history keeps besides the trend rules' own selectors: the figures an operator reads
# week over week (the overview's column, `infermon history show`). Instant selectors of the
# monitor's own series.
DEFAULT_HISTORY_SERIES = (
    'inference_ttft_seconds{window="5m",quantile=~"0.5|0.99"}',
    'inference_tpot_seconds{window="5m",quantile=~"0.5|0.99"}',
    'inference_e2e_latency_seconds{window="5m",quantile=~"0.5|0.99"}',
    'inference_queue_time_seconds{window="5m",quantile=~"0.5|0.99"}',
    'inference_requests_per_second{window="5m"}',
    'inference_generation_tokens_per_second{window="5m"}',
    'inference_request_error_ratio{window="5m"}',
    "inference_kv_cache_usage_ratio",
    'inference_prefix_cache_hit_ratio{window="5m"}',
    "inference_gpu_utilization_ratio",
    "inference_gpu_power_watts",
    'inference_cost_usd_per_million_tokens{window="5m"}',
    "inference_quality_score_mean",
    "inference_quality_refusal_ratio",
    "inference_quality_hallucination_ratio",
    'inference_quality_output_tokens{quantile="0.5"}',
)


# Receiver types that take a free-text (markdown) message, and so the weekly digest: a generic
# webhook gets the digest's JSON (`infermon digest --json`), the IM bots its text form.
DIGEST_RECEIVER_TYPES = frozenset({"webhook", "slack", "feishu", "dingtalk", "wecom"})


class DigestSettings(_Section):
    """The weekly digest (`infermon digest --week`) posted to receivers through the alerts' outbox."""

    enabled: bool = Field(False, description="Post the weekly digest on schedule under `infermon serve`")
    weekday: Literal["mon", "tue", "wed", "thu", "fri", "sat", "sun"] = Field(
        "mon", description="Day of the week it is posted")
    hour: int = Field(9, ge=0, le=23, description="Hour of that day it is posted (in `timezone`)")
    timezone: str = Field("UTC", description="Time zone of the schedule (IANA name, e.g. Asia/Shanghai)")
    receivers: list[str] = Field(
        default_factory=list, description="Names of alerting.receivers that get it (webhook: JSON; IM bots: text)")

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str) -> str:
        return known_zone(value)

    @field_validator("receivers")
    @classmethod
    def _unique(cls, value: list[str]) -> list[str]:
        duplicates = sorted({n for n in value if value.count(n) > 1})
        if duplicates:
            raise ValueError(f"duplicate receiver names: {duplicates}")
        return value


class HistorySettings(_Section):
    enabled: bool = Field(True, description="Keep the long-horizon history the trend rules (alerts/trend.yml) read")
    retention: Duration = Field(
        Duration("35d"), description="How long the history's 5-minute points are kept in the store (at least the "
        "trend rules' reach, 17 days)")
    series: list[str] = Field(
        default_factory=lambda: list(DEFAULT_HISTORY_SERIES),
        description="Selectors of the monitor's own series the history keeps besides those the trend rules read")
    digest: DigestSettings = Field(default_factory=DigestSettings, description="The weekly digest webhook")


class ServerSettings(_Section):
    host: str = Field("0.0.0.0", description="Address the HTTP server binds: every interface by default; "
                      "127.0.0.1 keeps it on this machine")
    port: int = Field(9480, ge=0, le=65535, description="Port of the HTTP server (the page, /metrics, the API)")
    log_level: Literal["debug", "info", "warning", "error"] = Field("info", description="Least severe log line kept")
    max_connections: int = Field(
        512, ge=8, description="Most open connections; at the cap the longest one without a request is closed"
    )
    timeout_keep_alive: Duration = Field(Duration("5s"), description="An idle connection is closed after this")
    header_timeout: Duration = Field(
        Duration("10s"), description="A connection that has not sent a whole request head by then is closed"
    )
    max_header_bytes: int = Field(65536, ge=4096, description="Largest request head (request line and headers)")
    fd_reserve: int = Field(
        256, ge=16, description="File descriptors kept free of server connections, for scrapes and the store"
    )
    log_repeat_window: Duration = Field(
        Duration("10s"), description="The same log line again within this is counted, then logged once as repeated"
    )


class ApiSettings(_Section):
    token: SecretStr | None = Field(
        None, description="Bearer token required by the POST endpoints (INFERMON_API__TOKEN); never echoed back"
    )
    allow_unauthenticated: bool = Field(
        False, description="Without api.token, accept POSTs from anyone (otherwise only on a loopback bind)"
    )
    max_body_bytes: int = Field(
        4 * 1024 * 1024, ge=1024, description="Largest POST /api/v1/alertmanager body; larger is refused with 413"
    )
    max_alerts_per_payload: int = Field(
        1000, ge=1, description="Alerts taken from one Alertmanager payload; the rest are cut (and said so)"
    )
    max_label_chars: int = Field(
        1024, ge=64, description="Longest label value kept from Alertmanager; longer ones are cut (and said so)"
    )
    max_annotation_chars: int = Field(
        8192, ge=64, description="Longest annotation value kept from Alertmanager; longer ones are cut"
    )

    @field_validator("token")
    @classmethod
    def _not_empty(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not value.get_secret_value().strip():
            raise ValueError("empty: set a token, or leave api.token unset")
        return value


class ReceiverSettings(_Section):
    """One notification receiver. `url`, `secret` and `token` are secrets: an IM webhook URL carries its token."""

    name: str = Field(min_length=1, description="The receiver's name (label `receiver` of its metrics)")
    type: Literal["webhook", "slack", "feishu", "dingtalk", "wecom"] = Field(
        description="How to post: the message format")
    url: SecretStr = Field(description="Where to post (Alertmanager-style webhook, or the IM bot's webhook URL)")
    secret: SecretStr | None = Field(None, description="Signing secret (feishu, dingtalk)")
    token: SecretStr | None = Field(None, description="Bearer token sent to a generic webhook")
    send_resolved: bool = Field(
        True, description="Notify when an alert resolves (default: as Alertmanager, not for slack and wecom)")
    group_by: list[str] = Field(
        default_factory=lambda: ["alertname"], description="Labels that group alerts in one message")
    group_wait: Duration = Field(Duration("30s"), description="Wait before a new group's first message")
    group_interval: Duration = Field(Duration("5m"), description="Wait before a message about a changed group")
    repeat_interval: Duration = Field(Duration("4h"), description="Send a still-firing group again after this")
    # Secrets from files (a mounted Kubernetes secret, a credentials file): read once at start-up.
    url_file: Path | None = Field(None, description="File holding `url` (instead of writing it here)")
    secret_file: Path | None = Field(None, description="File holding `secret`")
    token_file: Path | None = Field(None, description="File holding `token`")
    url_env: str | None = Field(None, description="Environment variable holding `url`")
    secret_env: str | None = Field(None, description="Environment variable holding `secret`")
    token_env: str | None = Field(None, description="Environment variable holding `token`")
    max_alerts: int = Field(0, ge=0, description="Most alerts in one message, 0 = all (webhook truncatedAlerts)")
    timeout: Duration = Field(Duration("10s"), description="Deadline for one send")
    retry_deadline: Duration = Field(Duration("24h"), description="A notification still failing after this is dropped")

    @field_validator("url")
    @classmethod
    def _http_receiver(cls, value: SecretStr) -> SecretStr:
        http_url(value.get_secret_value(), "https://hooks.example.com/...")
        return value

    @pydantic.model_validator(mode="before")
    @classmethod
    def _files_and_defaults(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for key in ("url", "secret", "token"):
            path, variable = data.get(f"{key}_file"), data.get(f"{key}_env")
            if path is not None and data.get(key) is None:
                data[key] = _read_secret_file(Path(path), f"{key}_file")
            if variable is not None and data.get(key) is None:
                data[key] = _read_secret_env(str(variable), f"{key}_env")
        # Alertmanager's defaults: webhook sends resolved notifications, slack and wechat do not.
        # Feishu and DingTalk are not Alertmanager integrations: like webhook, they do.
        if "send_resolved" not in data:
            data["send_resolved"] = data.get("type") not in ("slack", "wecom")
        return data


def _read_secret_file(path: Path, key: str) -> str:
    try:
        text = path.read_text().strip()
    except OSError as exc:
        raise ValueError(f"{key}: cannot read {path}: {exc.strerror}") from None
    if not text:
        raise ValueError(f"{key}: {path} is empty")
    return text


def _read_secret_env(variable: str, key: str) -> str:
    value = os.environ.get(variable, "").strip()
    if not value:
        raise ValueError(f"{key}: environment variable {variable} is not set")
    return value


SHIPPED_RULE_FILES = ("infra", "service", "monitor", "cost", "canary", "quality", "trend", "kv")


class CauseSettings(_Section):
    """Thresholds of the probable-cause table (monitor/alerting/causes.py): when a fact stands out."""

    kv_cache_ratio: float = Field(0.9, ge=0, le=1, description="kv_cache_pressure: KV-cache usage at or above this ...")
    preemptions_per_second: float = Field(0.0, ge=0, description="... with preemptions above this rate")
    queue_waiting: float = Field(5.0, ge=0, description="queue_saturation: requests waiting at or above this ...")
    rank_imbalance_ratio: float = Field(
        2.0, ge=1, description="rank_imbalance: the busiest data-parallel rank's load at or above this x the mean")
    prefix_cache_baseline_ratio: float = Field(
        0.5, ge=0, le=1, description="prefix_cache_drop: the prefix-cache hit ratio below this share of its baseline's")
    prefix_cache_min_ratio: float = Field(
        0.2, ge=0, le=1, description="... where the baseline's hit ratio was at least this (below it, noise)")
    prefix_cache_min_requests: float = Field(
        20.0, ge=0, description="... over at least this many requests in the alert's window (fewer: noise)")
    gpu_busy_ratio: float = Field(0.9, ge=0, le=1, description="... while the target's GPUs are this busy")
    kv_swap_back_seconds: float = Field(
        0.05, gt=0, description="kv_swap_back: P99 of loading KV back from an offload tier at or above this")
    pd_transfer_share_ratio: float = Field(
        0.3, ge=0, le=1, description="pd_transfer: mean P/D KV transfer time at or above this share of the mean TTFT")
    pd_transfer_failures_per_second: float = Field(
        0.0, ge=0, description="pd_transfer: failed P/D KV transfers (or bootstraps) per second above this")
    kv_thrash_reload_ratio: float = Field(
        0.8, ge=0, description="kv_tier_thrashing: KV loaded back from a tier at or above this share of its evictions")
    moe_balancedness_ratio: float = Field(
        0.6, ge=0, le=1, description="moe_imbalance: MoE expert balancedness (mean over max load per GPU) below this")
    throttle_reasons: list[str] = Field(
        default_factory=lambda: ["sw_power_cap", "hw_slowdown", "sw_thermal", "hw_thermal", "hw_power_brake"],
        description="gpu_throttling: the clock-event reasons that count (thermal, power, hardware)",
    )  # names of NVML's reasons: checked in monitor/settings_check.py
    gpu_memory_ratio: float = Field(0.95, ge=0, le=1, description="gpu_memory: GPU memory used at or above this")
    error_ratio: float = Field(0.01, ge=0, le=1, description="engine_errors: error ratio at or above this")
    throughput_baseline_ratio: float = Field(
        0.7, ge=0, description="traffic_drop: throughput below this share of its baseline (with nobody waiting)")
    quality_min_samples: int = Field(30, ge=1, description="small_sample: fewer usable verdicts than this in a run")
    refusal_baseline_ratio: float = Field(2.0, ge=1, description="refusals_rose: refusal ratio this many times the "
                                          "baseline's")
    length_change_ratio: float = Field(0.3, ge=0, description="length_changed: mean output length moved this share")
    length_psi: float = Field(0.25, ge=0, description="length_shape_changed: output-length PSI against the baseline "
                              "at or above this (QualityOutputLengthDrift's threshold)")
    score_baseline_delta: float = Field(-0.5, le=0, description="score_fell: mean score this far below the baseline's")
    hallucination_ratio: float = Field(0.05, ge=0, le=1, description="hallucinations: share flagged above this")
    idle_ratio: float = Field(0.5, ge=0, le=1, description="idle_spend: share of the spend on idle GPUs above this")
    trend_gpu_ratio: float = Field(
        0.95, ge=0, le=1, description="trend_hardware: GPU power or SM clock at or below this share of a week ago")
    trend_load_ratio: float = Field(
        1.1, ge=1, description="trend_load: requests/s at or above this multiple of the same hours a week ago")
    trend_cache_ratio: float = Field(
        1.05, ge=1, description="trend_cache: KV-cache usage or preemptions at or above this multiple of a week ago")
    trend_prefix_ratio: float = Field(
        0.85, ge=0, le=1, description="trend_prefix_cache: prefix-cache hit ratio at or below this share of a week ago")


class AlertingSettings(_Section):
    enabled: bool = Field(True, description="Evaluate the rules in the monitor (false where Prometheus does)")
    rules_files: list[Path] = Field(
        default_factory=lambda: [Path(f"alerts/{name}.yml") for name in SHIPPED_RULE_FILES],
        description="Prometheus rule files the embedded evaluator loads (Prometheus loads the same files)",
    )
    evaluation_interval: Duration = Field(
        Duration("15s"), description="How often the embedded evaluator runs the rules")
    external_url: str | None = Field(None, description="This monitor's URL as users reach it (generatorURL)")
    runbook_base_url: str | None = Field(
        None, description="Prefix that turns runbook paths (docs/runbooks/...) into links, e.g. "
        "https://github.com/acme/inference-monitor/blob/main/"
    )
    receivers: list[ReceiverSettings] = Field(default_factory=list)
    causes: CauseSettings = Field(default_factory=CauseSettings, description="Probable-cause thresholds")

    @field_validator("external_url", "runbook_base_url")
    @classmethod
    def _http_links(cls, value: str | None) -> str | None:
        return None if value is None else http_url(value, "https://infermon.example.com/")

    @field_validator("receivers")
    @classmethod
    def _unique_receivers(cls, value: list[ReceiverSettings]) -> list[ReceiverSettings]:
        names = [r.name for r in value]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"duplicate receiver names: {duplicates}")
        return value


class Price(_Section):
    """A price per GPU-hour, in exactly one currency."""

    usd_per_hour: float | None = Field(None, ge=0, description="Price per GPU-hour in USD")
    cny_per_hour: float | None = Field(None, ge=0, description="Price per GPU-hour in CNY (needs cost.cny_per_usd)")

    @model_validator(mode="after")
    def _one_currency(self) -> Price:
        if (self.usd_per_hour is None) == (self.cny_per_hour is None):
            raise ValueError("give exactly one of usd_per_hour, cny_per_hour")
        return self


class StaticGpus(_Section):
    """GPUs the monitor cannot see (no NVML, no dcgm-exporter) but pays for."""

    model: str = Field(min_length=1, description="Model name as NVML reports it, e.g. NVIDIA H200")
    count: int = Field(ge=1, le=4096, description="How many of them")
    node: str = Field(min_length=1, description="Node they are on (label `node`)")


class CostSettings(_Section):
    currency: Literal["USD", "CNY"] = Field("USD", description="Reporting currency of /api/v1/cost (metrics stay USD)")
    cny_per_usd: float | None = Field(None, gt=0, description="Exchange rate for prices quoted in CNY")
    daily_budget_usd: float | None = Field(None, gt=0, description="inference_cost_budget_used_ratio's denominator")
    timezone: str = Field("UTC", description="Where a budget day starts and ends (IANA name, e.g. Asia/Shanghai)")
    gpu_prices: dict[str, Price] = Field(default_factory=dict, description="Per GPU model, over the defaults")
    node_prices: dict[str, Price] = Field(default_factory=dict, description="Per node: overrides the model's price")
    static_gpus: list[StaticGpus] = Field(default_factory=list)
    expensive_factor: float = Field(
        2.0, ge=1.0, description="A request is expensive when its prompt or output exceeds this x the baseline P99"
    )
    max_gap: Duration = Field(
        Duration("15m"), description="Downtime up to this long accrues at the last spend rate; longer is not guessed"
    )

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError("unknown time zone (use an IANA name, e.g. Asia/Shanghai)") from None
        return value

    @model_validator(mode="after")
    def _rate_for_cny(self) -> CostSettings:
        if self.cny_per_usd is not None:
            return self
        quoted = [f"gpu_prices.{k}" for k, p in self.gpu_prices.items() if p.cny_per_hour is not None]
        quoted += [f"node_prices.{k}" for k, p in self.node_prices.items() if p.cny_per_hour is not None]
        if self.currency == "CNY":
            quoted.append("currency")
        if quoted:
            raise ValueError(f"cny_per_usd is needed: {', '.join(quoted)} in CNY")
        return self


class RequestLogSource(_Section):
    """Samples posted to POST /api/v1/samples, kept in the store for `retention`."""

    type: Literal["requestlog"] = Field(description="requestlog: samples posted to POST /api/v1/samples")
    retention: Duration = Field(Duration("30d"), description="Stored samples older than this are pruned")


class JsonlSource(_Section):
    """Files of sample objects, one a line (the request-log shape)."""

    type: Literal["jsonl"] = Field(description="jsonl: files of samples")
    paths: list[Path] = Field(min_length=1, description="JSONL files (globs allowed)")


class LangfuseSource(_Section):
    """Generations of the day from Langfuse's public API; scores written back."""

    type: Literal["langfuse"] = Field(description="langfuse: generations from Langfuse's public API")
    host: str = Field("https://cloud.langfuse.com", description="Langfuse base URL")
    public_key_env: str = Field("LANGFUSE_PUBLIC_KEY", description="Environment variable holding the public key")
    secret_key_env: str = Field("LANGFUSE_SECRET_KEY", description="Environment variable holding the secret key")
    write_scores: bool = Field(True, description="Write the judge's scores back to the traces")
    page_size: int = Field(100, ge=1, le=1000, description="Generations asked for per API page")
    timeout: Duration = Field(Duration("30s"), description="Deadline of one API call")

    @field_validator("host")
    @classmethod
    def _http_host(cls, value: str) -> str:
        return http_url(value, "https://cloud.langfuse.com")


SampleSource = Annotated[RequestLogSource | JsonlSource | LangfuseSource, Field(discriminator="type")]


class JudgeSettings(_Section):
    base_url: str = Field("https://api.openai.com/v1", description="Any OpenAI-compatible Chat Completions endpoint")
    model: str = Field("gpt-5", description="The judge model's name at base_url")
    api_key_env: str = Field("OPENAI_API_KEY", description="Environment variable holding the API key")
    concurrency: int = Field(8, ge=1, le=256, description="Judge calls in flight at once")
    timeout: Duration = Field(Duration("60s"), description="Deadline of one judge call")
    max_retries: int = Field(4, ge=0, le=20, description="Retries on 429, 5xx and timeouts (exponential backoff)")
    structured_output: bool = Field(True, description="Ask for the JSON schema (else: the fallback parser)")
    max_tokens: int = Field(512, ge=16, le=32768,
                            description="Bound of every judge answer: a judge that never closes its JSON stops here")
    # No default price list: a self-hosted judge costs nothing per token, and a hosted one's price
    # is whatever its contract says. 0 (the default) is "unpriced", and the run says so.
    usd_per_million_input_tokens: float = Field(0.0, ge=0, description="Judge input price (0: unpriced)")
    usd_per_million_output_tokens: float = Field(0.0, ge=0, description="Judge output price (0: unpriced)")
    calibration: str | None = Field(
        None, description="JSON-lines gold set judged blind in every run (replaces the shipped set; 'off': none)")
    calibration_min_kappa: float = Field(
        0.6, ge=-1, le=1, description="Weighted kappa on the gold set below which a run is uncalibrated")
    calibration_min_within_one: float = Field(
        0.8, ge=0, le=1, description="Share of gold scores within 1 of the expected below which a run is uncalibrated")
    calibration_min_flag_agreement: float = Field(
        0.8, ge=0, le=1, description="Flag agreement on the gold set below which a run is uncalibrated")

    @field_validator("base_url")
    @classmethod
    def _http_base(cls, value: str) -> str:
        return http_url(value, "http://10.0.0.5:8000/v1")


class CustomPattern(_Section):
    name: str = Field(min_length=1, description="Name of the pattern (replaces what it matches: [name])")
    pattern: str = Field(description="Regular expression of the text to redact")

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from None
        return value


def _default_sources() -> list[RequestLogSource | JsonlSource | LangfuseSource]:
    return [RequestLogSource(type="requestlog")]


def _default_redact() -> list[str | CustomPattern]:
    return ["email", "phone", "id_number", "api_key"]


class QualitySettings(_Section):
    enabled: bool = Field(True, description="Schedule the daily run in `infermon serve`")
    schedule: str = Field("0 2 * * *", description="Cron expression of the daily run (for the previous day)")
    timezone: str = Field("UTC", description="Time zone of the schedule and of a run's day")
    sample_size: int = Field(100, ge=1, le=100_000, description="Responses judged per model and day")
    baseline_days: int = Field(7, ge=1, le=365, description="Days before the run that make its baseline")
    baseline_min_coverage: float = Field(
        0.9, gt=0, le=1, description="Share of the baseline days that need a finished run before it counts")
    sources: list[SampleSource] = Field(default_factory=lambda: _default_sources(),
                                        description="Where the day's responses come from")
    judge: JudgeSettings = Field(default_factory=JudgeSettings, description="The LLM judge")
    # A name is one of the quality layer's built-in patterns: checked in monitor/settings_check.py.
    redact: list[str | CustomPattern] = Field(
        default_factory=lambda: _default_redact(),
        description="Redacted before a sample is stored or judged: built-in pattern names or {name, pattern}")
    refresh_interval: Duration = Field(Duration("30s"), description="How often serve re-reads the latest stored runs")
    max_body_bytes: int = Field(4_000_000, gt=0, description="Largest POST /api/v1/samples body")
    max_text_chars: int = Field(100_000, gt=0, description="Longest prompt, response, context or reference")

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str) -> str:
        return known_zone(value)

    @field_validator("schedule")
    @classmethod
    def _cron(cls, value: str) -> str:
        from apscheduler.triggers.cron import CronTrigger

        try:
            CronTrigger.from_crontab(value)
        except ValueError as exc:
            raise ValueError(f"not a cron expression: {exc}") from None
        return value


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="INFERMON_", env_nested_delimiter="__", extra="forbid", case_sensitive=False
    )

    server: ServerSettings = Field(default_factory=ServerSettings)
    service: ServiceSettings = Field(default_factory=ServiceSettings)
    infra: InfraSettings = Field(default_factory=InfraSettings)
    storage: StorageSettings = Field(default_factory=StorageSettings)
    api: ApiSettings = Field(default_factory=ApiSettings)
    alerting: AlertingSettings = Field(default_factory=AlertingSettings)
    canary: CanarySettings = Field(default_factory=lambda: CanarySettings())

    @model_validator(mode="after")
    def _canary_references(self) -> Settings:
        check_canary_references(self.canary, self.service)
        return self

    @model_validator(mode="after")
    def _digest_receivers(self) -> Settings:
        check_digest_receivers(self.history.digest, self.alerting)
        return self
    cost: CostSettings = Field(default_factory=CostSettings)
    quality: QualitySettings = Field(default_factory=QualitySettings)
    history: HistorySettings = Field(default_factory=HistorySettings)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The environment overrides the file (which arrives as init arguments).
        return env_settings, init_settings


def load_settings(path: str | Path | None = None, overrides: dict[str, Any] | None = None) -> Settings:
    """Settings from a YAML file (optional) and the environment, as the model alone checks them;
    ConfigError names the key. `infermon` and the runtime load with `settings_check.load_checked_settings`,
    which adds the checks that need a layer."""
    data: dict[str, Any] = {}
    if path is not None:
        data = _read_yaml(Path(path))
    for key, value in (overrides or {}).items():
        data.setdefault(key, {}).update(value)
    try:
        return Settings(**data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, path)) from None
    except SettingsError as exc:  # an environment value pydantic-settings could not decode (a list not in JSON)
        raise ConfigError(_describe_undecodable(exc)) from None


def _describe_undecodable(exc: SettingsError) -> str:
    """Names the section's variables, never their values (a value may be a token)."""
    section = re.search(r'field "(\w+)"', str(exc))
    name = section.group(1) if section else ""
    which = ", ".join(env_vars_under(name, os.environ) if name else []) or "an INFERMON_ variable"
    return (f"{which} (environment): {name or 'a setting'}: a value cannot be read: a list or a mapping "
            'in the environment is written as JSON, e.g. INFERMON_SERVICE__WINDOWS=\'["1m", "5m"]\'')


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        loaded = yaml.safe_load(path.read_bytes().decode("utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not valid UTF-8 at byte {exc.start}") from None
    except RecursionError:
        raise ConfigError(f"{path}: not valid YAML: nested too deep") from None
    except yaml.YAMLError as exc:  # where and what, never the text around it: it may hold a token
        raise ConfigError(f"{path}: not valid YAML: {yaml_problem(exc)}") from None
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections")
    return loaded


def yaml_problem(exc: yaml.YAMLError) -> str:
    """`line 3, column 9: mapping values are not allowed here`: PyYAML's own message quotes the
    lines around the mistake, which for a typo on a token line is the token."""
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        return f"{where}{exc.problem or exc.context or 'cannot be parsed'}"
    return type(exc).__name__


def _describe(exc: ValidationError, path: str | Path | None) -> str:
    problems: list[tuple[Loc, str]] = []
    for error in exc.errors():
        loc = error["loc"]
        reason = error["msg"].removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            near = suggest(Settings, loc)
            reason = f"unknown key (did you mean {near!r}?)" if near else "unknown key"
        problems.append((loc, reason))
    return describe_problems(problems, path)


def describe_problems(problems: list[tuple[Loc, str]], path: str | Path | None) -> str:
    """One line a problem: where its value was set (the INFERMON_ variable, else the file), the key, the reason.

    `service.targets.0.engine: unknown engine: one of vllm, sglang, tgi`, after `PATH: ` or
    `INFERMON_SERVICE__TARGETS (environment): `; URLs in a reason lose their secrets.
    """
    lines = []
    for loc, reason in problems:
        key = ".".join(str(part) for part in loc) or "(top level)"
        variable = env_var_for(loc, os.environ) if loc else None
        where = f"{variable} (environment): " if variable else f"{path}: " if path else ""
        lines.append(f"{where}{key}: {redact_urls(reason)}")
    return "\n".join(lines)


# ---- canary: streaming probes through the OpenAI-compatible API ------------------


class CanaryProbe(_Section):
    """One synthetic user: a small streaming chat completion every `interval`."""

    name: str = Field(min_length=1, description="Label value `probe` on every canary series")
    base_url: str = Field(description="The OpenAI-compatible API as clients call it, e.g. http://10.0.0.5:8000/v1")
    model: str = Field(min_length=1, description="Model to ask (label `model`)")
    interval: Duration = Field(Duration("60s"), description="One probe per interval (never two at once)")
    timeout: Duration = Field(Duration("30s"), description="Deadline for the whole probe, first byte to last token "
                              "(default: 30s, or the interval where that is shorter)")
    api_key_env: str | None = Field(None, description="Environment variable holding the API key (never logged)")
    prompt: str = Field("Say hello in five words.", min_length=1, description="The probe's user message")
    nonce: bool = Field(True, description="Start each probe's prompt with a short random nonce, so the engine's "
                        "prefix cache cannot answer it: the TTFT measured is a new user's")
    max_tokens: int = Field(32, ge=1, le=4096, description="A small answer: the probe costs one short request")
    expect: str | None = Field(None, description="Regular expression (a plain word is one) the answer must contain")
    target: str | None = Field(None, description="The service target it reaches (for the TTFT gap)")

    @field_validator("base_url")
    @classmethod
    def _http_base(cls, value: str) -> str:
        if not re.match(r"^https?://[^/\s]+", value):
            raise ValueError("not an http(s) URL (http://host:port/v1)")  # never quoted: it may hold a key
        return value.rstrip("/")

    @field_validator("expect")
    @classmethod
    def _regex(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a regular expression: {exc}") from None
        return value

    @field_validator("api_key_env")
    @classmethod
    def _key_present(cls, value: str | None) -> str | None:
        # Checked at start-up, so a missing key is a configuration error, not a failing probe.
        if value is not None and not os.environ.get(value):
            raise ValueError(f"environment variable {value} is not set")
        return value

    @model_validator(mode="before")
    @classmethod
    def _default_timeout(cls, data: Any) -> Any:
        # No timeout given: 30 s, or the interval when that is shorter (`interval: 5s` alone is valid).
        if isinstance(data, dict) and data.get("timeout") is None and "interval" in data:
            try:
                interval = Duration._validate(data["interval"])
            except ValueError:
                return data  # the field's own validation names the key
            data = {**data, "timeout": min(Duration("30s"), interval, key=lambda d: d.seconds)}
        return data

    @model_validator(mode="after")
    def _timeout_fits(self) -> CanaryProbe:
        if self.timeout.seconds > self.interval.seconds:
            raise ValueError(f"timeout {self.timeout} is longer than interval {self.interval}: probes would overlap")
        return self


class CanarySettings(_Section):
    probes: list[CanaryProbe] = Field(default_factory=list)
    user: str = Field("infermon-canary", min_length=1,
                      description="The OpenAI `user` field of every probe (exclude it from usage reports)")
    gap_window: Duration | None = Field(None, description="Window of the engine's P50 TTFT (default: the shortest)")

    @field_validator("probes")
    @classmethod
    def _unique_probes(cls, value: list[CanaryProbe]) -> list[CanaryProbe]:
        names = [p.name for p in value]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"duplicate probe names: {duplicates}")
        return value


def check_digest_receivers(digest: DigestSettings, alerting: AlertingSettings) -> None:
    """The digest's receivers are configured receivers that take a free-text message; an enabled
    digest has at least one."""
    kinds = {r.name: r.type for r in alerting.receivers}
    if digest.enabled and not digest.receivers:
        raise ValueError("history.digest.receivers: the digest is enabled but names no receiver "
                         f"(known: {sorted(kinds)})")
    for i, name in enumerate(digest.receivers):
        if name not in kinds:
            raise ValueError(f"history.digest.receivers.{i}: no receiver named {name!r} in alerting.receivers "
                             f"(known: {sorted(kinds)})")
        if kinds[name] not in DIGEST_RECEIVER_TYPES:
            raise ValueError(f"history.digest.receivers.{i}: receiver {name!r} of type {kinds[name]!r} cannot take "
                             f"a free-text message (types that can: {sorted(DIGEST_RECEIVER_TYPES)})")


def check_canary_references(canary: CanarySettings, service: ServiceSettings) -> None:
    """Probe targets name service targets; the gap window is one of the service windows."""
    known = [t.name for t in service.targets]
    for i, probe in enumerate(canary.probes):
        if probe.target is not None and probe.target not in known:
            raise ValueError(f"canary.probes.{i}.target: no service target named {probe.target!r} (known: {known})")
    windows = [w.text for w in service.windows]
    if canary.gap_window is not None and canary.gap_window not in service.windows:
        raise ValueError(f"canary.gap_window: {canary.gap_window} is not one of service.windows {windows}")


Settings.model_rebuild()  # `canary` is declared above its section's classes
