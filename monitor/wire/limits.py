"""The one byte cap of an answer's body, on the wire's own connections and on httpx's alike.

    declared    a Content-Length past the cap refuses the answer before a byte of its body is read
    streamed    the bytes are counted as they arrive; the one past the cap ends the answer there

Each door words its own refusal (a scrape's "page larger than ...", the judge's "answer larger
than ...", the bench's "response too large: ..."): the cap takes the function that makes it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import httpx


class TooLarge(Exception):
    """A body past its cap; `declared` is the Content-Length that said so before any byte came."""

    def __init__(self, limit: int, declared: int | None = None) -> None:
        super().__init__(f"body larger than {limit} bytes" + (f" ({declared} declared)" if declared else ""))
        self.limit, self.declared = limit, declared


Refusal = Callable[[int, int | None], Exception]  # (the cap, the declared length or None) -> what to raise


class ByteCap:
    """At most `limit` bytes of one body: `declared` checks the head's length, `take` each piece."""

    __slots__ = ("limit", "refuse", "seen")

    def __init__(self, limit: int, refuse: Refusal = TooLarge) -> None:
        self.limit, self.seen, self.refuse = limit, 0, refuse

    def declared(self, content_length: str | bytes) -> None:
        value = content_length.decode("latin-1") if isinstance(content_length, bytes) else content_length
        if value.isdigit() and int(value) > self.limit:
            raise self.refuse(self.limit, int(value))

    def take(self, count: int) -> None:
        self.seen += count
        if self.seen > self.limit:
            raise self.refuse(self.limit, None)


class CappedStream(httpx.AsyncByteStream):
    """An httpx answer's body passed on through a `ByteCap`; closing it closes the connection under it."""

    def __init__(self, inner: httpx.AsyncByteStream, cap: ByteCap,
                 passed: Callable[[bytes], None] | None = None) -> None:
        self.inner, self.cap, self.passed = inner, cap, passed

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self.inner:
            self.cap.take(len(chunk))
            if self.passed is not None:
                self.passed(chunk)
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()
