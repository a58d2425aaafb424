"""The large answers (`/`, `/api/v1/status`): one render for all the requests that ask while it is
made, and few renders at once.

A render is made on the loop in turns (`monitor.aio.Turns`: 5 ms slices) and, for the page, in a
thread. Each request used to make its own: under a flood of 200 readers, 200 renders took turns,
and a /healthz probe waited for each of them to take its slice, a round of a second and more.
Now a request that finds the same answer being made waits for that render and answers with its
bytes (single flight), and at most `limit` renders run at once: the others wait for a slot without
taking any turn, so a round of the loop stays a few slices long however many readers there are.

Nothing is kept past the render: a request that arrives after one ended starts the next. The
status says how long the monitor has been up, how late the loop woke and what each job did last;
a reader that acts and then asks (a test, an operator, `infermon status` after a reload) sees the
monitor as it was after its act. A request that joins a render reads the data as the render found
it, at most one render's time before it arrived.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Hashable

LIMIT = 2  # renders at once: one of each answer while both are flooded


class Renders:
    """`await renders.answer(page, variant, render)`: the bytes of `render()`, made once for the
    requests of the same page and variant that ask while it runs. `made` and `shared` count, per
    page, the renders made and the answers that took a render another request started."""

    def __init__(self, limit: int = LIMIT) -> None:
        self.limit = limit
        self.made: Counter[str] = Counter()
        self.shared: Counter[str] = Counter()
        self.running = 0
        self.most_running = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._slots = asyncio.Semaphore(limit)
        self._flights: dict[tuple[str, Hashable], asyncio.Task[bytes]] = {}

    async def answer(self, page: str, variant: Hashable, render: Callable[[], Awaitable[bytes]]) -> bytes:
        self._on_this_loop()
        key = (page, variant)
        flight = self._flights.get(key)
        if flight is None:
            flight = asyncio.create_task(self._render(key, render), name=f"render {page}")
            flight.add_done_callback(_seen)
            self._flights[key] = flight
        else:
            self.shared[page] += 1
        # Shielded: a reader that hangs up does not cancel the render the others wait for.
        return await asyncio.shield(flight)

    async def _render(self, key: tuple[str, Hashable], render: Callable[[], Awaitable[bytes]]) -> bytes:
        try:
            async with self._slots:
                self.made[key[0]] += 1
                self.running += 1
                self.most_running = max(self.most_running, self.running)
                try:
                    return await render()
                finally:
                    self.running -= 1
        finally:  # before the waiters wake: a request after this one's end starts a new render
            if self._flights.get(key) is asyncio.current_task():
                del self._flights[key]

    def _on_this_loop(self) -> None:
        """The slots and flights belong to one loop; an app served again on another starts afresh."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._loop, self._slots, self._flights = loop, asyncio.Semaphore(self.limit), {}


def _seen(flight: asyncio.Task[bytes]) -> None:
    """A render whose readers all hung up: its error is theirs, not an unretrieved task's warning."""
    if not flight.cancelled():
        flight.exception()
