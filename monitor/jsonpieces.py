"""A large JSON answer encoded a piece at a time on the loop, which keeps answering in between.

FastAPI encodes a returned dict in one call into pydantic's encoder, which holds the interpreter
all along: a status or alerts answer of a large fleet is megabytes, and every /healthz probe
would wait for it. Here the containers with many items are walked and each item is encoded by
the same encoder (a pydantic `TypeAdapter`'s `dump_json`: NaN and infinities as null, as in
FastAPI's answer), and the loop gets its turn whenever a slice of encoding has taken
`aio.SLICE_S`. The bytes are the very bytes of FastAPI's answer (`test_jsonpieces`); a thread
would not help, the encoder holds the GIL.

Items are read as the walk reaches them: a list the loop changes between two slices is read
as it was when the walk entered it (its items are taken first), as FastAPI would have read it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi import Response
from pydantic import TypeAdapter

from monitor.aio import Turns

SPLIT = 32  # a dict or list with more items than this is walked item by item, at any depth
DEPTH = 3  # and every dict and list above this depth (where a big list may lie further down)


_ANY = TypeAdapter(Any)


def encode(value: Any) -> bytes:
    """One value as FastAPI's answer encodes it (pydantic's encoder; NaN and infinities as null)."""
    return _ANY.dump_json(value)


class _Pieces:
    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.turn = Turns()

    async def add(self, value: Any, depth: int) -> None:
        if isinstance(value, Mapping) and (depth < DEPTH or len(value) > SPLIT):
            items = list(value.items())
            self.parts.append(b"{")
            for index, (key, item) in enumerate(items):
                if index:
                    self.parts.append(b",")
                self.parts.append(encode(str(key)) + b":")
                await self.add(item, depth + 1)
            self.parts.append(b"}")
        elif isinstance(value, list | tuple) and (depth < DEPTH or len(value) > SPLIT):
            self.parts.append(b"[")
            for index, item in enumerate(list(value)):
                if index:
                    self.parts.append(b",")
                await self.add(item, depth + 1)
            self.parts.append(b"]")
        else:
            self.parts.append(encode(value))
            await self.turn()


async def json_in_pieces(value: Any) -> bytes:
    """`value` as JSON bytes, the loop answering other requests between slices of the encoding."""
    pieces = _Pieces()
    await pieces.add(value, 0)
    return b"".join(pieces.parts)


async def json_response(value: Any, status_code: int = 200) -> Response:
    return Response(await json_in_pieces(value), status_code=status_code, media_type="application/json")
