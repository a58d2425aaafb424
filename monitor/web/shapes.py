"""The overview's data, typed: what `overview()` builds, and what the page (`/`), `infermon status`
and `/api/v1/status` (under "overview") read.

TypedDicts, not classes: the overview is JSON as it is made (its keys, in the order they are built,
are the API's), and `infermon status` reads it back from that JSON. A key marked `NotRequired` is
absent, not null, where its row has no such number (a GPU without a reading); a target's rows are
a `TargetRow` while it shows no model and a `ModelRow` per model once it does.
"""

from __future__ import annotations

from typing import NotRequired, TypedDict

from monitor.alerting.embedded import ActiveAlertRow
from monitor.alerting.outbox import TransitionRow
from monitor.history.summary import TrendRow
from monitor.store.session import EventRow


class LayerState(TypedDict):
    state: str  # ok | firing | failing | not configured
    detail: str


class WindowNumbers(TypedDict):
    """A target's or the fleet's headline numbers in the overview's window."""

    requests_per_second: float | None
    error_ratio: float | None
    generation_tokens_per_second: float | None
    ttft_p50_seconds: float | None
    ttft_p99_seconds: float | None
    tpot_p50_seconds: float | None
    tpot_p99_seconds: float | None
    # every observation under the first bucket's bound: the quantiles read "< bound"
    ttft_below_seconds: float | None
    tpot_below_seconds: float | None


class LoraFacts(TypedDict):
    running: list[str]
    waiting: list[str]
    max: int | None


class EngineFacts(TypedDict):
    """What an engine's page says beyond the headline numbers; `facts`: the same as one short line."""

    ranks: int | None
    rank_imbalance_ratio: float | None
    waiting_by_reason: dict[str, float] | None
    prefix_cache_hit_ratio: float | None
    prefix_cache_hit_ratio_baseline: float | None
    spec_decode_acceptance_ratio: float | None
    spec_decode_acceptance_ratio_baseline: float | None
    engines_sleeping: float | None
    lora: LoraFacts | None
    facts: str


class TargetHead(TypedDict):
    """What every row of a target says of the target."""

    target: str
    up: bool | None  # None: not scraped yet
    state: str  # up | stale | down | waiting | unrecognized
    detail: str | None
    engine: str | None
    generation: str | None
    note: str


class TargetRow(TargetHead):
    """The row of a target that is down, not scraped yet, or shows no model: `model` is None."""

    model: str | None


class ModelRow(TargetRow, WindowNumbers, EngineFacts):
    """One model of a target that is up: its numbers in the overview's window."""

    baseline: str  # ready, or how much of the baseline window is covered yet
    running: float | None
    waiting: float | None
    kv_cache_ratio: float | None


class FleetRow(WindowNumbers):
    model: str


class Objectives(TypedDict):
    ttft_seconds: float
    tpot_seconds: float


class ServiceSection(TypedDict):
    configured: bool
    window: str
    rows: list[TargetRow | ModelRow]
    fleet: list[FleetRow]
    objectives: Objectives


class GpuRow(TypedDict):
    node: str
    gpu: str
    source: str
    up: bool
    error: str | None
    model: str | None
    health: str | None  # critical | warning | ok; None: the source reports no health field
    health_reasons: list[str]
    # the rest only while the GPU has a reading
    utilization_ratio: NotRequired[float | None]
    memory_used_bytes: NotRequired[float | None]
    memory_total_bytes: NotRequired[float | None]
    memory_used_ratio: NotRequired[float | None]
    temperature_celsius: NotRequired[float | None]
    power_watts: NotRequired[float | None]
    power_limit_watts: NotRequired[float | None]
    power_used_ratio: NotRequired[float | None]
    clock_events: NotRequired[list[str]]


class InfraSection(TypedDict):
    configured: bool
    rows: list[GpuRow]


class QualityRow(TypedDict):
    model: str
    date: str
    finished: float
    samples: int | None
    score_mean: float | None
    score_baseline_delta: float | None
    histogram: list[int]  # how many samples scored 1, 2, 3, 4, 5
    refusal_ratio: float | None
    hallucination_ratio: float | None
    psi: float | None
    length_change_ratio: float | None
    judge_errors: int | None
    suspect_verdicts: int | None
    failed: str | None
    report: str
    uncalibrated: str | None
    judge_changed: str | None
    judge_kappa: float | None
    known_answers: int | None


class QualitySection(TypedDict):
    configured: bool
    rows: list[QualityRow]
    judge_cost_usd_total: float


class PerMillion(TypedDict):
    model: str
    window: str
    tokens: str  # generated | all
    usd: float


class FleetPerMillion(TypedDict):
    window: str
    tokens: str
    usd: float


class CostSection(TypedDict):
    configured: bool
    usd_per_hour: float | None
    idle_usd_per_hour: float | None
    idle_ratio: float | None
    per_million: list[PerMillion]
    fleet_per_million: list[FleetPerMillion]
    unmapped_targets: list[str]
    day: str
    today_usd: float | None
    budget_usd: float | None
    budget_used_ratio: float | None
    unpriced_gpus: int


class CanaryRow(TypedDict):
    """A probe's last outcome (the keys of the canary's status the overview keeps)."""

    name: str
    model: str
    target: str | None
    up: bool | None
    outcome: str | None
    detail: str | None
    last_probe: float | None
    ttft_seconds: float | None
    ttft_gap_seconds: float | None
    e2e_seconds: float | None
    consecutive_failures: int


class AlertRow(ActiveAlertRow):
    layer: str | None
    name: str
    probable_cause: str | None
    deliveries: dict[str, str]  # receiver -> delivery state; empty while pending


class AlertsSection(TypedDict):
    enabled: bool
    active: list[AlertRow]  # the first SHOWN_ALERTS, firing first
    firing: int  # in all, listed or not
    pending: int
    recent: list[TransitionRow]


class Chart(TypedDict):
    key: str
    title: str
    unit: str
    points: list[tuple[float, float]]
    substitute_for: str | None  # the title of the chart this one stands in for


class Overview(TypedDict):
    ts: float
    window: str
    ok: bool
    layers: dict[str, LayerState]
    service: ServiceSection
    infra: InfraSection
    quality: QualitySection
    cost: CostSection
    canary: list[CanaryRow]
    alerts: AlertsSection
    events: list[EventRow]
    trends: list[TrendRow]
    charts: list[Chart]
