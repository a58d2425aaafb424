"""Prices: the arithmetic from first principles, model-name matching on real names, currencies."""

from __future__ import annotations

import pytest

from monitor.config import load_settings
from monitor.cost.derive import usd_per_million_tokens
from monitor.cost.prices import DEFAULT_PRICES, PRICES_SET, PriceBook


def book(**cost: object) -> PriceBook:
    return PriceBook(load_settings(None, {"cost": cost}).cost)


def test_price_and_throughput_give_dollars_per_million_tokens() -> None:
    # $2.5 an hour buys 3600 s; at 5,200 tokens/s that is 18.72 M tokens: 2.5 / 18.72 = $0.1335 per 1M.
    assert usd_per_million_tokens(2.5, 5200.0) == pytest.approx(2.5 / (5200 * 3600) * 1e6)
    assert usd_per_million_tokens(2.5, 5200.0) == pytest.approx(0.13355, abs=5e-6)
    assert round(usd_per_million_tokens(2.5, 5200.0) or 0, 3) == 0.134
    # Twice the throughput halves it; twice the price doubles it.
    assert usd_per_million_tokens(2.5, 10400.0) == pytest.approx(0.13355 / 2, abs=5e-6)
    assert usd_per_million_tokens(5.0, 5200.0) == pytest.approx(0.2671, abs=5e-5)


@pytest.mark.parametrize("rate", [0.0, -1.0, float("nan")])
def test_no_throughput_no_price_per_token(rate: float) -> None:
    assert usd_per_million_tokens(2.5, rate) is None


@pytest.mark.parametrize(
    ("reported", "key", "usd"),
    [
        ("NVIDIA H100 80GB HBM3", "H100", 2.5),  # NVML name, and DCGM's modelName label
        ("NVIDIA H100 PCIe", "H100", 2.5),
        ("NVIDIA H200", "H200", 3.5),
        ("NVIDIA H200 NVL", "H200", 3.5),
        ("NVIDIA A100-SXM4-80GB", "A100", 1.5),
        ("NVIDIA A100 80GB PCIe", "A100", 1.5),
        ("NVIDIA L40S", "L40S", 1.0),
        ("NVIDIA L4", "L4", 0.7),
        ("NVIDIA B100", "B100", 4.5),
        ("NVIDIA B200", "B200", 5.0),
        ("NVIDIA GeForce RTX 4090", "RTX 4090", 0.4),
    ],
)
def test_default_prices_match_real_names(reported: str, key: str, usd: float) -> None:
    quote = book().match(reported)
    assert quote is not None and (quote.key, quote.usd_per_hour, quote.source) == (key, usd, "default")
    assert quote.as_dict()["set"] == PRICES_SET


@pytest.mark.parametrize("reported", ["NVIDIA L40", "NVIDIA GH200 480GB", "Tesla T4", "NVIDIA GeForce RTX 4080", ""])
def test_no_default_no_guess(reported: str) -> None:
    # L40 is not an L40S nor an L4, GH200 not an H200 or H100, a 4080 not a 4090.
    assert book().match(reported) is None


def test_the_ascend_default_is_in_cny_and_waits_for_an_exchange_rate() -> None:
    without = book()
    assert without.match("Ascend 910C") is None
    assert "cost.cny_per_usd" in without.why_unpriced("Ascend 910C")
    assert without.why_unpriced("Tesla T4") == "add it to cost.gpu_prices"
    quote = book(cny_per_usd=7.0).match("Ascend 910C")
    assert quote is not None and (quote.amount, quote.currency, quote.source) == (10.0, "CNY", "default")
    assert quote.usd_per_hour == pytest.approx(10 / 7.0)


def test_every_default_is_overridable() -> None:
    overrides = {key: {"usd_per_hour": 0.01} for key in DEFAULT_PRICES}
    prices = book(gpu_prices=overrides)
    for key in DEFAULT_PRICES:
        quote = prices.match(key)
        assert quote is not None and (quote.source, quote.usd_per_hour) == ("gpu_prices", 0.01), key


def test_configured_prices_rtx_4090_h200_and_ascend_in_cny() -> None:
    prices = book(cny_per_usd=7.1, gpu_prices={
        "RTX 4090": {"usd_per_hour": 0.35}, "H200": {"usd_per_hour": 3.8}, "Ascend 910C": {"cny_per_hour": 10},
        "H100": {"usd_per_hour": 2.0},  # overrides the default
    })
    rtx = prices.match("NVIDIA GeForce RTX 4090")
    assert rtx is not None and rtx.usd_per_hour == 0.35
    h200 = prices.match("NVIDIA H200")
    assert h200 is not None and h200.usd_per_hour == 3.8
    ascend = prices.match("Ascend 910C")
    assert ascend is not None and (ascend.amount, ascend.currency) == (10, "CNY")
    assert ascend.usd_per_hour == pytest.approx(10 / 7.1)
    h100 = prices.match("NVIDIA H100 80GB HBM3")
    assert h100 is not None and (h100.usd_per_hour, h100.source) == (2.0, "gpu_prices")


def test_the_most_specific_key_wins_and_a_node_price_wins_over_both() -> None:
    prices = book(gpu_prices={"H100 NVL": {"usd_per_hour": 2.9}}, node_prices={"rack-3": {"usd_per_hour": 1.1}})
    nvl, sxm = prices.match("NVIDIA H100 NVL"), prices.match("NVIDIA H100 80GB HBM3")
    assert nvl is not None and nvl.usd_per_hour == 2.9
    assert sxm is not None and sxm.usd_per_hour == 2.5
    on_rack = prices.price("rack-3", "NVIDIA H100 NVL")
    assert on_rack is not None and (on_rack.usd_per_hour, on_rack.source) == (1.1, "node_prices")
    unknown_on_rack = prices.price("rack-3", "Some Accelerator")
    assert unknown_on_rack is not None and unknown_on_rack.usd_per_hour == 1.1


def test_reporting_currency() -> None:
    assert book(currency="CNY", cny_per_usd=7.1).to_reporting(2.0) == pytest.approx(14.2)
    assert book().to_reporting(2.0) == 2.0
