"""Fetching one metrics page over HTTP: engine pages (the service layer) and dcgm-exporter pages
(the infra layer) alike, so it belongs to neither and sits below both.

Every way a target can be broken ends here as a `ScrapeError` with a short reason that is
safe to log and show (no URL credentials, no body): refused, timed out, HTTP status, too
large, not text.
"""

from __future__ import annotations

import asyncio
import base64
import os
import ssl
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import httpcore
import httpx

from monitor.config import ServiceSettings

# The text format only. prometheus_client (>= 0.23, up to 0.26 at least) ignores q-values and
# answers any Accept that lists OpenMetrics with OpenMetrics in `escaping=underscores`, writing
# `vllm_num_requests_running` for `vllm:num_requests_running` (its issue #1177); asked for
# text/plain;version=0.0.4 alone it keeps the colons. Nothing we read needs OpenMetrics (exemplars,
# _created), and the engine tables read both spellings anyway, for pages other clients made.
ACCEPT = "text/plain;version=0.0.4;q=1.0,*/*;q=0.1"
MAX_REDIRECTS = 10
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
# A kept-alive connection the server closed as the next scrape went out (its keep-alive timeout,
# uvicorn's 5 s in vLLM and SGLang, against a 5-s scrape, or one that drifted on a busy host): the
# GET fails before any answer. Go's net/http, and so Prometheus, sends such an idempotent request
# again on a new connection; so does this, once, within the same deadline. A server that closes
# every connection unanswered still fails the scrape, with the same reason.
_STALE_HTTPX = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)
_STALE_CORE = (httpcore.RemoteProtocolError, httpcore.ReadError, httpcore.WriteError)


def pool_limits(settings: ServiceSettings) -> httpx.Limits:
    """A connection per target, kept alive across scrapes.

    httpx's default (100 connections, 20 kept alive, 5 s idle expiry) makes a fleet reconnect on
    every scrape and queue behind the pool. Scrapes are spread over the interval, so few run at
    once; an idle connection is kept for two intervals plus the timeout, so the next scrape of the
    same target reuses it (a server that closes it sooner is simply reconnected to).
    """
    keep = 2 * settings.scrape_interval.seconds + settings.scrape_timeout.seconds
    return httpx.Limits(max_connections=None, max_keepalive_connections=None, keepalive_expiry=keep)


class ScrapeError(Exception):
    """Why a page could not be fetched; the message is the reason, safe to show."""

    plain = True


@dataclass(frozen=True)
class FetchedPage:
    text: str
    openmetrics: bool
    size: int


async def fetch_page(client: httpx.AsyncClient, url: str, timeout_s: float, max_bytes: int) -> FetchedPage:
    """GET the page with one deadline for the whole exchange.

    httpx's timeouts are per socket operation, so a server that trickles a byte every few
    seconds would never trip them; the outer deadline covers connect + headers + body.
    """
    try:
        async with asyncio.timeout(timeout_s):
            return await _fetch(client, url, max_bytes)
    except TimeoutError:
        raise ScrapeError(f"timed out after {timeout_s:g}s") from None
    except httpx.TimeoutException:
        raise ScrapeError(f"timed out after {timeout_s:g}s") from None
    except httpx.ConnectError as exc:
        raise ScrapeError(f"connection failed: {_connect_reason(exc)}") from None
    except httpx.HTTPError as exc:
        raise ScrapeError(f"{type(exc).__name__}: {_reason(exc)}") from None


async def _fetch(client: httpx.AsyncClient, url: str, max_bytes: int) -> FetchedPage:
    # user:password in the URL travels as a Basic auth header, never inside the URL that
    # httpx writes to its log.
    parsed = httpx.URL(url)
    auth: httpx.BasicAuth | None = None
    if parsed.userinfo:
        auth = httpx.BasicAuth(parsed.username, parsed.password)
        parsed = parsed.copy_with(username=None, password=None)
    for attempt in (1, 2):
        answered = False
        try:
            async with client.stream("GET", parsed, headers={"Accept": ACCEPT}, auth=auth) as response:
                answered = True
                return await _read_page(response.status_code, response.headers.get("content-length", ""),
                                        response.headers.get("content-type", ""), response.aiter_bytes(), max_bytes)
        except _STALE_HTTPX:
            if answered or attempt == 2:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


async def _read_page(
    status: int, declared: str, content_type: str, body: AsyncIterator[bytes], max_bytes: int
) -> FetchedPage:
    """A 200 answer's body, at most `max_bytes` (declared or streamed), as UTF-8 text."""
    if status != 200:
        raise ScrapeError(f"HTTP {status}")
    if declared.isdigit() and int(declared) > max_bytes:
        raise ScrapeError(f"page larger than {max_bytes} bytes ({declared})")
    chunks: list[bytes] = []
    size = 0
    async for chunk in body:
        size += len(chunk)
        if size > max_bytes:
            raise ScrapeError(f"page larger than {max_bytes} bytes")
        chunks.append(chunk)
    try:
        text = b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError:
        raise ScrapeError("page is not UTF-8 text") from None
    return FetchedPage(text=text, openmetrics="openmetrics" in content_type, size=size)


def _connect_reason(exc: Exception) -> str:
    # anyio wraps a refused connect as "All connection attempts failed"; the errno says which.
    for cause in _causes(exc):
        if isinstance(cause, OSError) and cause.errno and cause.errno > 0:
            return os.strerror(cause.errno)
    return _reason(exc)


def _reason(exc: Exception) -> str:
    # httpx messages can contain the URL; keep only the first line, without it. Some arrive
    # empty (a reset read under anyio: ReadError('')): the first cause with a message says why.
    for cause in _causes(exc):
        text = str(cause).split("\n", 1)[0]
        if text:
            return text[:200]
    return type(exc).__name__


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """The exception and the ones it wraps, outermost first (bounded: a chain can be cyclic)."""
    cause: BaseException | None = exc
    for _ in range(8):
        if cause is None:
            return
        yield cause
        cause = cause.__cause__ or cause.__context__


# -- the same exchange on httpcore directly --------------------------------------------------------
# httpx costs ~0.3 ms a request on top of httpcore on the 55 KB page and ~7 ms on a 1.1 MB one
# (bench/http_client.py): its request/response models, decoders and re-chunking. The spread
# scheduler gives every target its own httpcore pool and fetches here; the injected httpx client
# (tests, `infermon check`, dcgm targets) keeps `fetch_page`. Same errors, word for word.


def target_pool(settings: ServiceSettings, tls: ssl.SSLContext) -> httpcore.AsyncConnectionPool:
    """One target's own connection, kept alive from one scrape to the next."""
    return httpcore.AsyncConnectionPool(ssl_context=tls, max_connections=4, max_keepalive_connections=1,
                                        keepalive_expiry=pool_limits(settings).keepalive_expiry)


async def fetch_page_core(pool: httpcore.AsyncConnectionPool, url: str, timeout_s: float,
                          max_bytes: int) -> FetchedPage:
    """`fetch_page` over an httpcore pool: one deadline, redirects followed, credentials as Basic auth."""
    try:
        async with asyncio.timeout(timeout_s):
            return await _fetch_core(pool, url, max_bytes)
    except (TimeoutError, httpcore.TimeoutException):
        raise ScrapeError(f"timed out after {timeout_s:g}s") from None
    except httpcore.ConnectError as exc:
        raise ScrapeError(f"connection failed: {_connect_reason(exc)}") from None
    except (httpcore.ProtocolError, httpcore.NetworkError, httpcore.UnsupportedProtocol,
            httpcore.ConnectionNotAvailable, httpx.InvalidURL) as exc:
        raise ScrapeError(f"{type(exc).__name__}: {_reason(exc)}") from None


async def _fetch_core(pool: httpcore.AsyncConnectionPool, url: str, max_bytes: int) -> FetchedPage:
    current = httpx.URL(url)
    authorization = _basic(current) if current.userinfo else None
    origin = current.copy_with(username=None, password=None, fragment=None)
    current = origin
    for _ in range(MAX_REDIRECTS + 1):
        headers = [(b"Accept", ACCEPT.encode())]
        if authorization is not None and _same_origin(current, origin):
            headers.append((b"Authorization", authorization))  # never sent to another origin
        page, location = await _get_core(pool, str(current), headers, max_bytes)
        if page is not None:
            return page
        current = current.join(location).copy_with(fragment=None)
    raise ScrapeError(f"more than {MAX_REDIRECTS} redirects")


async def _get_core(pool: httpcore.AsyncConnectionPool, url: str, headers: list[tuple[bytes, bytes]],
                    max_bytes: int) -> tuple[FetchedPage | None, str]:
    """One GET: (the page, "") or (None, where a redirect points); sent again once on a new
    connection when the server closed the kept-alive one before answering (see `_STALE_CORE`)."""
    for attempt in (1, 2):
        answered = False
        try:
            async with pool.stream("GET", url, headers=headers) as response:
                answered = True
                fields = {name.lower(): value for name, value in response.headers}
                location = fields.get(b"location")
                if response.status in _REDIRECTS and location is not None:
                    return None, location.decode("latin-1")
                return await _read_page(response.status, fields.get(b"content-length", b"").decode("latin-1"),
                                        fields.get(b"content-type", b"").decode("latin-1"), response.aiter_stream(),
                                        max_bytes), ""
        except _STALE_CORE:
            if answered or attempt == 2:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def _basic(url: httpx.URL) -> bytes:
    return b"Basic " + base64.b64encode(f"{url.username}:{url.password}".encode())


def _same_origin(a: httpx.URL, b: httpx.URL) -> bool:
    return (a.scheme, a.host, a.port) == (b.scheme, b.host, b.port)
