"""Our text writer against prometheus_client's own generate_latest, byte for byte."""

import math

from prometheus_client import generate_latest
from prometheus_client.core import Metric

from monitor.exporter import TextWriter, make_registry


def families() -> list[Metric]:
    gauge = Metric("inference_x_ratio", 'help with \\ and\nnewline and "quotes"', "gauge")
    gauge.add_sample("inference_x_ratio", {"b": "2", "a": 'q"uo\\te\nnl'}, 0.5)
    gauge.add_sample("inference_x_ratio", {}, math.nan)
    gauge.add_sample("inference_x_ratio", {"a": "inf"}, math.inf)
    gauge.add_sample("inference_x_ratio", {"a": "-inf"}, -math.inf)
    gauge.add_sample("inference_x_ratio", {"a": "big"}, 123456789.0)
    gauge.add_sample("inference_x_ratio", {"a": "small"}, 1e-9)
    counter = Metric("inference_y", "a counter", "counter")
    counter.add_sample("inference_y_total", {"node": "n", "gpu": "0"}, 42.0)
    summary = Metric("inference_z_seconds", "a summary", "summary")
    summary.add_sample("inference_z_seconds", {"quantile": "0.99", "model": "m"}, 0.25)
    return [gauge, counter, summary]


def test_writer_equals_generate_latest_and_cache_stays_right() -> None:
    registry = make_registry([families])
    writer = TextWriter()
    first = writer.render(registry)
    assert first == generate_latest(registry)
    assert writer.render(registry) == first  # second render comes from the label cache
