"""vLLM V1's histogram bucket lists, as served on its /metrics page (the simulator copies them
so `histogram_quantile()` over the simulator behaves exactly as over a real server)."""

from __future__ import annotations


def build_buckets(mantissas: list[int], max_value: int) -> list[float]:
    """1-2-5 style series up to max_value: [1, 2, 5, 10, 20, 50, ...] (vLLM's helper)."""
    buckets: list[float] = []
    exponent = 0
    while True:
        for mantissa in mantissas:
            value = mantissa * 10**exponent
            if value > max_value:
                return buckets
            buckets.append(float(value))
        exponent += 1


def token_count_buckets(max_model_len: int) -> list[float]:
    return build_buckets([1, 2, 5], max_model_len)


REQUEST_PARAMS_N = [1.0, 2.0, 5.0, 10.0, 20.0]

# Derived by vLLM from the CUDA-graph capture sizes; this is the list a default
# `vllm serve` of an 8B model prints.
ITERATION_TOKENS = [1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0,
                    4096.0, 8192.0, 16384.0]  # fmt: skip

TIME_TO_FIRST_TOKEN = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
                       1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0,
                       2560.0]  # fmt: skip

# Shared by inter_token_latency_seconds and request_time_per_output_token_seconds.
PER_OUTPUT_TOKEN = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0,
                    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0]  # fmt: skip

# Shared by e2e, queue, inference, prefill and decode time.
REQUEST_LATENCY = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
                   50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0]  # fmt: skip

# prometheus-fastapi-instrumentator's default for http_request_duration_seconds.
HTTP_DURATION = [0.1, 0.5, 1.0]
