"""Engines built on the real prometheus_client: vLLM V1 and SGLang metric names in a registry.

Each `FakeEngine` registers the names its engine registers (colons and all) and `step()` records
a fixed, deterministic amount of traffic, so every scrape sees counters and buckets move. The
registry is then served by prometheus_client's own servers (start_http_server, make_asgi_app) or
rendered by its own writers, so the pages are what the current release really writes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
TOKEN_BUCKETS = (0.005, 0.01, 0.02, 0.05, 0.1, 0.25)


@dataclass
class FakeEngine:
    """Names of one engine, plus the knobs `step` turns."""

    engine: str
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    steps: int = 0

    def __post_init__(self) -> None:
        names = _VLLM if self.engine == "vllm" else _SGLANG
        labels = ["model_name", "engine"] if self.engine == "vllm" else ["model_name"]
        self.running = Gauge(names["running"], "Requests running", labels, registry=self.registry)
        self.waiting = Gauge(names["waiting"], "Requests waiting", labels, registry=self.registry)
        self.kv = Gauge(names["kv"], "KV cache usage", labels, registry=self.registry)
        success_labels = [*labels, "finished_reason"] if self.engine == "vllm" else labels
        self.requests = Counter(names["requests"], "Finished requests", success_labels, registry=self.registry)
        self.prompt = Counter(names["prompt"], "Prompt tokens", labels, registry=self.registry)
        self.generated = Counter(names["generated"], "Generated tokens", labels, registry=self.registry)
        self.ttft = Histogram(names["ttft"], "TTFT", labels, buckets=LATENCY_BUCKETS, registry=self.registry)
        self.e2e = Histogram(names["e2e"], "E2E", labels, buckets=LATENCY_BUCKETS, registry=self.registry)
        self.tpot = Histogram(names["tpot"], "TPOT", labels, buckets=TOKEN_BUCKETS, registry=self.registry)
        # A family the monitor does not read, registered last: the last block of the page.
        Gauge(names["unread"], "Config", labels, registry=self.registry).labels(*self._labels()).set(1)

    def _labels(self) -> list[str]:
        return [MODEL, "0"] if self.engine == "vllm" else [MODEL]

    def step(self) -> None:
        """One scrape interval of traffic: 20 requests, 2 of them slow."""
        self.steps += 1
        labels = self._labels()
        self.running.labels(*labels).set(4 + self.steps)
        self.waiting.labels(*labels).set(self.steps % 3)
        self.kv.labels(*labels).set(0.25 + 0.05 * self.steps)
        for index in range(20):
            done = self.requests.labels(*labels, "stop") if self.engine == "vllm" else self.requests.labels(*labels)
            done.inc()
            self.prompt.labels(*labels).inc(100)
            self.generated.labels(*labels).inc(40)
            slow = index % 10 == 9
            self.ttft.labels(*labels).observe(0.6 if slow else 0.04 + 0.002 * index)
            self.e2e.labels(*labels).observe(3.0 if slow else 0.8)
            self.tpot.labels(*labels).observe(0.03 if slow else 0.015)


_VLLM = {
    "running": "vllm:num_requests_running", "waiting": "vllm:num_requests_waiting",
    "kv": "vllm:kv_cache_usage_perc", "requests": "vllm:request_success",
    "prompt": "vllm:prompt_tokens", "generated": "vllm:generation_tokens",
    "ttft": "vllm:time_to_first_token_seconds", "e2e": "vllm:e2e_request_latency_seconds",
    "tpot": "vllm:request_time_per_output_token_seconds", "unread": "vllm:cache_config_info",
}
_SGLANG = {
    "running": "sglang:num_running_reqs", "waiting": "sglang:num_queue_reqs",
    "kv": "sglang:token_usage", "requests": "sglang:num_requests",
    "prompt": "sglang:prompt_tokens", "generated": "sglang:generation_tokens",
    "ttft": "sglang:time_to_first_token_seconds", "e2e": "sglang:e2e_request_latency_seconds",
    "tpot": "sglang:inter_token_latency_seconds", "unread": "sglang:cache_hit_rate",
}


def prefixed(text: str, prefix: str) -> str:
    """A text page with every metric name behind `prefix`, as KServe's queue-proxy republishes it."""
    text = re.sub(r"(?m)^# (HELP|TYPE) ", lambda m: f"# {m.group(1)} {prefix}", text)
    return re.sub(r"(?m)^(?=[a-zA-Z_:])", prefix, text)
