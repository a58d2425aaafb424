"""A flood of readers of / and /api/v1/status (#48 item 6): a render answers every reader that
asks while it is made, with the same bytes; few renders run at once; /healthz answers meanwhile.

The renders are held at their service rows until the test lets them go, so what is counted is
what the app does with the readers, not how fast this machine is."""

from __future__ import annotations

import asyncio
import json
import threading
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from monitor.app import create_app
from monitor.runtime import Monitor
from monitor.web import overview as overview_module
from monitor.web.page import environment, render_page
from monitor.web.renders import LIMIT
from tests.support.appserver import serve_asgi
from tests.web.scenario import settings_for, two_targets
from tests.web.test_overview import collected

FLOOD = 100  # readers of each answer
STATUS = "/api/v1/status"
WAIT_S = 30.0


class Arrivals:
    """ASGI middleware: how many requests reached the app, per path."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.seen: Counter[str] = Counter()
        self.changed = threading.Condition()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            with self.changed:
                self.seen[scope["path"]] += 1
                self.changed.notify_all()
        await self.app(scope, receive, send)

    def wait(self, counts: dict[str, int]) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: all(self.seen[p] >= n for p, n in counts.items()), WAIT_S), \
                dict(self.seen)


class Gate:
    """In place of the overview's service rows (every render of / and of the status makes them):
    holds each render there until opened, counting the renders and how many are held at once."""

    def __init__(self, real: Callable[..., Awaitable[dict[str, Any]]]) -> None:
        self.real = real
        self.entered = 0
        self.held = 0
        self.most_held = 0
        self.changed = threading.Condition()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.opened: asyncio.Event | None = None

    async def __call__(self, *args: Any) -> dict[str, Any]:
        if self.opened is None:
            self.loop, self.opened = asyncio.get_running_loop(), asyncio.Event()
        with self.changed:
            self.entered += 1
            self.held += 1
            self.most_held = max(self.most_held, self.held)
            self.changed.notify_all()
        try:
            await self.opened.wait()
        finally:
            self.held -= 1
        return await self.real(*args)

    def wait_entered(self, count: int) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: self.entered >= count, WAIT_S), self.entered

    def settle(self, then: Callable[[], object] = lambda: None) -> None:
        """A few rounds of the server's loop (the requests that reached the app reach their routes:
        no I/O in between), then `then` on the loop."""
        async def rounds() -> None:
            for _ in range(50):
                await asyncio.sleep(0)
            then()

        assert self.loop is not None
        asyncio.run_coroutine_threadsafe(rounds(), self.loop).result(WAIT_S)

    def open(self) -> None:
        assert self.opened is not None
        self.settle(self.opened.set)


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Gate:
    held = Gate(overview_module.service_rows_in_turns)
    monkeypatch.setattr(overview_module, "service_rows_in_turns", held)
    return held


async def flood(url: str, asks: list[tuple[str, dict[str, Any]]], while_held: Callable[[], None],
                gate: Gate) -> tuple[list[httpx.Response], httpx.Response]:
    """Every ask at once; once they reached the app and are held, `while_held`, a /healthz probe,
    then the gate opened. The readers' answers, and the probe's."""
    limits = httpx.Limits(max_connections=len(asks) + 5, max_keepalive_connections=len(asks) + 5)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=WAIT_S, trust_env=False) as client:
        readers = [asyncio.create_task(client.get(path, params=params)) for path, params in asks]
        await asyncio.to_thread(while_held)
        probe = await client.get("/healthz", timeout=5)
        assert not any(reader.done() for reader in readers)  # answered while every reader still waited
        await asyncio.to_thread(gate.open)
        return list(await asyncio.gather(*readers)), probe


def test_a_flood_of_readers_gets_one_render_of_each_answer_and_healthz_answers(gate: Gate) -> None:
    with two_targets() as server:
        monitor = Monitor(settings_for(server, gpus=False))
        collected(monitor, cycles=3)  # and the clock stays where it stopped
        app = create_app(monitor, schedule=False)
        arrivals = Arrivals(app)

        def held() -> None:
            arrivals.wait({"/": FLOOD, STATUS: FLOOD})
            gate.wait_entered(2)
            gate.settle()

        with serve_asgi(arrivals) as url:
            asks: list[tuple[str, dict[str, Any]]] = [(path, {}) for _ in range(FLOOD) for path in ("/", STATUS)]
            answers, probe = asyncio.run(flood(url, asks, held, gate))
            with httpx.Client(base_url=url, timeout=WAIT_S, trust_env=False) as client:
                alone = {path: client.get(path).content for path in ("/", STATUS)}  # one reader, one render
        page = render_page(environment().get_template("overview.html"), monitor).encode()
        asyncio.run(monitor.aclose())
    assert probe.status_code == 200 and probe.json() == {"status": "ok"}
    assert [a.status_code for a in answers] == [200] * 2 * FLOOD
    bodies = {path: {a.content for a in answers if a.url.path == path} for path in ("/", STATUS)}
    assert len(bodies["/"]) == len(bodies[STATUS]) == 1  # every reader of the flood: the same bytes
    assert bodies["/"] == {alone["/"]}  # ... the very bytes one reader gets
    # The status is made anew for the lone reader, seconds later on a busy machine: the loop's lag,
    # the heap and each target's staleness (on the real clock) are measured again. Same answer otherwise.
    (flooded,) = bodies[STATUS]
    assert json.loads(flooded).keys() == json.loads(alone[STATUS]).keys()
    assert alone["/"] == page and b'"overview":{' in alone[STATUS]
    # One render of each answer for the flood, then one for each reader alone.
    assert gate.entered == 2 + 2, f"{gate.entered - 2} renders for {2 * FLOOD} readers"
    renders = app.state.renders
    assert renders.made == {"/": 2, STATUS: 2}
    assert renders.shared == {"/": FLOOD - 1, STATUS: FLOOD - 1}


def test_different_answers_asked_at_once_are_rendered_a_few_at_once(gate: Gate) -> None:
    refreshes = range(5, 25)  # twenty pages, each with its own reload interval, and the status
    with two_targets() as server:
        monitor = Monitor(settings_for(server, gpus=False))
        collected(monitor, cycles=2)
        app = create_app(monitor, schedule=False)
        arrivals = Arrivals(app)
        held_at_most: list[int] = []

        def held() -> None:
            arrivals.wait({"/": len(refreshes), STATUS: 1})
            gate.wait_entered(LIMIT)
            gate.settle()
            held_at_most.append(gate.held)

        with serve_asgi(arrivals) as url:
            asks = [("/", {"refresh": str(every)}) for every in refreshes] + [(STATUS, {})]
            answers, probe = asyncio.run(flood(url, asks, held, gate))
        asyncio.run(monitor.aclose())
    assert probe.status_code == 200
    assert [a.status_code for a in answers] == [200] * len(asks)
    for every, answer in zip(refreshes, answers, strict=False):
        assert f'<meta http-equiv="refresh" content="{every}">' in answer.text
    assert held_at_most == [LIMIT] and gate.most_held == LIMIT, f"{gate.most_held} renders at once"
    assert gate.entered == len(asks)  # each a render of its own, in turns of LIMIT
    assert app.state.renders.most_running == LIMIT
