"""GPU prices: the default table, matching the model name NVML/DCGM report, currencies.

A table key matches a reported name when the key's words appear, in order and next to each
other, among the name's words (`H100` in `NVIDIA H100 80GB HBM3`, `RTX 4090` in `NVIDIA
GeForce RTX 4090`); `L40S` is a word of its own, so it never prices an `L40`. The key with the
most words wins. A GPU no key matches has no price: it is reported, never guessed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from monitor.config import CostSettings, Price

# USD per GPU-hour for the GPUs the seed compares; anything else is configured (cost.gpu_prices).
DEFAULT_USD_PER_HOUR: dict[str, float] = {"H100": 2.5, "B100": 4.5, "A100": 1.5, "L40S": 1.0}

Words = tuple[str, ...]


@dataclass(frozen=True)
class Quote:
    """The price that applies to one GPU, and where it came from."""

    key: str  # the table key ("H100") or the node ("rack-3") it was found under
    source: str  # "default" | "gpu_prices" | "node_prices"
    amount: float  # as quoted
    currency: str  # "USD" | "CNY"
    usd_per_hour: float

    def as_dict(self) -> dict[str, object]:
        return {"key": self.key, "source": self.source, "amount_per_hour": self.amount,
                "currency": self.currency, "usd_per_hour": self.usd_per_hour}


def words(name: str) -> Words:
    return tuple(re.findall(r"[A-Z0-9]+", name.upper()))


def _contains(name: Words, key: Words) -> bool:
    width = len(key)
    return width > 0 and any(name[i : i + width] == key for i in range(len(name) - width + 1))


class PriceBook:
    def __init__(self, settings: CostSettings) -> None:
        self.cny_per_usd = settings.cny_per_usd
        self.currency = settings.currency
        table: dict[Words, Quote] = {
            words(key): Quote(key, "default", usd, "USD", usd) for key, usd in DEFAULT_USD_PER_HOUR.items()
        }
        for key, price in settings.gpu_prices.items():
            table[words(key)] = self._quote(key, "gpu_prices", price)  # same words: the configured one wins
        # Most words first, then the key's text, so a match is deterministic.
        self._table = sorted(table.items(), key=lambda item: (-len(item[0]), item[1].key))
        self._nodes = {node: self._quote(node, "node_prices", p) for node, p in settings.node_prices.items()}
        self._matched: dict[str, Quote | None] = {}

    def _quote(self, key: str, source: str, price: Price) -> Quote:
        if price.usd_per_hour is not None:
            return Quote(key, source, price.usd_per_hour, "USD", price.usd_per_hour)
        assert price.cny_per_hour is not None and self.cny_per_usd is not None  # the settings checked both
        return Quote(key, source, price.cny_per_hour, "CNY", price.cny_per_hour / self.cny_per_usd)

    def match(self, model: str) -> Quote | None:
        """The table entry for a reported model name; None when no key matches."""
        if model not in self._matched:
            name = words(model)
            self._matched[model] = next((quote for key, quote in self._table if _contains(name, key)), None)
        return self._matched[model]

    def price(self, node: str, model: str) -> Quote | None:
        """A node's own price wins over its GPUs' model price."""
        return self._nodes.get(node) or self.match(model)

    def table(self) -> list[dict[str, object]]:
        return [quote.as_dict() for _, quote in self._table] + [q.as_dict() for q in self._nodes.values()]

    def to_reporting(self, usd: float) -> float:
        """USD in the reporting currency (cost.currency)."""
        if self.currency == "CNY":
            assert self.cny_per_usd is not None
            return usd * self.cny_per_usd
        return usd
