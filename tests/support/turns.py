"""How often the loop got its turn while a job ran on it (`monitor.aio.Turns`)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def counting_turns(job: Awaitable[T]) -> tuple[T, int]:
    """`job`'s result, and how many times a task beside it ran meanwhile."""
    turns = 0
    done = asyncio.Event()

    async def ticker() -> None:
        nonlocal turns
        while not done.is_set():
            turns += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    started = turns
    try:
        result = await job
    finally:
        done.set()
        await task
    return result, turns - started
