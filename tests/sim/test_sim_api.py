"""The simulator's OpenAI-compatible API over real HTTP on loopback."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from monitor.sim import DEFAULT_MODEL as MODEL
from monitor.sim import LatencyProfile


def _sse_events(response: httpx.Response) -> list[str]:
    """The `data:` payloads, checking each event is `data: ...` followed by a blank line."""
    raw = response.read().decode()
    assert raw.endswith("\n\n")
    events = raw.split("\n\n")[:-1]
    assert all(event.startswith("data: ") for event in events)
    return [event[len("data: "):] for event in events]  # fmt: skip


def test_chat_completion_shape(start_sim, send_chat):
    server = start_sim()
    body = send_chat(server, "one two three four", max_tokens=4).json()
    assert body["object"] == "chat.completion" and body["model"] == MODEL
    assert body["id"].startswith("chatcmpl-")
    choice = body["choices"][0]
    assert choice["message"]["role"] == "assistant"
    assert choice["finish_reason"] == "length"
    assert len(choice["message"]["content"].split()) == 4
    assert body["usage"] == {"prompt_tokens": 4, "completion_tokens": 4, "total_tokens": 8,
                             "prompt_tokens_details": None}  # fmt: skip


def test_completion_shape_and_stop_reason(start_sim):
    server = start_sim()
    response = httpx.post(f"{server.url}/v1/completions", json={"prompt": "hi", "max_tokens": 500})
    body = response.json()
    assert body["object"] == "text_completion"
    assert body["choices"][0]["finish_reason"] == "stop"  # drawn length (5..20) < 500
    assert 5 <= body["usage"]["completion_tokens"] <= 20


@pytest.mark.parametrize("include_usage", [True, False])
def test_chat_streaming_sse(start_sim, include_usage):
    server = start_sim()
    body = {"messages": [{"role": "user", "content": "stream please"}], "max_tokens": 12,
            "stream": True, "stream_options": {"include_usage": include_usage}}  # fmt: skip
    with httpx.stream("POST", f"{server.url}/v1/chat/completions", json=body) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = _sse_events(response)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    content = [c for c in chunks if c["choices"]]
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in content)
    assert len(text.split()) == 12
    assert content[-1]["choices"][0]["finish_reason"] == "length"
    if include_usage:
        assert chunks[-1]["choices"] == []
        assert chunks[-1]["usage"]["completion_tokens"] == 12
        assert all(c["usage"] is None for c in content)
    else:
        assert all("usage" not in c for c in chunks)


def test_completion_streaming_sse(start_sim):
    server = start_sim()
    body = {"prompt": "a b c", "max_tokens": 6, "stream": True}
    with httpx.stream("POST", f"{server.url}/v1/completions", json=body) as response:
        events = _sse_events(response)
    chunks = [json.loads(event) for event in events[:-1]]
    assert events[-1] == "[DONE]"
    assert "".join(c["choices"][0]["text"] for c in chunks).count(" ") == 6
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


def test_models_and_health(start_sim):
    server = start_sim()
    models = httpx.get(f"{server.url}/v1/models").json()
    assert [m["id"] for m in models["data"]] == [MODEL]
    assert httpx.get(f"{server.url}/health").status_code == 200


def test_client_errors_are_openai_shaped_and_counted(start_sim, scrape, send_chat):
    server = start_sim()
    wrong_model = httpx.post(f"{server.url}/v1/chat/completions",
                             json={"model": "gpt-x", "messages": [{"role": "user", "content": "hi"}]})
    assert wrong_model.status_code == 404
    assert wrong_model.json()["error"]["type"] == "NotFoundError"
    malformed = httpx.post(f"{server.url}/v1/chat/completions", json={"messages": "nope"})
    assert malformed.status_code == 400
    assert malformed.json()["error"]["code"] == 400
    too_long = send_chat(server, "hi", max_tokens=10**6)
    assert too_long.status_code == 400
    page = scrape(server)
    assert page.value("http_requests_total", status="4xx") == 3
    assert page.value("vllm:request_success_total") == 0  # never reached the engine


def _wait_for(condition, timeout_s: float = 3.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return False


SLOW = LatencyProfile(prefill_s=0.005, prefill_per_token_s=0.0, per_token_s=0.005,
                      output_tokens=(2000, 2000), jitter=0.0)  # fmt: skip


def test_streaming_client_disconnect_is_an_abort(start_sim, scrape):
    server = start_sim(SLOW)
    body = {"prompt": "x", "max_tokens": 2000, "stream": True}
    with httpx.stream("POST", f"{server.url}/v1/completions", json=body) as response:
        next(response.iter_lines())  # the first token arrived; now hang up
    assert _wait_for(lambda: scrape(server).value(
        "vllm:request_success_total", finished_reason="abort") == 1)  # fmt: skip
    assert scrape(server).value("vllm:num_requests_running") == 0


def test_plain_client_timeout_is_an_abort(start_sim, scrape, send_chat):
    server = start_sim(SLOW)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{server.url}/v1/completions", json={"prompt": "x", "max_tokens": 2000},
                   timeout=0.3)  # fmt: skip
    assert _wait_for(lambda: scrape(server).value(
        "vllm:request_success_total", finished_reason="abort") == 1)  # fmt: skip
