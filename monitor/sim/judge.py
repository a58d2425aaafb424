"""A SIMULATED LLM judge: an OpenAI-compatible Chat Completions endpoint, no model behind it.

For the demo and the benchmark: it answers the quality layer's rubric prompt in the real wire
format (a `chat.completion` object with usage), deterministically from the response text —
stock refusals get 1 and the refusal flag, the rest a hash-drawn score centred near 4, about
one in forty is flagged as hallucinated. `latency_s` makes each call take that long; while
`failing()` is true every call is refused as a judge that does not take the request (HTTP 400).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import time
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.requests import ClientDisconnect

from monitor.quality.checks import estimate_tokens, refusal_keyword

SIM_JUDGE_MODEL = "judge-simulator"
_RESPONSE = re.compile(r"###Response to evaluate:\n(.*?)\n\n###Score rubric", re.DOTALL)
# score by hash bucket (out of 100): 1: 4 %, 2: 8 %, 3: 18 %, 4: 35 %, 5: 35 %
_SCORE_CUTS = [(4, 1), (12, 2), (30, 3), (65, 4), (100, 5)]
_REASONS = {
    1: "The response does not answer the request.",
    2: "The response addresses the request but with major errors.",
    3: "Mostly correct, with noticeable gaps.",
    4: "Correct and helpful, minor issues of completeness.",
    5: "Correct, complete and clear.",
}


def simulated_verdict(response: str) -> dict[str, Any]:
    if refusal_keyword(response):
        return {"score": 1, "refusal": True, "hallucination": False, "reason": "The response refuses the request."}
    digest = int.from_bytes(hashlib.sha256(response.encode()).digest()[:8], "big")
    bucket = digest % 100
    score = next(s for cut, s in _SCORE_CUTS if bucket < cut)
    if estimate_tokens(response) < 8:
        score = min(score, 2)
    hallucination = (digest >> 16) % 40 == 0
    reason = _REASONS[score] + (" It states facts the context does not support." if hallucination else "")
    return {"score": score, "refusal": False, "hallucination": hallucination, "reason": f"(simulated) {reason}"}


def create_judge_app(latency_s: float = 0.0, failing: Callable[[], bool] = lambda: False) -> FastAPI:
    app = FastAPI(title="LLM judge SIMULATOR (inference-monitor)")
    app.state.calls = 0

    @app.post("/v1/chat/completions", response_model=None)
    async def chat(request: Request) -> dict[str, Any] | Response:
        try:
            body = await request.json()
        except ClientDisconnect:  # the client gave up mid-body (a quality run stopped): nobody to answer
            return Response(status_code=499)
        app.state.calls += 1
        if failing():  # what a real server said to a sampler it does not support
            return JSONResponse({"error": {"message": "(simulated) unsupported samplers in request",
                                           "type": "invalid_request_error", "code": 400}}, status_code=400)
        if latency_s:
            await asyncio.sleep(latency_s)
        prompt = "\n".join(str(m.get("content", "")) for m in body.get("messages", []))
        match = _RESPONSE.search(prompt)
        content = json.dumps(simulated_verdict(match.group(1) if match else prompt), ensure_ascii=False)
        return {
            "id": f"chatcmpl-sim-{app.state.calls}", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model", SIM_JUDGE_MODEL),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": estimate_tokens(prompt), "completion_tokens": estimate_tokens(content),
                      "total_tokens": estimate_tokens(prompt) + estimate_tokens(content)},
        }

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": SIM_JUDGE_MODEL, "object": "model", "owned_by": "simulator"}]}

    return app


def main() -> None:
    """`python -m monitor.sim.judge --port 8100 --latency 1.0`: the judge simulator on its own."""
    import argparse

    import uvicorn

    parser = argparse.ArgumentParser(description="LLM judge SIMULATOR (OpenAI-compatible, no model)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8100)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds each call takes")
    args = parser.parse_args()
    uvicorn.run(create_judge_app(args.latency), host=args.host, port=args.port, log_level="warning",
                access_log=False)


if __name__ == "__main__":
    main()
