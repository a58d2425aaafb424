"""The fleet view of N targets that serve the same models: what every publish tick assembles.

`ServiceCollector.assemble` sums each model's rates over the targets that serve it (counters,
and histogram buckets on the bounds all of them have), then derives the fleet's quantiles.
Under `infermon serve` that runs in the worker thread once per publish tick (every
min(scrape interval, infra interval): 5 s by default). Offline: one target's series store is
filled from the page of `bench.scale --models N` (through the collector's own ingest), derived,
and copied to N targets (each a copy of its own, as separate stores give); then `assemble` is
timed (CPU time: this VM's wall clock wanders), and a target's derivation next to it. Then the
service layer's part of /metrics, rendered each tick: whole (`render_service` through the registry,
as before) and kept per target (`ServiceText`, as `infermon serve` renders it), with a third of
the targets scraped since the last tick (a 15-s scrape interval, a 5-s publish tick).

    python -m bench.fleet_view [--targets 1000] [--models 10]
"""

from __future__ import annotations

import argparse
import copy
import gc
import statistics
import time

from monitor.exporter import TextWriter, make_registry, render_text
from monitor.service.collector import ServiceCollector
from monitor.service.render import ServiceText, render_service
from monitor.service.view import ServiceView
from tests.support.fleet import build


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", type=int, default=1000)
    parser.add_argument("--models", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=11)
    args = parser.parse_args()
    collector, now = build(args.targets, args.models)
    gc.freeze()  # as `infermon serve` does after its first round: the collector's walks leave these out
    state = collector.targets["t0"]
    derive, assemble = [], []
    for _ in range(args.repeats):
        started = time.process_time()
        collector.pipeline.derive(state, now)
        derive.append(time.process_time() - started)
        started = time.process_time()
        view = collector.assemble(now)
        assemble.append(time.process_time() - started)
    fleet = len([key for key in view.fleet if key[1] == "5m"])
    print(f"{args.targets} targets x {args.models} models ({fleet} fleet models a window): "
          f"assemble {statistics.median(assemble) * 1e3:.0f} ms CPU (median of {args.repeats}; "
          f"{min(assemble) * 1e3:.0f}-{max(assemble) * 1e3:.0f}), "
          f"one target's derivation {statistics.median(derive) * 1e3:.2f} ms")
    whole, kept, size = render(collector, now, args.repeats)
    print(f"the service layer's /metrics ({size / 1e6:.1f} MB), a third of the targets scraped since the last tick: "
          f"whole {statistics.median(whole) * 1e3:.0f} ms CPU, kept per target {statistics.median(kept) * 1e3:.0f} ms "
          f"({statistics.median(kept) / statistics.median(whole):.2f}x; medians of {args.repeats})")


def render(collector: ServiceCollector, now: float, repeats: int) -> tuple[list[float], list[float], int]:
    states = list(collector.targets.values())
    text, writer, whole_writer = ServiceText(), TextWriter(), TextWriter()
    view = collector.assemble(now)
    text.render(view, writer, [])  # the first tick renders every target
    render_text(make_registry([lambda: render_service(view)]), whole_writer)
    whole, kept, size = [], [], 0
    for tick in range(repeats):
        for state in states[tick % 3::3]:  # scraped again: new stats objects (what a derivation gives)
            assert state.derived is not None
            state.derived = copy.copy(state.derived)
            state.derived.stats = dict(state.derived.stats)
        shown: ServiceView = collector.assemble(now)
        started = time.process_time()
        body = render_text(make_registry([lambda: render_service(shown)]), whole_writer)  # noqa: B023
        whole.append(time.process_time() - started)
        started = time.process_time()
        out: list[str] = []
        text.render(shown, writer, out)
        page = "".join(out).encode()
        kept.append(time.process_time() - started)
        assert page == body, "the page kept per target differs from the whole render"
        size = len(body)
    return whole, kept, size


if __name__ == "__main__":
    main()
