"""The bearer token that guards the POST endpoints (`api.token`).

Compared in constant time; the token itself never appears in a response, an error or a log.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable

from fastapi import HTTPException, Request
from pydantic import SecretStr


def bearer_guard(token: SecretStr | None) -> Callable[[Request], Awaitable[None]]:
    """A FastAPI dependency: 401 unless the request carries `Authorization: Bearer <token>`."""

    async def check(request: Request) -> None:
        if token is None:
            return
        sent = request.headers.get("authorization", "")
        scheme, _, value = sent.partition(" ")
        expected = token.get_secret_value().encode()
        if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode(), expected):
            raise HTTPException(
                status_code=401, detail="missing or wrong bearer token", headers={"WWW-Authenticate": "Bearer"}
            )

    return check
