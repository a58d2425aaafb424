"""GPU prices: the default table, matching the model name NVML/DCGM report, currencies.

A table key matches a reported name when the key's words appear, in order and next to each
other, among the name's words (`H100` in `NVIDIA H100 80GB HBM3`, `RTX 4090` in `NVIDIA
GeForce RTX 4090`); `L40S` is a word of its own, so it never prices an `L40`. The key with the
most words wins. A GPU no key matches has no price: it is reported, never guessed.

The defaults are typical on-demand rental prices per GPU-hour on the date in PRICES_SET; every
one is overridden by `cost.gpu_prices` (same key) or `cost.node_prices`. A default quoted in CNY
(Ascend) prices a GPU only once `cost.cny_per_usd` gives the exchange rate: without it the GPU is
unpriced, with that reason, rather than converted at a guessed rate.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from monitor.config import CostSettings, Price

PRICES_SET = "2026-12-01"  # when the default table was last set
# Per GPU-hour, (amount, currency), for the GPUs people serve on; anything else is configured (cost.gpu_prices).
DEFAULT_PRICES: dict[str, tuple[float, str]] = {
    "H200": (3.5, "USD"), "H100": (2.5, "USD"), "B200": (5.0, "USD"), "B100": (4.5, "USD"), "A100": (1.5, "USD"),
    "L40S": (1.0, "USD"), "L4": (0.7, "USD"), "RTX 4090": (0.4, "USD"), "Ascend 910C": (10.0, "CNY"),
}

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
        found: dict[str, object] = {"key": self.key, "source": self.source, "amount_per_hour": self.amount,
                                    "currency": self.currency, "usd_per_hour": self.usd_per_hour}
        if self.source == "default":
            found["set"] = PRICES_SET
        return found


def words(name: str) -> Words:
    return tuple(re.findall(r"[A-Z0-9]+", name.upper()))


def _contains(name: Words, key: Words) -> bool:
    width = len(key)
    return width > 0 and any(name[i : i + width] == key for i in range(len(name) - width + 1))


class PriceBook:
    def __init__(self, settings: CostSettings) -> None:
        self.cny_per_usd = settings.cny_per_usd
        self.currency = settings.currency
        table: dict[Words, Quote] = {}
        self.needs_rate: set[str] = set()  # default keys quoted in CNY, unusable without cny_per_usd
        for key, (amount, currency) in DEFAULT_PRICES.items():
            if currency == "USD":
                table[words(key)] = Quote(key, "default", amount, "USD", amount)
            elif self.cny_per_usd is not None:
                table[words(key)] = Quote(key, "default", amount, "CNY", amount / self.cny_per_usd)
            else:
                self.needs_rate.add(key)
        for key, price in settings.gpu_prices.items():
            self.needs_rate.discard(key)
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

    def why_unpriced(self, model: str) -> str:
        """What to configure for a GPU match() found no price for."""
        name = words(model)
        for key in sorted(self.needs_rate):
            if _contains(name, words(key)):
                amount, _ = DEFAULT_PRICES[key]
                return f"its default price is {amount:g} CNY/h: set cost.cny_per_usd, or price it in cost.gpu_prices"
        return "add it to cost.gpu_prices"

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
