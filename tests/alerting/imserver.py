"""Loopback stand-ins for Feishu, DingTalk, WeCom, Slack and a generic webhook (named simulators:
the real platforms cannot be reached from a test).

Each checks what the real one checks, with the documented algorithm: Feishu's signature in the
body (HMAC-SHA256 keyed with `timestamp\\nsecret` over nothing), DingTalk's in the query
(HMAC-SHA256 of `timestamp\\nsecret` keyed with the secret, URL-encoded), WeCom's 4096-byte
markdown limit, the token in each URL, a generic webhook's bearer token. It answers as the
platform does — HTTP 200 with an error code — and can be told to fail the next requests with
the platform's own rate-limit code, or to be down (503).

    with ImServer() as im:
        url = im.url("feishu")            # .../open-apis/bot/v2/hook/<token>
        im.fail_next("feishu", 2)         # the next two: {"code": 11232, "msg": "frequency limited"}
        im.down("webhook")                # 503 until im.up("webhook")
        im.accepted("feishu")             # the messages it took, bodies parsed
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

KINDS = ("webhook", "slack", "feishu", "dingtalk", "wecom")
TOKENS = {kind: f"tok-{kind}-5f1d9c2e7a" for kind in KINDS}  # what each URL carries
SECRETS = {"feishu": "SECfeishu-8c3b1a", "dingtalk": "SECdingtalk-4e7f2d"}
BEARER = "bearer-webhook-91ac"
PATHS = {
    "webhook": "/hook/{t}",
    "slack": "/services/T0000/B0000/{t}",
    "feishu": "/open-apis/bot/v2/hook/{t}",
    "dingtalk": "/robot/send?access_token={t}",
    "wecom": "/cgi-bin/webhook/send?key={t}",
}
RATE_LIMITED: dict[str, tuple[int, Any]] = {
    "feishu": (200, {"code": 11232, "msg": "frequency limited psm[lark.oapi.app_platform_runtime]"}),
    "dingtalk": (200, {"errcode": 130101, "errmsg": "send too fast, exceed 20 times per minute"}),
    "wecom": (200, {"errcode": 45009, "errmsg": "api freq out of limit"}),
    "slack": (429, "rate_limited"),
    "webhook": (503, "try later"),
}


@dataclass
class Received:
    kind: str
    query: dict[str, str]
    headers: dict[str, str]
    body: dict[str, Any]
    accepted: bool
    answer: Any


@dataclass
class ImServer:
    requests: list[Received] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._fail: dict[str, int] = defaultdict(int)
        self._down: set[str] = set()
        self._server: ThreadingHTTPServer | None = None

    def __enter__(self) -> ImServer:
        handler = type("Handler", (_Handler,), {"im": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()

    def url(self, kind: str) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_port}" + PATHS[kind].format(t=TOKENS[kind])

    def fail_next(self, kind: str, count: int) -> None:
        with self._lock:
            self._fail[kind] += count

    def down(self, kind: str) -> None:
        with self._lock:
            self._down.add(kind)

    def up(self, kind: str) -> None:
        with self._lock:
            self._down.discard(kind)

    def accepted(self, kind: str) -> list[dict[str, Any]]:
        with self._lock:
            return [r.body for r in self.requests if r.kind == kind and r.accepted]

    def attempts(self, kind: str) -> int:
        with self._lock:
            return sum(1 for r in self.requests if r.kind == kind)

    def answer(self, kind: str, query: dict[str, str], headers: dict[str, str], body: Any) -> tuple[int, Any]:
        with self._lock:
            if kind in self._down:
                verdict: tuple[int, Any] = (503, "down")
            elif self._fail[kind] > 0:
                self._fail[kind] -= 1
                verdict = RATE_LIMITED[kind]
            else:
                verdict = CHECKS[kind](query, headers, body)
            accepted = _is_success(kind, verdict)
            self.requests.append(Received(kind, query, headers, body, accepted, verdict[1]))
            return verdict


def _is_success(kind: str, verdict: tuple[int, Any]) -> bool:
    status, answer = verdict
    if status != 200:
        return False
    if isinstance(answer, dict):
        return answer.get("code", answer.get("errcode", 0)) == 0
    return True


# -- what each platform checks ----------------------------------------------------------------


def feishu_sign(timestamp: str, secret: str) -> str:
    key = f"{timestamp}\n{secret}".encode()
    return base64.b64encode(hmac.new(key, b"", hashlib.sha256).digest()).decode()


def dingtalk_sign(timestamp: str, secret: str) -> str:
    digest = hmac.new(secret.encode(), f"{timestamp}\n{secret}".encode(), hashlib.sha256).digest()
    return base64.b64encode(digest).decode()  # the query string arrives URL-decoded


def _check_feishu(query: dict[str, str], headers: dict[str, str], body: dict[str, Any]) -> tuple[int, Any]:
    stamp = str(body.get("timestamp", ""))
    fresh = stamp.isdigit() and abs(time.time() - int(stamp)) < 3600
    if not fresh or body.get("sign") != feishu_sign(stamp, SECRETS["feishu"]):
        return 200, {"code": 19021, "msg": "sign match fail or timestamp is not within one hour from current time"}
    if body.get("msg_type") != "interactive" or "elements" not in body.get("card", {}):
        return 200, {"code": 9499, "msg": "Bad Request"}
    return 200, {"code": 0, "msg": "success", "data": {}}


def _check_dingtalk(query: dict[str, str], headers: dict[str, str], body: dict[str, Any]) -> tuple[int, Any]:
    if query.get("access_token") != TOKENS["dingtalk"]:
        return 200, {"errcode": 300001, "errmsg": "token is not exist"}
    stamp = query.get("timestamp", "")
    fresh = stamp.isdigit() and abs(time.time() * 1000 - int(stamp)) < 3_600_000
    if not fresh or query.get("sign") != dingtalk_sign(stamp, SECRETS["dingtalk"]):
        return 200, {"errcode": 310000, "errmsg": "sign not match"}
    if body.get("msgtype") != "markdown" or not body.get("markdown", {}).get("text"):
        return 200, {"errcode": 40035, "errmsg": "missing parameter"}
    return 200, {"errcode": 0, "errmsg": "ok"}


def _check_wecom(query: dict[str, str], headers: dict[str, str], body: dict[str, Any]) -> tuple[int, Any]:
    if query.get("key") != TOKENS["wecom"]:
        return 200, {"errcode": 93000, "errmsg": "invalid webhook url"}
    content = body.get("markdown", {}).get("content", "")
    if len(content.encode()) > 4096:
        return 200, {"errcode": 40058, "errmsg": "markdown.content exceed max length 4096"}
    return 200, {"errcode": 0, "errmsg": "ok"}


def _check_slack(query: dict[str, str], headers: dict[str, str], body: dict[str, Any]) -> tuple[int, Any]:
    blocks = body.get("blocks", [])
    too_long = any(len(b.get("text", {}).get("text", "")) > 3000 for b in blocks if b.get("type") == "section")
    if not body.get("text") or not blocks or len(blocks) > 50 or too_long:
        return 400, "invalid_blocks"
    return 200, "ok"


def _check_webhook(query: dict[str, str], headers: dict[str, str], body: dict[str, Any]) -> tuple[int, Any]:
    if headers.get("authorization") != f"Bearer {BEARER}":
        return 401, "unauthorized"
    digest = isinstance(body.get("models"), list) and "now" in body  # the weekly digest (`digest --json`)
    if not digest and (body.get("version") != "4" or not isinstance(body.get("alerts"), list)):
        return 400, "not an Alertmanager v4 payload"
    return 200, "ok"


CHECKS = {
    "feishu": _check_feishu,
    "dingtalk": _check_dingtalk,
    "wecom": _check_wecom,
    "slack": _check_slack,
    "webhook": _check_webhook,
}


class _Handler(BaseHTTPRequestHandler):
    im: ImServer

    def do_POST(self) -> None:
        split = urlsplit(self.path)
        kind = next((k for k in KINDS if split.path == urlsplit(PATHS[k].format(t=TOKENS[k])).path), None)
        if kind is None:
            self._reply(404, "no such hook")
            return
        length = int(self.headers.get("content-length", "0"))
        raw = self.rfile.read(length)
        query = {k: v[0] for k, v in parse_qs(split.query).items()}
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            body = json.loads(raw)
        except ValueError:
            self._reply(400, "not JSON")
            return
        self._reply(*self.im.answer(kind, query, headers, body))

    def _reply(self, status: int, answer: Any) -> None:
        data = json.dumps(answer).encode() if isinstance(answer, dict) else str(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json" if isinstance(answer, dict) else "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # quiet: the tests read what they need
        pass
