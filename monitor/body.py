"""Request bodies of the POST routes: read only up to a cap, parsed without surprises.

The cap is checked against Content-Length first and then while streaming, so an oversized
body is refused (413) after at most `limit` bytes are read; JSON that is too deep or holds a
lone surrogate (which no database can store as UTF-8) is a 400, never a 500.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from fastapi import HTTPException, Request
from starlette.requests import ClientDisconnect

log = logging.getLogger("monitor.api")

MAX_DEPTH = 64  # Alertmanager's payload is 4 deep, a request-log sample about 6


async def read_limited(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise HTTPException(413, f"body larger than {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise HTTPException(413, f"body larger than {limit} bytes")
            chunks.append(chunk)
    except ClientDisconnect:
        # Nobody is left to answer (a client that gave up, a sender stopped mid-post): one line, not
        # a traceback, and nothing of the partial body is stored.
        log.info("%s %s: the client went away after %d of %s bytes of the body; nothing stored",
                 request.method, request.url.path, size, declared or "?")
        raise HTTPException(400, "the client went away before the body was read") from None
    return b"".join(chunks)


def parse_json(body: bytes) -> Any:
    """The body as JSON; 400 when it is not, nests deeper than MAX_DEPTH, or holds a lone
    surrogate. Walks every value once: call it off the event loop for large bodies."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:  # RecursionError: nested about 1,000 deep
        raise HTTPException(400, f"not JSON: {str(exc)[:200]}") from None
    _check(data)
    return data


def _check(data: Any) -> None:
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            if not value.isascii():
                try:
                    value.encode()
                except UnicodeEncodeError:
                    raise HTTPException(400, "JSON string with a lone surrogate (not valid Unicode)") from None
            continue
        if isinstance(value, dict):
            children: list[Any] = [*value.keys(), *value.values()]
        elif isinstance(value, list):
            children = value
        else:
            continue
        if depth > MAX_DEPTH:
            raise HTTPException(400, f"JSON nested deeper than {MAX_DEPTH} levels")
        stack.extend((child, depth + 1) for child in children)
