"""Our text writer against prometheus_client's own generate_latest, byte for byte."""

import math
import random

import pytest
from prometheus_client import generate_latest
from prometheus_client.core import Metric
from prometheus_client.utils import floatToGoString

from monitor.exporter import TextWriter, _go_float, make_registry


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


def test_values_are_written_as_prometheus_client_writes_them() -> None:
    tricky = [0.0, -0.0, 1.0, -1.0, 0.1, 1e-9, 5e-324, 2.0**53, 1e15, 1e16, 1.5e16, 1e21, 1e22, 1e300,
              123456.7, 999999.9999999999, 1e6, -999999.9999999999, -1e6, 1234567.0, 9999999.5,
              12345678.25, -1234567.0, -1e22, 0.5e-4, 1e-5, math.inf,
              -math.inf, math.nan, 1.7976931348623157e308]
    rng = random.Random(7)
    values = tricky + [rng.uniform(-1, 1) * 10.0 ** rng.randint(-12, 24) for _ in range(5000)]
    assert [_go_float(v) for v in values] == [floatToGoString(v) for v in values]


def test_the_body_encoded_a_piece_at_a_time_is_the_whole_join(monkeypatch: pytest.MonkeyPatch) -> None:
    from monitor import exporter

    monkeypatch.setattr(exporter, "CHUNK", 4096)
    parts = [f'm{{target="t{i}",model="é{i % 7}"}} {i * 0.5}\n' for i in range(3000)]
    parts[1000] = "x" * 100_000 + "\n"  # a family's whole text as one part
    chunks = exporter.encode_chunks(parts)
    assert b"".join(chunks) == "".join(parts).encode()
    # Cut between parts (so at line ends), each piece about CHUNK characters; a part is never split.
    assert all(chunk.endswith(b"\n") for chunk in chunks) and 20 < len(chunks) < 40
    assert all(len(chunk.decode()) >= 4096 for chunk in chunks[:-1])
    assert max(len(chunk.decode()) for chunk in chunks if b"x" not in chunk) < 4096 + 100
    assert exporter.encode_chunks([]) == []
