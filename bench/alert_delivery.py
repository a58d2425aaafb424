"""What durable delivery costs: storing transitions in the outbox, and draining it to a receiver.

    python -m bench.alert_delivery [--alerts 1000] [--db sqlite-file|memory]

One process, a loopback webhook that answers at once (tests/alerting/imserver.py), SQLite on a
file (the embedded default). Measured: `enqueue` per transition (the write the evaluator and
the Alertmanager receiver wait for), and a whole drain — group flush, one message per group,
settle — per notification. Grouping is by alertname with group_wait 1s on an injected clock,
so no waiting is timed; what is timed is ours plus the loopback HTTP round trip.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from monitor.alerting.delivery import Delivery
from monitor.config import AlertingSettings
from monitor.store.session import Store
from tests.alerting.helpers import Clock, alert, receiver
from tests.alerting.imserver import ImServer


async def measure(count: int, url: str) -> dict[str, float]:
    clock = Clock()
    with ImServer() as im:
        rx = [receiver(im, "webhook", group_wait="1s")]
        store = Store(url)
        async with httpx.AsyncClient() as client:
            delivery = Delivery(AlertingSettings(receivers=rx), store.engine, client, clock)
            store_times = []
            for i in range(count):
                started = time.perf_counter()
                delivery.enqueue([alert(f"Alert{i}", gpu=str(i % 8))], "embedded")
                store_times.append(time.perf_counter() - started)
            clock.advance(1)
            started = time.perf_counter()
            while len(im.accepted("webhook")) < count:
                await delivery.run_once()
            drain = time.perf_counter() - started
        store.close()
    return {
        "enqueue_median_ms": statistics.median(store_times) * 1000,
        "enqueue_p99_ms": sorted(store_times)[int(0.99 * (count - 1))] * 1000,
        "drain_per_notification_ms": drain / count * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--alerts", type=int, default=1000)
    parser.add_argument("--db", choices=["sqlite-file", "memory"], default="sqlite-file")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'bench.db'}" if args.db == "sqlite-file" else "sqlite://"
        result = asyncio.run(measure(args.alerts, url))
    print(f"outbox on {args.db}, {args.alerts} alerts (one group each), loopback webhook:")
    for name, value in result.items():
        print(f"  {name:<28} {value:8.3f}")


if __name__ == "__main__":
    main()
