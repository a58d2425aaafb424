"""Closing a client so that a cancel cannot stop it half way; long jobs on the loop in turns.

httpx's `AsyncClient.aclose()` (httpcore's pool) takes its connections out of the pool, then closes
them one by one with a checkpoint after each. A task cancelled at one of those checkpoints stops
there: the connections not yet closed belong to no pool any more, nothing closes them, and their
sockets stay open until the garbage collector finds them ("unclosed transport", one per kept-alive
connection). anyio's shielded scope, which httpcore uses, does not hold off a plain asyncio
`Task.cancel()`. A load cancelled while its client closed left five such sockets behind it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable

SLICE_S = 0.005  # a long job's time on the loop between two turns of the loop's other work


async def finish(closing: Awaitable[None]) -> None:
    """Await `closing` (`client.aclose()`, or ending the requests a client still has in flight)
    to its end in a task of its own; a cancel that arrives meanwhile is re-raised once it has
    ended. Only a cancel of that task itself (the loop shutting down cancels every task) stops
    it early."""
    task = asyncio.ensure_future(closing)
    cancelled = False
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            cancelled = True  # this task's cancel, or the close's own (the loop shutting down)
    if cancelled:
        raise asyncio.CancelledError
    task.result()


class Turns:
    """`await turn()` between the steps of a long job on the loop (a large fleet's status, a
    large answer's encoding): the loop's other work gets its turn whenever SLICE_S has passed
    since the last one. What the job reads is the loop's, so it needs no lock; what the loop
    changes between two steps, the job reads as it finds it."""

    def __init__(self) -> None:
        self.since = time.perf_counter()

    async def __call__(self) -> None:
        if time.perf_counter() - self.since > SLICE_S:
            await asyncio.sleep(0)
            self.since = time.perf_counter()
