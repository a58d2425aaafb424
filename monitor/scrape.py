"""Fetching one metrics page over HTTP: engine pages (the service layer) and dcgm-exporter pages
(the infra layer) alike, so it belongs to neither and sits below both.

Every way a target can be broken ends here as a `ScrapeError` with a short reason that is
safe to log and show (no URL credentials, no body): refused, timed out, HTTP status, too
large, not text.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import os
import ssl
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import httpx

from monitor.config import ServiceSettings
from monitor.redaction import redact_urls
from monitor.wire.http1 import Connection, Connections, Gone, Origin, Reader, request

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
# Of an error answer's body, what is read: enough for a JSON error's message (llama-server's 501
# without --metrics says so in one), never a whole error page.
ERROR_BODY_BYTES = 4096


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


async def fetch_page(client: httpx.AsyncClient, url: str, timeout_s: float, max_bytes: int,
                     metrics_page: bool = True) -> FetchedPage:
    """GET the page with one deadline for the whole exchange. A 404 of a `metrics_page` at a path
    other than /metrics names the URL to use (`http_error`); other GETs (an API's JSON) say no such thing.

    httpx's timeouts are per socket operation, so a server that trickles a byte every few
    seconds would never trip them; the outer deadline covers connect + headers + body.
    """
    try:
        async with asyncio.timeout(timeout_s):
            return await _fetch(client, url, max_bytes, metrics_page)
    except TimeoutError:
        raise ScrapeError(f"timed out after {timeout_s:g}s") from None
    except httpx.TimeoutException:
        raise ScrapeError(f"timed out after {timeout_s:g}s") from None
    except httpx.ConnectError as exc:
        raise ScrapeError(f"connection failed: {_connect_reason(exc)}") from None
    except httpx.HTTPError as exc:
        raise ScrapeError(f"{type(exc).__name__}: {_reason(exc)}") from None


async def _fetch(client: httpx.AsyncClient, url: str, max_bytes: int, metrics_page: bool) -> FetchedPage:
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
                                        response.headers.get("content-type", ""), response.aiter_bytes(), max_bytes,
                                        parsed if metrics_page else None)
        except _STALE_HTTPX:
            if answered or attempt == 2:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


async def _read_page(
    status: int, declared: str, content_type: str, body: AsyncIterator[bytes], max_bytes: int,
    url: httpx.URL | None
) -> FetchedPage:
    """A 200 answer's body, at most `max_bytes` (declared or streamed), as UTF-8 text."""
    if status != 200:
        start = b""
        async for chunk in body:
            start += chunk
            if len(start) >= ERROR_BODY_BYTES:
                break
        raise http_error(status, start[:ERROR_BODY_BYTES], url)
    if declared.isdigit() and int(declared) > max_bytes:
        raise ScrapeError(f"page larger than {max_bytes} bytes ({declared})")
    chunks: list[bytes] = []
    size = 0
    async for chunk in body:
        size += len(chunk)
        if size > max_bytes:
            raise ScrapeError(f"page larger than {max_bytes} bytes")
        chunks.append(chunk)
    return _page(b"".join(chunks), content_type)


def _page(body: bytes, content_type: str) -> FetchedPage:
    """A 200 answer's whole body as the page: UTF-8 text, or a ScrapeError."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise ScrapeError("page is not UTF-8 text") from None
    return FetchedPage(text=text, openmetrics="openmetrics" in content_type, size=len(body))


def http_error(status: int, body: bytes, url: httpx.URL | None) -> ScrapeError:
    """`HTTP 404`, with what the answer says about the fix: the server's own message from a JSON
    error body (llama-server without --metrics: "... Start it with `--metrics`"), or, for a 404 of a
    metrics page (`url`) at a path other than /metrics, the URL the engines serve their page at."""
    reason = f"HTTP {status}"
    said = _error_message(body)
    if said and "metrics endpoint" in said and "--metrics" not in said:
        said += " (llama-server: start it with --metrics)"  # older llama.cpp builds do not say how
    if said:
        reason += f": {said}"
    if status == 404 and url is not None and not url.path.rstrip("/").endswith("/metrics"):
        base = url.copy_with(path="/metrics", query=None, fragment=None, username=None, password=None)
        reason += f"; the engines serve their page at /metrics: set the target's url to {base}"
    return ScrapeError(reason)


def _error_message(body: bytes) -> str:
    """The message of a JSON error body (llama.cpp and OpenAI `{"error": {"message"}}`, FastAPI
    `{"detail"}`, `{"message"}`), one line of at most 200 characters, URLs without credentials."""
    try:
        data = json.loads(body)
    except ValueError:
        return ""
    for _ in range(3):
        if not isinstance(data, dict):
            break
        data = data.get("error") or data.get("message") or data.get("detail")
    if not isinstance(data, str) or not data.strip():
        return ""
    return redact_urls(" ".join(data.split()))[:200]


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


# -- the same exchange on one kept-alive connection per target ----------------------------------
# The spread scheduler gives every target a `TargetConnection` on the wire's own client
# (monitor/wire/http1.py: httptools on an asyncio protocol). The body arrives in the transport's
# own reads (256 KiB) straight into the parser, with no stream, pool, lock or anyio layer between
# (`python -m bench.http_client`, docs/measurements.md). The injected httpx client (tests,
# `infermon check`, dcgm targets) keeps `fetch_page`. Same errors, word for word.


def _page_too_large(limit: int, declared: int | None) -> ScrapeError:
    return ScrapeError(f"page larger than {limit} bytes" + (f" ({declared})" if declared is not None else ""))


class TargetConnection:
    """One target's HTTP/1.1 connection, kept alive from one scrape to the next (one at a time).

    A kept-alive connection idle past `keepalive_s` is not reused; a connection the server has
    closed, or one that must close after its answer (`Connection: close`, HTTP/1.0, an error
    status, a body not read to its end), neither.
    """

    def __init__(self, tls: ssl.SSLContext, keepalive_s: float) -> None:
        self.connections = Connections(tls, keepalive_s)
        self.lock = asyncio.Lock()

    async def get(self, url: httpx.URL, headers: list[tuple[bytes, bytes]], max_bytes: int) -> Reader:
        """One GET (sent again once on a new connection when it failed before any answer): the
        answer's status, headers and body (an error's first ERROR_BODY_BYTES, a redirect's none)."""
        scheme = url.scheme
        if scheme not in ("http", "https"):
            raise ScrapeError(f"UnsupportedProtocol: Request URL has an unsupported protocol '{scheme}://'.")
        origin = Origin(scheme, url.host, url.port or (443 if scheme == "https" else 80))
        sent = request(b"GET", url.raw_path, [(b"Host", url.netloc), *headers])
        async with self.lock:
            try:
                return await self.connections.exchange(
                    origin, sent, lambda: Reader(max_bytes, ERROR_BODY_BYTES, _page_too_large))
            except Gone as exc:
                raise ScrapeError(exc.reason) from None
            except ssl.SSLError as exc:
                reason = getattr(exc, "verify_message", None) or exc.reason or str(exc)
                raise ScrapeError(f"connection failed: TLS: {reason}") from None
            except OSError as exc:
                raise ScrapeError(f"connection failed: {_connect_reason(exc)}") from None

    @property
    def kept(self) -> Connection | None:
        """The kept-alive connection the next scrape takes, if any."""
        return self.connections.kept()

    async def aclose(self) -> None:
        self.connections.close()


def target_connection(settings: ServiceSettings, tls: ssl.SSLContext) -> TargetConnection:
    """One target's own connection, kept alive for two intervals plus the timeout (`pool_limits`)."""
    keep = pool_limits(settings).keepalive_expiry
    return TargetConnection(tls, keep if keep is not None else 0.0)


async def fetch_target_page(conn: TargetConnection, url: str, timeout_s: float, max_bytes: int) -> FetchedPage:
    """`fetch_page` over the target's own connection: one deadline, redirects followed, credentials
    as Basic auth (never to another origin)."""
    try:
        async with asyncio.timeout(timeout_s):
            return await _fetch_kept(conn, url, max_bytes)
    except TimeoutError:
        raise ScrapeError(f"timed out after {timeout_s:g}s") from None
    except httpx.InvalidURL as exc:
        raise ScrapeError(f"InvalidURL: {_reason(exc)}") from None
    except ValueError as exc:  # a header value with a line break
        raise ScrapeError(f"LocalProtocolError: {_reason(exc)}") from None


@functools.lru_cache(maxsize=4096)
def _target_url(url: str) -> tuple[httpx.URL, bytes | None]:
    """The URL without credentials or fragment, and its credentials as a Basic header: parsed once
    per target, not on every scrape (two httpx.URL parses cost ~45 us)."""
    parsed = httpx.URL(url)
    authorization = _basic(parsed) if parsed.userinfo else None
    return parsed.copy_with(username=None, password=None, fragment=None), authorization


async def _fetch_kept(conn: TargetConnection, url: str, max_bytes: int) -> FetchedPage:
    origin, authorization = _target_url(url)
    current = origin
    for _ in range(MAX_REDIRECTS + 1):
        headers = [(b"Accept", ACCEPT.encode())]
        if authorization is not None and _same_origin(current, origin):
            headers.append((b"Authorization", authorization))  # never sent to another origin
        answer = await conn.get(current, headers, max_bytes)
        location = answer.header(b"location").decode("latin-1")
        if answer.status in _REDIRECTS and location:
            current = current.join(location).copy_with(fragment=None)
            continue
        if answer.status != 200:
            raise http_error(answer.status, answer.content(), current)
        return _page(answer.content(), answer.header(b"content-type").decode("latin-1"))
    raise ScrapeError(f"more than {MAX_REDIRECTS} redirects")


def _basic(url: httpx.URL) -> bytes:
    return b"Basic " + base64.b64encode(f"{url.username}:{url.password}".encode())


def _same_origin(a: httpx.URL, b: httpx.URL) -> bool:
    return (a.scheme, a.host, a.port) == (b.scheme, b.host, b.port)
