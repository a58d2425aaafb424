"""`python -m bench.trend_scenarios [NAME ...]`: the scorecard's trend rows as a table, of the rows
named (all without names). The worlds and their verdicts are tests/support/trend_scenarios.py."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from tests.support.trend_scenarios import SCENARIOS, run_trend_scenario, table


def main(names: Sequence[str]) -> None:
    """The table, of the rows named (all without names)."""
    chosen = [s for s in SCENARIOS if not names or s.name in names]
    print("Times in days after the change; `watched`: the days ticked (the history before them seeded).")
    print(table([run_trend_scenario(s) for s in chosen]))


if __name__ == "__main__":
    main(sys.argv[1:])
