"""The shipped alert rules evaluated on the /metrics page of N targets, as `infermon serve` does
each publish tick (`EmbeddedEvaluator.advance_page`: the page read back, then every rule; the
states are then saved, as the store thread does, untimed).

The page is `bench.fleet_view`'s: N targets serving the V1 fixture's model, whose TTFT is over
TTFTP99High's threshold, so two rules match every target (2 x N alerts). The first evaluation
renders every alert's annotations; the later ones alternate the same page again (no value moved:
most targets in a tick, scraped every 15 s and published every 5), a page where every target's
TTFT moved by 1 % (each alert's description rendered again), and that page without a tenth of
the targets (stale: their series gone, their alerts held), as a monitor that falls behind
publishes it. "the page read back" is the first read of the page, every line parsed, then a
later one (`PageReader`: a family's values alone while its lines are those of the last tick).

    python -m bench.alert_eval [--targets 1000] [--models 1]
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import statistics
import time
from pathlib import Path

from monitor.alerting.embedded import EmbeddedEvaluator
from monitor.alerting.readback import PageReader, exposition_samples
from monitor.config import SHIPPED_RULE_FILES
from monitor.exporter import make_registry, render_text
from monitor.rulefiles.rules import load_rules
from monitor.service.render import render_service
from monitor.service.view import TargetView
from monitor.store.session import Store
from tests.support.fleet import build

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", type=int, default=1000)
    parser.add_argument("--models", type=int, default=1, help="models a target serves (10: #22 item 2's page)")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    collector, now = build(args.targets, args.models)
    gc.freeze()  # as `infermon serve` does after its first round: the targets' stores out of the walks
    view = collector.assemble(now)
    body = render_text(make_registry([lambda: render_service(view)]))
    for target in view.targets.values():
        for stats in target.stats.values():
            stats.quantiles = {key: {q: v * 1.01 for q, v in by_q.items()} for key, by_q in stats.quantiles.items()}
    moved = render_text(make_registry([lambda: render_service(view)]))
    assert moved != body
    behind = dataclasses.replace(view, targets={  # as `assemble` leaves a stale target: its state, no numbers
        name: TargetView(name, False, target.engine, target.generation, stale=True) if index % 10 == 0 else target
        for index, (name, target) in enumerate(view.targets.items())})
    gone = render_text(make_registry([lambda: render_service(behind)]))
    assert len(gone) < len(moved)
    rules = load_rules([ROOT / "alerts" / f"{name}.yml" for name in SHIPPED_RULE_FILES])
    evaluator = EmbeddedEvaluator(rules, Store("sqlite://").engine)
    read, kept = [], []
    for _ in range(args.repeats):
        started = time.process_time()
        exposition_samples(body, evaluator.metrics)
        read.append(time.process_time() - started)
    reader = PageReader(evaluator.metrics)
    for page in [body, *[moved, body] * args.repeats]:
        started = time.process_time()
        reader.read(page)
        kept.append(time.process_time() - started)
    times: dict[str, list[float]] = {"first": [], "same page": [], "every TTFT moved": [], "a tenth stale": []}
    ts = now
    rounds = [(moved, "every TTFT moved"), (moved, "same page"), (gone, "a tenth stale"), (moved, "a tenth stale"),
              (body, "every TTFT moved"), (body, "same page")]
    for page, kind in [(body, "first"), *rounds * args.repeats]:
        ts += 5.0
        started = time.process_time()
        done = evaluator.advance_page(page, ts, 0.0)
        times[kind].append(time.process_time() - started)
        assert done is not None
        evaluator.write(*done)  # the store thread's part, untimed: the states saved, as under serve
    alerts = sum(len(state.active) for state in evaluator.states)
    print(f"{args.targets} targets x {args.models} model(s), {len(body) / 1e6:.1f} MB, {alerts} alerts active: "
          f"the page read back {statistics.median(read) * 1e3:.0f} ms, "
          f"then {statistics.median(kept[1:]) * 1e3:.0f} ms; "
          f"read back + every rule, CPU time: "
          + ", ".join(f"{kind} {statistics.median(seconds) * 1e3:.0f} ms" for kind, seconds in times.items()))


if __name__ == "__main__":
    main()
