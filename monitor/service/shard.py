"""Which targets this monitor owns when several share a fleet (`service.shard: {index, count}`).

The hash is Prometheus' `hashmod` on the target's name: the last 8 bytes of the MD5 of the
name, big-endian, modulo `count`. The same split is what this Prometheus relabelling keeps,

    - {source_labels: [target], modulus: 2, target_label: __tmp_shard, action: hashmod}
    - {source_labels: [__tmp_shard], regex: "0", action: keep}

so a shard can be checked (or rebuilt) with Prometheus' own tooling. The name, not the URL: it is
the unique key of every series the monitor exports (`target`), and it stays put when an engine
moves to another address, so the target keeps its shard, its history and its alerts.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TypeVar

from monitor.config import ShardSettings, Target

T = TypeVar("T", bound=Target)


def shard_of(name: str, count: int) -> int:
    digest = hashlib.md5(name.encode(), usedforsecurity=False).digest()
    return int.from_bytes(digest[8:], "big") % count


def owned(shard: ShardSettings | None, targets: Sequence[T]) -> list[T]:
    """The targets whose shard is this monitor's (all of them without a shard)."""
    if shard is None:
        return list(targets)
    return [t for t in targets if shard_of(t.name, shard.count) == shard.index]
