"""Router pages (NVIDIA Dynamo's frontend, the Gateway API Inference Extension's endpoint picker),
written by prometheus_client with the names, types, labels and default buckets the routers' own
code declares (Dynamo: lib/llm/src/http/service/metrics.rs; GAIE: pkg/epp/metrics/metrics.go)."""

from __future__ import annotations

import math
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

MODEL = "Qwen/Qwen3-32B"


def log_buckets(low: float, high: float, count: int) -> tuple[float, ...]:
    """Dynamo's default buckets: `count` log-spaced bounds from `low` to `high`, each rounded to two
    significant figures, duplicates dropped."""
    bounds: list[float] = []
    for i in range(count):
        value = math.exp(math.log(low) + (math.log(high) - math.log(low)) * i / (count - 1))
        scale = 10 ** (1 - math.floor(math.log10(value)))
        rounded = round(value * scale) / scale
        if not bounds or bounds[-1] != rounded:
            bounds.append(rounded)
    return tuple(bounds)


class DynamoFrontend:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter("dynamo_frontend_requests_total", "Total number of LLM requests processed",
                                ["model", "endpoint", "request_type", "status"], registry=r)
        self.inflight = Gauge("dynamo_frontend_inflight_requests", "Number of inflight requests", ["model"], registry=r)
        self.queued = Gauge("dynamo_frontend_queued_requests", "Number of requests in HTTP processing queue",
                            ["model"], registry=r)
        self.ttft = Histogram("dynamo_frontend_time_to_first_token_seconds", "Time to first token in seconds",
                              ["model"], buckets=log_buckets(0.001, 480.0, 18), registry=r)
        self.itl = Histogram("dynamo_frontend_inter_token_latency_seconds", "Inter-token latency in seconds",
                             ["model"], buckets=log_buckets(0.001, 2.0, 13), registry=r)
        self.duration = Histogram("dynamo_frontend_request_duration_seconds", "Duration of LLM requests",
                                  ["model"], buckets=log_buckets(1.0, 256.0, 10), registry=r)
        self.isl = Histogram("dynamo_frontend_input_sequence_tokens", "Input sequence length in tokens", ["model"],
                             buckets=log_buckets(50.0, 128000.0, 12), registry=r)

    def serve(self, ttft: Iterable[float], itl: Iterable[float], durations: Iterable[float], errors: int = 0) -> None:
        for value in ttft:
            self.ttft.labels(MODEL).observe(value)
        for value in itl:
            self.itl.labels(MODEL).observe(value)
        for value in durations:
            self.duration.labels(MODEL).observe(value)
            self.isl.labels(MODEL).observe(800)
            self.requests.labels(MODEL, "chat_completions", "stream", "success").inc()
        self.requests.labels(MODEL, "chat_completions", "stream", "error").inc(errors)

    def page(self, inflight: float, queued: float) -> str:
        self.inflight.labels(MODEL).set(inflight)
        self.queued.labels(MODEL).set(queued)
        return generate_latest(self.registry).decode()


class EndpointPicker:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        pair = ["model_name", "target_model_name"]
        self.requests = Counter("inference_objective_request_total", "Counter of inference objective requests "
                                "broken out for each model and target model.", pair, registry=r)
        self.errors = Counter("inference_objective_request_error_total", "Counter of inference objective requests "
                              "errors broken out for each model and target model.", [*pair, "error_code"], registry=r)
        self.duration = Histogram("inference_objective_request_duration_seconds", "Inference objective response "
                                  "latency distribution in seconds for each model and target model.", pair,
                                  buckets=(0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2, 3, 4, 5, 6,
                                           8, 10, 15, 20, 30, 45, 60, 120, 180, 240, 300, 360, 480, 600, 900, 1200,
                                           1800, 2700, 3600), registry=r)
        self.ntpot = Histogram("inference_objective_normalized_time_per_output_token_seconds", "Inference objective "
                               "latency divided by number of output tokens in seconds for each model and target model.",
                               pair, registry=r,
                               buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0))
        self.running = Gauge("inference_objective_running_requests", "Inference objective number of running "
                             "requests in each model.", ["model_name"], registry=r)
        self.ready = Gauge("inference_pool_ready_pods", "The number of ready pods in the inference server pool.",
                           ["name"], registry=r)
        self.queue = Gauge("inference_pool_per_pod_queue_size", "The total number of requests pending in the model "
                           "server queue for each underlying pod.", ["name", "model_server_pod"], registry=r)

    def serve(self, durations: Iterable[float], ntpot: Iterable[float], errors: int = 0) -> None:
        for value in durations:
            self.requests.labels(MODEL, MODEL).inc()
            self.duration.labels(MODEL, MODEL).observe(value)
        for value in ntpot:
            self.ntpot.labels(MODEL, MODEL).observe(value)
        self.errors.labels(MODEL, MODEL, "ServiceUnavailable").inc(errors)

    def page(self, running: float, queued: tuple[float, float]) -> str:
        self.running.labels(MODEL).set(running)
        self.ready.labels("pool").set(2)
        for pod, size in zip(("pod-a", "pod-b"), queued, strict=True):
            self.queue.labels("pool", pod).set(size)
        return generate_latest(self.registry).decode()
