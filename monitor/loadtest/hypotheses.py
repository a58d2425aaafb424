"""The operators' open hypotheses, answered in words from bench results (#45).

    KV tiering   "a swap back stays under the budget (50 ms) and tiering helps": the swap-back P99
                 (the engine's load-back histogram, per tier) against the budget, and, comparing a run
                 with tiering against one without, TTFT P99, output tok/s and $/1M tokens of the two
    P/D split    the KV transfer's share of TTFT against a limit (30 %), and transfers that failed
    MoE          the experts' balancedness over the run (1 = even), level by level

A number the engine did not print is said to be missing, never guessed: vLLM's offloading connector
has no latency histogram (its mean load time is given instead), and only SGLang prints balancedness.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from monitor.loadtest.result import figure

SWAP_BACK_BUDGET_S = 0.050  # the operators' number: a swap back over it breaks the SLA
PD_SHARE_LIMIT = 0.30  # a P/D transfer taking more of TTFT than this eats the split's gain


def parse_budget(text: str) -> float:
    """"50ms", "0.05s" or "0.05" -> seconds."""
    raw = text.strip().lower()
    try:
        value = float(raw[:-2]) / 1000.0 if raw.endswith("ms") else float(raw.removesuffix("s"))
    except ValueError:
        raise ValueError(f"--swap-back-budget {text!r}: a duration such as 50ms or 0.05s") from None
    if not 0 < value < 60:
        raise ValueError(f"--swap-back-budget {text!r}: between 0 and 60 seconds")
    return value


def _mean(level: dict[str, Any], *path: str) -> float | None:
    value = figure(level, *path)
    return None if value is None or value.get("mean") is None else float(value["mean"])


def _tiers(level: dict[str, Any]) -> list[str]:
    tiers = (level.get("summary") or {}).get("engine", {}).get("kv_tiers") or {}
    return sorted(tiers) if isinstance(tiers, dict) else []


def swap_back(level: dict[str, Any]) -> tuple[str, float, str] | None:
    """(tier, seconds, what) of the slowest tier's swap-back: its P99, else its mean load time."""
    found = []
    for tier in _tiers(level):
        p99 = _mean(level, "engine", "kv_tiers", tier, "load_s", "p99")
        mean = _mean(level, "engine", "kv_tiers", tier, "load_mean_seconds")
        if p99 is not None:
            found.append((tier, p99, "P99"))
        elif mean is not None:
            found.append((tier, mean, "mean (the engine prints no latency histogram)"))
    return max(found, key=lambda t: t[1]) if found else None


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds >= 0.01 else f"{seconds * 1000:.1f} ms"


def _change(level_a: dict[str, Any], level_b: dict[str, Any], *path: str) -> float | None:
    a, b = _mean(level_a, *path), _mean(level_b, *path)
    return None if a is None or b is None or a == 0 else (b - a) / abs(a)


def _budget_words(seconds: float, what: str, tier: str, budget_s: float) -> tuple[str, bool]:
    within = seconds < budget_s
    sign = "<" if within else ">="
    return f"swap-back {what} {_ms(seconds)} {sign} {_ms(budget_s)} budget ({tier} tier)", within


def level_lines(result: dict[str, Any], budget_s: float = SWAP_BACK_BUDGET_S,
                pd_limit: float = PD_SHARE_LIMIT) -> list[str]:
    """One line a level that saw a tier, a P/D split or an MoE model: its figures against the budgets."""
    out = []
    for level in result["levels"]:
        parts = []
        found = swap_back(level)
        if found is not None:
            words, within = _budget_words(found[1], found[2], found[0], budget_s)
            parts.append(words + ("" if within else ": over budget"))
        share = _mean(level, "engine", "pd", "transfer_ttft_share_ratio")
        if share is not None:
            parts.append(f"P/D transfer {share * 100:.0f} % of TTFT ({'<' if share < pd_limit else '>='} "
                         f"{pd_limit * 100:.0f} % limit)")
        failed = _mean(level, "engine", "pd", "transfer_failures")
        if failed:
            parts.append(f"{failed:.0f} P/D transfers failed")
        balance = _mean(level, "engine", "moe_balancedness_ratio")
        if balance is not None:
            parts.append(f"MoE balancedness {balance:.2f} (1 = even)")
        if parts:
            out.append(f"{level['level']['label']}: " + "; ".join(parts))
    return out


def tiering_lines(a: dict[str, Any], b: dict[str, Any], budget_s: float = SWAP_BACK_BUDGET_S,
                  names: Sequence[str] = ("A", "B")) -> list[str]:
    """A vs B where exactly one of them swapped KV back from a tier: does tiering hold, level by level?
    Held: the swap-back stays under the budget and TTFT P99 is no worse than without tiering."""
    on_a = any(swap_back(lv) for lv in a["levels"])
    on_b = any(swap_back(lv) for lv in b["levels"])
    if on_a == on_b:
        return []
    (on, off), on_name = ((a, b), names[0]) if on_a else ((b, a), names[1])
    levels_off = {lv["level"]["label"]: lv for lv in off["levels"]}
    out = [f"KV tiering hypothesis ({on_name} ran with tiering), swap-back budget {_ms(budget_s)}:"]
    for level in on["levels"]:
        label = level["level"]["label"]
        other, found = levels_off.get(label), swap_back(level)
        if other is None or found is None:
            continue
        words, within = _budget_words(found[1], found[2], found[0], budget_s)
        parts = [words]
        ttft = _change(other, level, "ttft_s", "p99")
        if ttft is not None:
            parts.append(f"TTFT P99 {ttft * 100:+.0f} % vs tiering off")
        for name, path in (("output tok/s", ("output_tokens_per_s",)),
                           ("$/1M out tok", ("cost", "usd_per_million_output_tokens"))):
            change = _change(other, level, *path)
            if change is not None:
                parts.append(f"{name} {change * 100:+.0f} %")
        held = within and (ttft is None or ttft <= 0)
        verdict = "holds" if held else ("fails: the swap-back is over budget" if not within
                                        else "fails: TTFT P99 is worse with tiering")
        out.append(f"  {label}: " + "; ".join(parts) + f" — the hypothesis {verdict}")
    return out
