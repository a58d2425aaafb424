"""A local HTTP server implementing the Langfuse endpoints the source calls.

GET /api/public/v2/observations (basic auth, type/fromStartTime/toStartTime filters, `limit`,
base64 cursor in `meta.cursor`, a 429 with Retry-After on request N), POST /api/public/scores
(upsert by id, as Langfuse does).
"""

from __future__ import annotations

import base64
import threading
from datetime import datetime
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

PUBLIC, SECRET = "pk-lf-test", "sk-lf-test"


class LangfuseState:
    def __init__(self, observations: list[dict[str, Any]], throttle_on: set[int] | None = None) -> None:
        self.observations = observations
        self.throttle_on = throttle_on or set()  # 1-based numbers of observation requests answered 429
        self.requests: list[dict[str, str]] = []
        self.scores: dict[str, dict[str, Any]] = {}
        self.score_posts = 0
        self.lock = threading.Lock()


def _authorised(request: Request) -> bool:
    expected = "Basic " + base64.b64encode(f"{PUBLIC}:{SECRET}".encode()).decode()
    return request.headers.get("authorization") == expected


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def langfuse_app(state: LangfuseState) -> FastAPI:
    app = FastAPI()

    @app.get("/api/public/v2/observations")
    async def observations(request: Request) -> Response:
        if not _authorised(request):
            return JSONResponse({"message": "Invalid credentials"}, 401)
        params = dict(request.query_params)
        with state.lock:
            state.requests.append(params)
            number = len(state.requests)
        if number in state.throttle_on:
            return JSONResponse({"message": "rate limited"}, 429, headers={"Retry-After": "0.05"})
        start, end = _time(params["fromStartTime"]), _time(params["toStartTime"])
        matching = [o for o in state.observations if o["type"] == params.get("type")
                    and start <= _time(o["startTime"]) < end]
        offset = int(base64.b64decode(params["cursor"]).decode()) if "cursor" in params else 0
        limit = int(params.get("limit", 50))
        page = matching[offset:offset + limit]
        meta: dict[str, Any] = {}
        if offset + limit < len(matching):
            meta["cursor"] = base64.b64encode(str(offset + limit).encode()).decode()
        fields = set(params.get("fields", "core,basic").split(","))
        keep = {"id", "traceId", "startTime", "type"} | ({"input", "output"} if "io" in fields else set()) | (
            {"providedModelName"} if "model" in fields else set()) | ({"usageDetails"} if "usage" in fields else set())
        return JSONResponse({"data": [{k: v for k, v in o.items() if k in keep} for o in page], "meta": meta})

    @app.post("/api/public/scores")
    async def scores(request: Request) -> Response:
        if not _authorised(request):
            return JSONResponse({"message": "Invalid credentials"}, 401)
        body = await request.json()
        with state.lock:
            state.score_posts += 1
            state.scores[body["id"]] = body
        return JSONResponse({"id": body["id"]})

    return app
