"""The bearer token that guards the POST endpoints (`api.token`).

Compared in constant time; the token itself never appears in a response, an error or a log.
Without a token the write routes fail closed: they are refused unless the operator opened them
(`api.allow_unauthenticated: true`) or the server only listens on loopback.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from fastapi import HTTPException, Request
from pydantic import SecretStr

from monitor.config import Settings

log = logging.getLogger("monitor.auth")


@dataclass(frozen=True)
class WriteAccess:
    token: SecretStr | None
    open: bool  # without a token: accept unauthenticated writes
    reason: str  # for the start-up log line


def write_access(settings: Settings) -> WriteAccess:
    """Who may call the POST routes under these settings, and why (logged at start-up)."""
    token, host = settings.api.token, settings.server.host
    if token is not None:
        return WriteAccess(token, False, "bearer token required (api.token)")
    if settings.api.allow_unauthenticated:
        return WriteAccess(None, True, "open to anyone who can reach the port (api.allow_unauthenticated: true)")
    if is_loopback(host):
        return WriteAccess(None, True, f"open without a token: the server binds to loopback ({host})")
    return WriteAccess(None, False, f"refused: no api.token and the server binds to {host} "
                                    "(set api.token, or api.allow_unauthenticated: true)")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def bearer_guard(token: SecretStr | None, allow_unauthenticated: bool = False) -> Callable[[Request], Awaitable[None]]:
    """A FastAPI dependency: 401 unless the request carries `Authorization: Bearer <token>`;
    with no token, 403 unless unauthenticated writes are allowed."""

    async def check(request: Request) -> None:
        if token is None:
            if allow_unauthenticated:
                return
            raise HTTPException(status_code=403,
                                detail="writes are disabled: no api.token is configured on a non-loopback bind")
        sent = request.headers.get("authorization", "")
        scheme, _, value = sent.partition(" ")
        expected = token.get_secret_value().encode()
        if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode(), expected):
            raise HTTPException(
                status_code=401, detail="missing or wrong bearer token", headers={"WWW-Authenticate": "Bearer"}
            )

    return check


def access_guard(settings: Settings) -> Callable[[Request], Awaitable[None]]:
    access = write_access(settings)
    return bearer_guard(access.token, access.open)
