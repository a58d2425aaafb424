"""A large answer encoded a piece at a time: the very bytes FastAPI's answer had, the loop turning
between the pieces, and a list the loop changes meanwhile read as it was when the walk met it."""

from __future__ import annotations

import asyncio
import math
from datetime import UTC, datetime
from typing import Any

import pydantic
import pytest

from monitor import aio
from monitor.jsonpieces import json_in_pieces
from tests.support.turns import counting_turns

FASTAPI = pydantic.TypeAdapter(dict[str, object])  # what `-> dict[str, object]` answered with


def status_like(targets: int) -> dict[str, Any]:
    row = {"target": "t", "up": True, "error": None, "ratio": math.nan, "p99": math.inf, "lag": -math.inf,
           "models": {f"org/model-{m}": {"5m": {"rps": 1.5 * m, "baseline": "ready"}} for m in range(3)},
           "windows": ("1m", "5m"), "when": datetime(2026, 12, 3, tzinfo=UTC), "note": "ünïcode \"quoted\"\n"}
    return {
        "version": "1", "empty": {}, "none": [], "nested": {"a": {"b": {"c": {"d": [1, 2, {"e": math.nan}]}}}},
        "layers": {"service": {"targets": [{**row, "target": f"t{i}"} for i in range(targets)],
                               "schedule": None}},
        "collectors": [{"collector": "service", "target": f"t{i}", "ok": i % 2 == 0} for i in range(targets)],
        "big_dict": {f"k{i}": i for i in range(100)},
        "small": [1, 2.5, "x", True, None],
    }


@pytest.mark.parametrize("targets", [0, 1, 40, 500])
def test_the_pieces_are_the_bytes_fastapi_answered(targets: int) -> None:
    value = status_like(targets)
    assert asyncio.run(json_in_pieces(value)) == FASTAPI.dump_json(value)


def test_scalars_and_small_values_are_encoded_whole() -> None:
    for value in (None, 1, "x", [1, 2], {"a": math.nan}):
        assert asyncio.run(json_in_pieces(value)) == pydantic.TypeAdapter(object).dump_json(value)


def test_the_loop_turns_between_the_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(aio, "SLICE_S", 0.0)  # a turn after every piece
    value = status_like(300)

    body, turns = asyncio.run(counting_turns(json_in_pieces(value)))
    assert body == FASTAPI.dump_json(value)
    assert turns >= 600  # each target row and each collector row is a piece of its own


def test_a_list_the_loop_changes_meanwhile_is_read_as_the_walk_found_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(aio, "SLICE_S", 0.0)
    events = [{"n": i} for i in range(100)]
    value = {"events": events}
    expected = FASTAPI.dump_json({"events": list(events)})

    async def run() -> bytes:
        async def appender() -> None:
            for i in range(100, 200):
                events.append({"n": i})  # as the store thread's callbacks do on the loop
                events.pop(0)
                await asyncio.sleep(0)

        task = asyncio.create_task(appender())
        body = await json_in_pieces(value)
        await task
        return body

    assert asyncio.run(run()) == expected
