"""The service layer's page kept per target (ServiceText) against the whole render, tick by tick:
targets scraped again or not, gone stale, down, removed, added, and models shared fleet-wide."""

from __future__ import annotations

import dataclasses
import random

from monitor.exporter import TextWriter, make_registry, render_text
from monitor.service.derive import Objectives, Window, WindowStats
from monitor.service.extract import LoraState
from monitor.service.render import ServiceText, render_service
from monitor.service.view import ServiceView, TargetView

WINDOWS = [Window("1m", 60.0), Window("5m", 300.0)]


def _stats(rng: random.Random) -> WindowStats:
    return WindowStats(requests_per_second=rng.random() * 10, error_ratio=rng.random() / 10,
                       generation_tokens_per_second=rng.random() * 1000,
                       quantiles={"ttft": {0.5: rng.random(), 0.99: rng.random() * 2}},
                       slo_attainment={"ttft": rng.random()}, spec_decode_position_acceptance={"0": rng.random()})


def _scraped(name: str, rng: random.Random, models: list[str]) -> TargetView:
    """A target as the publish tick assembles it after a scrape: new gauge and stats objects."""
    return TargetView(name, True, "vllm", "v1",
                      gauges={"running": {m: float(rng.randint(0, 9)) for m in models},
                              "kv_cache": {m: rng.random() for m in models}},
                      labelled={"rank_running": {m: {"0": 1.0, "1": float(rng.randint(0, 3))} for m in models}},
                      lora=LoraState(running=("a",), waiting=(), max_lora=4) if rng.random() < 0.5 else None,
                      stats={(m, w.label): _stats(rng) for m in models for w in WINDOWS})


def _again(target: TargetView, **changes: object) -> TargetView:
    """The same target in the next tick's view, not scraped since: a new TargetView, the same objects."""
    return dataclasses.replace(target, **changes)


def _fleet(targets: dict[str, TargetView], rng: random.Random) -> dict[tuple[str, str], WindowStats]:
    keys = {key for t in targets.values() if t.up for key in t.stats}
    return {key: _stats(rng) for key in sorted(keys)}


def _whole(view: ServiceView) -> str:
    return render_text(make_registry([lambda: render_service(view)])).decode()


def _kept(text: ServiceText, view: ServiceView, writer: TextWriter) -> str:
    out: list[str] = []
    text.render(view, writer, out)
    return "".join(out)


def test_the_page_kept_per_target_equals_the_whole_render_tick_by_tick() -> None:
    rng = random.Random(7)
    text, writer = ServiceText(), TextWriter()
    targets = {f"t{i}": _scraped(f"t{i}", rng, ["a", "b"] if i % 3 else ["a"]) for i in range(6)}
    targets["t6"] = TargetView("t6", False, None, None, waiting=True)  # no scrape finished yet
    changed = set()
    for tick in range(12):
        view = ServiceView(1000.0 + 5 * tick, WINDOWS, Objectives(), targets=dict(targets),
                           fleet=_fleet(targets, rng))
        got, want = _kept(text, view, writer), _whole(view)
        assert got == want, f"tick {tick} after {sorted(changed)}"
        # The next tick: a third scraped again, one not scraped and now stale or down, one
        # removed and one added at times, the rest as they were.
        changed = set()
        nxt: dict[str, TargetView] = {}
        for name, target in targets.items():
            roll = rng.random()
            if roll < 0.33:
                nxt[name] = _scraped(name, rng, ["a", "b"] if roll < 0.15 else ["a"])
            elif roll < 0.40 and target.up:  # the monitor fell behind on it: stale, its numbers gone
                nxt[name] = _again(target, up=False, stale=True, gauges={}, labelled={}, lora=None, stats={})
            elif roll < 0.45:  # its page stopped answering
                nxt[name] = TargetView(name, False, "vllm", "v1", detail="connection refused")
            elif roll < 0.48:
                continue  # removed from the targets
            else:
                nxt[name] = _again(target)
                continue
            changed.add(name)
        if tick % 4 == 1:
            nxt[f"n{tick}"] = _scraped(f"n{tick}", rng, ["c"])
            changed.add(f"n{tick}")
        targets = nxt
    assert any(t.stale for t in targets.values()) or any(not t.up for t in targets.values())


def test_a_target_whose_state_changes_without_a_scrape_is_rendered_again() -> None:
    # Up, then stale with the same (emptied) objects, then engine info changed: each a new page.
    rng = random.Random(3)
    text, writer = ServiceText(), TextWriter()
    target = _scraped("t", rng, ["a"])
    for step in (target, _again(target, engine="sglang"), _again(target, up=False, stale=True),
                 _again(target, up=False, stale=True, recognized=False), _again(target)):
        view = ServiceView(0.0, WINDOWS, Objectives(), targets={"t": step})
        assert _kept(text, view, writer) == _whole(view)
    # A scrape's new numbers come in new objects (assemble never changes one in place): rendered.
    fresh = _again(target, stats={k: dataclasses.replace(v, error_ratio=0.5) for k, v in target.stats.items()})
    view = ServiceView(0.0, WINDOWS, Objectives(), targets={"t": fresh})
    assert 'inference_request_error_ratio{model="a",target="t",window="1m"} 0.5' in _kept(text, view, writer)
