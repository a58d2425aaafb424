"""One object for equal values, kept process-wide in a bounded table.

Structures made anew for every target or every scrape (a series' key, a row's layout) are often
equal to ones made before; handing out the first one seen keeps one copy in memory and lets
readers compare by identity. When the table is full it starts again: what it handed out stays
valid, later values only stop sharing with earlier ones.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

_T = TypeVar("_T", bound=Hashable)


class Interned(Generic[_T]):
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._table: dict[_T, _T] = {}

    def __call__(self, value: _T) -> _T:
        found = self._table.get(value)
        if found is None:
            if len(self._table) >= self.limit:
                self._table.clear()
            found = self._table[value] = value
        return found

    def __len__(self) -> int:
        return len(self._table)
