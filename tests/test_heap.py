"""The publish tick's freeze of what is alive, and the full collection that frees the cycles frozen."""

from __future__ import annotations

import gc
import threading
import weakref
from collections.abc import Iterator

import pytest

from monitor.heap import AfterEachJob, HeapFreezer


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


@pytest.fixture(autouse=True)
def unfrozen() -> Iterator[None]:
    # A test before this one in the same process (a worker's freezer started in-process, in a
    # pytest-xdist worker's order) may have left the collector frozen: start from none frozen.
    gc.unfreeze()
    gc.collect()
    yield
    gc.unfreeze()  # the other tests' collector as it was


def test_ticks_freeze_what_is_alive_and_the_full_collection_frees_cycles_frozen_since() -> None:
    now = [1000.0]
    freezer = HeapFreezer(full_every=600.0, clock=lambda: now[0])
    freezer.tick()  # not started (not under `infermon serve`): nothing frozen
    assert gc.get_freeze_count() == 0
    freezer.start()
    assert freezer.status()["frozen_at_last_full_collection"] == gc.get_freeze_count() > 0
    a, b = Node(), Node()
    a.other, b.other = b, a  # a cycle: only the collector frees it
    gone = weakref.ref(a)
    freezer.tick()
    assert gc.get_freeze_count() > 0 and freezer.full_collections == 0
    del a, b  # garbage now, but frozen: the automatic collections do not walk it
    gc.collect()
    assert gone() is not None
    now[0] += 599.0
    freezer.tick()  # not yet ten minutes since the first tick
    gc.collect()
    assert gone() is not None and freezer.full_collections == 0
    now[0] += 1.0
    freezer.tick()
    assert gone() is None  # the full collection found it
    status = freezer.status()
    assert status["full_collections"] == 1 and status["last_full_collection_unreachable"] >= 2
    assert status["frozen_after_jobs"] == 3
    assert status["frozen_at_last_full_collection"] == gc.get_freeze_count() > 0  # frozen again after it
    freezer.stop()
    assert gc.get_freeze_count() == 0


def test_each_job_of_the_pool_ends_with_the_freeze_in_its_own_thread() -> None:
    ran: list[str] = []
    pool = AfterEachJob(lambda: ran.append(threading.current_thread().name), 1, thread_name_prefix="job")

    def broken() -> None:
        raise ValueError("a bug in a job")

    try:
        assert pool.submit(lambda x: x * 2, 21).result() == 42
        with pytest.raises(ValueError, match="a bug"):
            pool.submit(broken).result()
    finally:
        pool.shutdown()
    assert ran == ["job_0", "job_0"]  # after the job that failed too
