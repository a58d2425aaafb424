"""The judge's HTTP client: no answer is read past a size cap, none is decoded.

The `openai` SDK reads a whole body before it looks at it (an error body too), and its timeout
is per read: a judge that sends 100 MB, or one byte a second, holds the run. The SDK is given
this client instead (an `httpx.AsyncClient`, which every supported SDK version takes: 1.x is
built on httpx, 3.x on httpx2 and accepts an httpx client as well). A response hook puts each
body through the wire's byte cap (`monitor.wire.limits`), which raises `AnswerRejected` past it,
so at most the cap is ever held; a Content-Length past it is refused before any byte of the body
is read. The client asks for
`Accept-Encoding: identity` and refuses an encoded answer: a gzip bomb of a few kB decodes to
gigabytes, past any cap counted on the wire. The deadline of a whole call is the judge's
(`asyncio.timeout`), not the client's.
"""

from __future__ import annotations

import httpx

from monitor.wire.limits import ByteCap, CappedStream

SHORTEST_SECRET_KEY = 8  # a placeholder key ("EMPTY" for local servers) is no secret: scrubbing it garbles text
MIN_ANSWER_BYTES = 2**20  # 1 MiB: a verdict is a few hundred bytes, an error page a few kB
ANSWER_BYTES_PER_TOKEN = 64  # a token of CJK text escaped in JSON (`\u4e2d\u6587`) is ~12-24 bytes


class AnswerRejected(Exception):
    """An answer the client would not read (too large, encoded): one judge error, never retried."""


class ApiKey:
    """The judge's API key, which prints as `<secret>` and is scrubbed from what a judge answers: a
    gateway may echo the request's headers in its error page. Scrub text before cutting it short,
    or the cut could keep a part of the key."""

    def __init__(self, value: str) -> None:
        self.value = value
        self._scrubbed = value if len(value) >= SHORTEST_SECRET_KEY else None

    def __repr__(self) -> str:
        return "<secret>"

    def scrub(self, text: str) -> str:
        return text.replace(self._scrubbed, "<secret>") if self._scrubbed else text

    def scrub_bytes(self, body: bytes) -> bytes:
        return body.replace(self._scrubbed.encode(), b"<secret>") if self._scrubbed else body


def answer_cap(max_tokens: int) -> int:
    """The most bytes a judge answer may have: ample for `max_tokens` of text, never under 1 MiB."""
    return max(MIN_ANSWER_BYTES, max_tokens * ANSWER_BYTES_PER_TOKEN)


def size_text(count: int) -> str:
    return f"{count // 2**20} MiB" if count % 2**20 == 0 else f"{count} bytes"


def _answer_too_large(cap: int, declared: int | None) -> AnswerRejected:
    if declared is not None:
        return AnswerRejected(f"answer larger than {size_text(cap)} (Content-Length {declared}): not read")
    return AnswerRejected(f"answer larger than {size_text(cap)} (not read further)")


def capped_client(cap: int, timeout_s: float, connections: int) -> httpx.AsyncClient:
    async def cap_body(response: httpx.Response) -> None:
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            raise AnswerRejected(f"answer in Content-Encoding {encoding[:40]} (identity was asked for): not read")
        bound = ByteCap(cap, _answer_too_large)
        bound.declared(response.headers.get("content-length", ""))
        if isinstance(response.stream, httpx.AsyncByteStream):
            response.stream = CappedStream(response.stream, bound)

    # The SDK's own defaults otherwise: redirects followed, proxies from the environment.
    limits = httpx.Limits(max_connections=max(100, connections), max_keepalive_connections=max(20, connections))
    return httpx.AsyncClient(timeout=timeout_s, limits=limits, follow_redirects=True,
                             headers={"Accept-Encoding": "identity"}, event_hooks={"response": [cap_body]})
