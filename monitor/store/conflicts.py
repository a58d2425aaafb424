"""Replicas on one database: a transaction that lost a race to insert the same unique row runs again.

Two replicas may insert the same row at the same moment (the same Alertmanager payload posted
to both, the first spend total on a fresh database). PostgreSQL makes the second wait for the
first to commit and then raises a unique violation; its transaction was rolled back whole, so
running it again is safe, and this time it finds the other's row and goes on from there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from sqlalchemy.exc import IntegrityError

T = TypeVar("T")
ATTEMPTS = 3


def retry_conflicts(transaction: Callable[[], T]) -> T:
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return transaction()
        except IntegrityError:
            if attempt == ATTEMPTS:
                raise
    raise AssertionError("unreachable")
