"""A scriptable OpenAI-compatible judge on loopback, for driving the real `openai` SDK.

Each call takes the next behaviour from `script` (then `default`): good | malformed | fenced |
text | 429 | 500 | hang | reject_schema | reject_temperature | bad_model | reject_samplers (a 400
to a structured request that never names response_format) | reject_max_tokens | unfinished
(JSON cut at max_tokens, finish_reason `length`) | junk (schema-valid: score 1, no reason) |
same (one fixed verdict with a reason, whatever the response) | random (well-formed verdicts,
fluent reasons, random scores and flags) | harsh (every honest score one lower) | gibberish
(honest scores, reasons that are not language). `known` (response -> verdict) makes the honest
judge know a held-out gold set's answers as the simulator knows the shipped set's.
Hostile answers (#48 item 4): drip (a byte every `drip_s`, never ending) | huge (a good answer
padded to `huge_bytes`, chunked) | huge_length (the same with a Content-Length) | gzip_bomb (the
same gzipped, whatever was asked) | text_plain | html | not_json | wrong_shape | echo_auth (the
request's Authorization header, in text). `usage` replaces the usage of every answer.
Good answers come from the judge simulator's scoring.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import random
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response, StreamingResponse

from monitor.sim.judge import _RESPONSE, JUDGE_MODES, simulated_verdict
from tests.support.appserver import serve_asgi


class JudgeScript:
    def __init__(self, default: str = "good", hang_s: float = 3.0, delay_s: float = 0.0) -> None:
        self.script: deque[str] = deque()
        self.default = default
        self.hang_s = hang_s
        self.delay_s = delay_s
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.lock = threading.Lock()
        self.drip_s = 0.05
        self.huge_bytes = 48 * 2**20
        self.echo_padding = ""  # before the echoed header: puts the key across an excerpt's end
        self.usage: dict[str, Any] = {"prompt_tokens": 1000, "completion_tokens": 50, "total_tokens": 1050}
        self.stop = threading.Event()  # set as the server stops: endless answers end
        self.known: dict[str, dict[str, Any]] = {}
        self.rng = random.Random(3)
        self.models: list[str] | None = None  # GET /v1/models lists these (None: 404)
        self.fingerprint: str | None = None  # the answers' system_fingerprint
        self.next_day: list[str] = []  # behaviours a test queues for a later run

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
        script.headers.append(dict(request.headers))
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
        response = match.group(1) if match else prompt
        mode = behaviour if behaviour in JUDGE_MODES else "honest"
        verdict = script.known.get(response) or simulated_verdict(response)
        if mode != "honest":
            honest = script.known.get(response)
            verdict = simulated_verdict(response, mode, script.rng)
            if honest is not None and mode in ("harsh", "gibberish"):
                verdict = {**honest, "score": max(1, honest["score"] - 1) if mode == "harsh" else honest["score"],
                           "reason": verdict["reason"]}
        content = {
            "malformed": '{"score": 4, "refusal": fal',
            "fenced": "Here is my evaluation:\n```json\n" + json.dumps(verdict) + "\n```",
            "text": f"Feedback: fine.\nScore: {verdict['score']}\nRefusal: no\nHallucination: no\nReason: plain text",
            "unfinished": '{"score": 4, "refusal": false, "hallucination": false, "reason": "It is ' + "very " * 40,
            "junk": json.dumps({"score": 1, "refusal": False, "hallucination": False, "reason": ""}),
            "same": json.dumps({"score": 3, "refusal": False, "hallucination": False, "reason": "Adequate."}),
        }.get(behaviour, json.dumps(verdict))
        finish = "length" if behaviour == "unfinished" else "stop"
        completion = {
            "id": "chatcmpl-test", "object": "chat.completion", "created": int(time.time()), "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish}],
            "usage": script.usage,
        }
        if script.fingerprint:
            completion["system_fingerprint"] = script.fingerprint
        return hostile(script, behaviour, request, completion) or JSONResponse(completion)

    @app.get("/v1/models")
    async def models() -> Response:
        if script.models is None:
            return JSONResponse({"error": {"message": "Not Found"}}, 404)
        return JSONResponse({"object": "list", "data": [{"id": m, "object": "model", "owned_by": "test"}
                                                         for m in script.models]})

    return app


def hostile(script: JudgeScript, behaviour: str, request: Request, completion: dict[str, Any]) -> Response | None:
    """A 200 that no judge client should read whole, or that is not a chat completion."""
    answers: dict[str, Callable[[], Response]] = {
        "text_plain": lambda: PlainTextResponse("OK"),
        "html": lambda: HTMLResponse("<html><body><h1>Welcome to nginx!</h1></body></html>"),
        "not_json": lambda: Response("upstream said OK", media_type="application/json"),
        "wrong_shape": lambda: JSONResponse({"choices": "none", "usage": script.usage}),
        "echo_auth": lambda: PlainTextResponse(
            f"{script.echo_padding}you sent authorization: {request.headers.get('authorization')}"),
        "drip": lambda: StreamingResponse(_drip(script), media_type="application/json"),
        "huge": lambda: StreamingResponse(_chunks(script, _padded(script, completion)), media_type="application/json"),
        "huge_length": lambda: Response(_padded(script, completion), media_type="application/json"),
        "gzip_bomb": lambda: Response(gzip.compress(_padded(script, completion), 6), media_type="application/json",
                                      headers={"Content-Encoding": "gzip"}),
    }
    answer = answers.get(behaviour)
    return answer() if answer else None


def _padded(script: JudgeScript, completion: dict[str, Any]) -> bytes:
    """Valid JSON and a good answer, after `huge_bytes` of whitespace."""
    return b'{"padding": "x"' + b" " * script.huge_bytes + b", " + json.dumps(completion).encode()[1:]


async def _drip(script: JudgeScript) -> AsyncIterator[bytes]:
    yield b'{"id": "chatcmpl-drip", '
    while not script.stop.is_set():  # JSON whitespace: each byte keeps a per-read timeout waiting
        await asyncio.sleep(script.drip_s)
        yield b" "


async def _chunks(script: JudgeScript, body: bytes, size: int = 2**16) -> AsyncIterator[bytes]:
    for start in range(0, len(body), size):
        if script.stop.is_set():
            return
        yield body[start:start + size]
        await asyncio.sleep(0)


@contextmanager
def judge_server(script: JudgeScript) -> Iterator[str]:
    """Yields the base URL for the SDK (`http://127.0.0.1:PORT/v1`)."""
    with serve_asgi(judge_app(script)) as url:
        try:
            yield f"{url}/v1"
        finally:
            script.stop.set()
