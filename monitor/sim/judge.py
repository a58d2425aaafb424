"""A SIMULATED LLM judge: an OpenAI-compatible Chat Completions endpoint, no model behind it.

For the demo and the benchmark: it answers the quality layer's rubric prompt in the real wire
format (a `chat.completion` object with usage), deterministically from the response text —
stock refusals get 1 and the refusal flag, the rest a hash-drawn score centred near 4, about
one in forty is flagged as hallucinated. The shipped gold set's known answers
(monitor/data/judge_gold.jsonl) get their known verdicts: the simulator plays an honest judge,
which the quality layer's calibration then passes. `mode` plays a judge gone wrong: `random`
(well-formed verdicts, fluent reasons, random scores and flags), `harsh` (every honest score one
lower), `gibberish` (honest scores, reasons that are not language). `latency_s` makes each call
take that long; while `failing()` is true every call is refused as a judge that does not take
the request (HTTP 400).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import random
import re
import time
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.requests import ClientDisconnect

from monitor.quality.calibration import SHIPPED_GOLD, GoldItem, load_gold
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


JUDGE_MODES = ("honest", "random", "harsh", "gibberish")
_GIBBERISH = "rltu& smno3atid woc p4U0 ~~kq#z xv7&"


@functools.cache
def _known() -> dict[str, GoldItem]:
    return {item.response: item for item in load_gold(SHIPPED_GOLD)}


def simulated_verdict(response: str, mode: str = "honest", rng: random.Random | None = None) -> dict[str, Any]:
    """The simulator's verdict on one response, as `mode` plays the judge."""
    verdict = _honest(response)
    if mode == "random":
        rng = rng or random.Random()
        score = rng.randint(1, 5)
        return {"score": score, "refusal": rng.random() < 0.5, "hallucination": rng.random() < 0.5,
                "reason": f"(simulated) {_REASONS[score]}"}
    if mode == "harsh":
        score = max(1, verdict["score"] - 1)
        return {**verdict, "score": score, "reason": f"(simulated) {_REASONS[score]}"}
    if mode == "gibberish":
        return {**verdict, "reason": _GIBBERISH}
    return verdict


def _honest(response: str) -> dict[str, Any]:
    known = _known().get(response)
    if known is not None:
        return {"score": known.score, "refusal": bool(known.refusal), "hallucination": bool(known.hallucination),
                "reason": f"(simulated) {_REASONS[known.score]}"}
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


def create_judge_app(latency_s: float = 0.0, failing: Callable[[], bool] = lambda: False,
                     mode: Callable[[], str] = lambda: "honest") -> FastAPI:
    """`mode()` is read on every call: a scenario can swap the judge while it runs."""
    app = FastAPI(title="LLM judge SIMULATOR (inference-monitor)")
    app.state.calls = 0
    rng = random.Random(5)

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
        verdict = simulated_verdict(match.group(1) if match else prompt, mode(), rng)
        content = json.dumps(verdict, ensure_ascii=False)
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
    parser.add_argument("--mode", choices=JUDGE_MODES, default="honest", help="the judge it plays")
    args = parser.parse_args()
    uvicorn.run(create_judge_app(args.latency, mode=lambda: args.mode), host=args.host, port=args.port,
                log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
