"""DeviceWorker: blocking calls off the loop, one in flight, a deadline, outcomes delivered."""

from __future__ import annotations

import asyncio
import threading

import pytest

from monitor.infra.worker import CallTimeout, DeviceWorker, Inbox, WorkerBusy


def test_result_and_exception_come_back_from_the_thread() -> None:
    async def run() -> None:
        worker = DeviceWorker("t-worker")
        try:
            assert await worker.call(lambda: threading.current_thread().name, 1.0) == "t-worker"
            with pytest.raises(ZeroDivisionError):
                await worker.call(lambda: 1 / 0, 1.0)
            assert worker.busy_for is None
        finally:
            worker.close()

    asyncio.run(run())


def test_a_stuck_call_times_out_then_refuses_until_it_returns() -> None:
    release = threading.Event()

    async def run() -> None:
        worker = DeviceWorker("t-stuck")
        try:
            with pytest.raises(CallTimeout, match=r"timed out after 0\.05s"):
                await worker.call(lambda: release.wait(10), 0.05)
            with pytest.raises(WorkerBusy):
                await worker.call(lambda: "never runs", 1.0)
            assert worker.busy_for is not None
            release.set()
            for _ in range(100):  # the stuck call returns; the worker is usable again
                if worker.busy_for is None:
                    break
                await asyncio.sleep(0.01)
            assert await worker.call(lambda: 42, 1.0) == 42
        finally:
            release.set()
            worker.close()

    asyncio.run(run())


def test_the_thread_starts_on_first_use_and_is_a_daemon() -> None:
    worker = DeviceWorker("t-lazy")
    assert not worker.started

    async def run() -> None:
        await worker.call(lambda: None, 1.0)

    asyncio.run(run())
    worker.close()
    assert worker.started
    assert all(t.daemon for t in threading.enumerate() if t.name == "t-lazy")


def test_workers_sharing_an_inbox_each_get_their_own_outcome() -> None:
    async def run() -> list[object]:
        inbox = Inbox()
        workers = [DeviceWorker(f"t-shared-{i}", inbox=inbox) for i in range(16)]
        try:
            futures = [w.submit(lambda i=i: i * i if i != 5 else 1 / 0, 1.0) for i, w in enumerate(workers)]
            return list(await asyncio.gather(*futures, return_exceptions=True))
        finally:
            for worker in workers:
                worker.close()

    outcomes = asyncio.run(run())
    assert isinstance(outcomes[5], ZeroDivisionError)
    assert [o for i, o in enumerate(outcomes) if i != 5] == [i * i for i in range(16) if i != 5]
