"""A scriptable OpenAI-compatible judge on loopback, for driving the real `openai` SDK.

Each call takes the next behaviour from `script` (then `default`): good | malformed | fenced |
text | 429 | 500 | hang | reject_schema | reject_temperature | bad_model | reject_samplers (a 400
to a structured request that never names response_format) | reject_max_tokens | unfinished
(JSON cut at max_tokens, finish_reason `length`) | junk (schema-valid: score 1, no reason) |
same (one fixed verdict with a reason, whatever the response).
Good answers come from the judge simulator's scoring.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from monitor.sim.judge import _RESPONSE, simulated_verdict
from tests.appserver import serve_asgi


class JudgeScript:
    def __init__(self, default: str = "good", hang_s: float = 3.0, delay_s: float = 0.0) -> None:
        self.script: deque[str] = deque()
        self.default = default
        self.hang_s = hang_s
        self.delay_s = delay_s
        self.bodies: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    @property
    def calls(self) -> int:
        return len(self.bodies)

    def next(self, body: dict[str, Any]) -> str:
        with self.lock:
            self.bodies.append(body)
            return self.script.popleft() if self.script else self.default


def judge_app(script: JudgeScript) -> FastAPI:
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        body = await request.json()
        behaviour = script.next(body)
        if script.delay_s:
            await asyncio.sleep(script.delay_s)
        if behaviour == "429":
            return JSONResponse({"error": {"message": "Rate limit reached", "type": "rate_limit"}}, 429,
                                headers={"Retry-After": "0.1"})
        if behaviour == "bad_model":
            return JSONResponse({"error": {"message": f"The model `{body['model']}` does not exist."}}, 404)
        if behaviour == "500":
            return JSONResponse({"error": {"message": "upstream died"}}, 500)
        if behaviour == "hang":
            await asyncio.sleep(script.hang_s)
        if behaviour == "reject_temperature" and body.get("temperature") is not None:
            message = "Unsupported value: 'temperature' does not support 0 with this model."
            return JSONResponse({"error": {"message": message, "param": "temperature"}}, 400)
        if behaviour == "reject_samplers" and "response_format" in body:
            message = "Failed to initialize samplers: the grammar could not be parsed"
            return JSONResponse({"error": {"code": 400, "message": message, "type": "invalid_request_error"}}, 400)
        if behaviour == "reject_max_tokens" and "max_tokens" in body:
            message = "Unsupported parameter: 'max_tokens' is not supported with this model."
            return JSONResponse({"error": {"message": message, "param": "max_tokens"}}, 400)
        if behaviour == "reject_schema" and "response_format" in body:
            return JSONResponse({"error": {"message": "response_format json_schema is not supported"}}, 400)
        prompt = body["messages"][0]["content"]
        match = _RESPONSE.search(prompt)
        verdict = simulated_verdict(match.group(1) if match else prompt)
        content = {
            "malformed": '{"score": 4, "refusal": fal',
            "fenced": "Here is my evaluation:\n```json\n" + json.dumps(verdict) + "\n```",
            "text": f"Feedback: fine.\nScore: {verdict['score']}\nRefusal: no\nHallucination: no\nReason: plain text",
            "unfinished": '{"score": 4, "refusal": false, "hallucination": false, "reason": "It is ' + "very " * 40,
            "junk": json.dumps({"score": 1, "refusal": False, "hallucination": False, "reason": ""}),
            "same": json.dumps({"score": 3, "refusal": False, "hallucination": False, "reason": "Adequate."}),
        }.get(behaviour, json.dumps(verdict))
        finish = "length" if behaviour == "unfinished" else "stop"
        return JSONResponse({
            "id": "chatcmpl-test", "object": "chat.completion", "created": int(time.time()), "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish}],
            "usage": {"prompt_tokens": 1000, "completion_tokens": 50, "total_tokens": 1050},
        })

    return app


@contextmanager
def judge_server(script: JudgeScript) -> Iterator[str]:
    """Yields the base URL for the SDK (`http://127.0.0.1:PORT/v1`)."""
    with serve_asgi(judge_app(script)) as url:
        yield f"{url}/v1"
