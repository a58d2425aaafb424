"""HTTP face of the vLLM V1 simulator: OpenAI-compatible API + vLLM's /metrics page.

`create_app(engine)` builds the FastAPI app; `SimServer` runs it on 127.0.0.1 in a background
thread (tests), `serve()` runs it inside an existing event loop (the demo).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from types import TracebackType
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse

import monitor
from monitor.sim.engine import SimulatedEngine
from monitor.sim.metrics import CONTENT_TYPE, SimMetrics
from monitor.sim.middleware import HttpMetricsMiddleware
from monitor.sim.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    Reply,
    error_body,
    filler_text,
    sse,
)
from monitor.sim.request import SimRequest
from monitor.sim.sglang_metrics import SglangMetrics
from monitor.sim.tiers import prefix_key

ApiRequest = ChatCompletionRequest | CompletionRequest


def create_app(sim: SimulatedEngine, *, metrics: SimMetrics | SglangMetrics | None = None) -> FastAPI:
    """The simulator's app; the engine's step loop runs in the app's lifespan."""
    metrics = metrics or _page_metrics(sim)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        sim.start()
        yield
        await sim.stop()

    app = FastAPI(title="vLLM V1 simulator (inference-monitor)", lifespan=lifespan)
    app.state.sim = sim
    app.state.metrics = metrics
    app.add_middleware(HttpMetricsMiddleware, metrics=metrics)
    app.add_exception_handler(RequestValidationError, _bad_request)
    _add_routes(app, sim, metrics)
    return app


def _page_metrics(sim: SimulatedEngine) -> SimMetrics | SglangMetrics:
    """The page the configuration asks for, following the engine."""
    config = sim.config
    if config.page == "sglang":
        return SglangMetrics(sim.model_name, max_total_num_tokens=config.num_gpu_blocks * config.block_size,
                             host_tier=config.host_tier is not None, pd=config.pd is not None,
                             moe=config.moe is not None).attach(sim)
    return SimMetrics(sim.model_name, max_model_len=config.max_model_len, num_gpu_blocks=config.num_gpu_blocks,
                      block_size=config.block_size, host_tier=config.host_tier is not None,
                      pd=config.pd is not None).attach(sim)


def _add_routes(app: FastAPI, sim: SimulatedEngine, metrics: SimMetrics | SglangMetrics) -> None:
    @app.post("/v1/chat/completions", response_model=None)
    async def chat(body: ChatCompletionRequest, request: Request) -> Response:
        return await _answer(sim, body, request, chat=True)

    @app.post("/v1/completions", response_model=None)
    async def completions(body: CompletionRequest, request: Request) -> Response:
        return await _answer(sim, body, request, chat=False)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        card = {"id": sim.model_name, "object": "model", "created": int(time.time()),
                "owned_by": "vllm", "root": sim.model_name, "parent": None,
                "max_model_len": sim.config.max_model_len}  # fmt: skip
        return {"object": "list", "data": [card]}

    @app.get("/version")
    async def version() -> dict[str, str]:
        # vLLM answers {"version": "0.11.0"}; ours says what it is, so a benchmark records it.
        return {"version": f"infermon-sim {monitor.__version__}"}

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=503 if _down(sim) else 200)

    @app.get("/metrics")
    async def metrics_page() -> Response:
        if _down(sim):
            return Response("engine down (simulated fault)", status_code=503)
        page = metrics.render()
        if sim.effects(sim.now()).unrecognised:  # an engine build of names no engine table knows
            page = page.replace(b"vllm:", b"acme:").replace(b"sglang:", b"acme:")
        return Response(page, media_type=CONTENT_TYPE)


def _down(sim: SimulatedEngine) -> bool:
    """The engine_down fault: the whole server answers 503, as a crashed engine behind a proxy would."""
    return sim.effects(sim.now()).down


async def _bad_request(_: Request, exc: Exception) -> Response:
    # vLLM answers malformed requests with 400 and an OpenAI error, not FastAPI's 422.
    return _error(400, "BadRequestError", str(exc))


def _error(code: int, err_type: str, message: str, param: str | None = None) -> Response:
    return JSONResponse(error_body(message, err_type, code, param), status_code=code)


async def _answer(sim: SimulatedEngine, body: ApiRequest, request: Request, chat: bool) -> Response:
    if _down(sim):
        return _error(503, "ServiceUnavailableError", "engine down (simulated fault)")
    if body.model is not None and body.model != sim.model_name:
        return _error(404, "NotFoundError", f"The model `{body.model}` does not exist.", "model")
    if body.n != 1:
        return _error(400, "BadRequestError", "The simulator serves n=1 only.", "n")
    try:
        key = prefix_key(body.prompt_text()) if sim.config.host_tier is not None else None
        job = sim.submit(body.prompt_tokens(), body.token_limit(), body.n, prefix_key=key)
    except ValueError as exc:
        return _error(400, "BadRequestError", str(exc))
    await _wait_unless_disconnected(sim, job, request, job.wait_first_event if body.stream
                                    else job.wait_finished)  # fmt: skip
    if job.finish_reason == "error":
        return _error(500, "InternalServerError", "Simulated engine error (error_burst fault).")
    if job.finish_reason == "abort":
        return Response(status_code=499)  # nobody is listening; nginx's "client closed"
    reply = Reply(chat, sim.model_name, body.include_usage)
    if body.stream:
        return StreamingResponse(_stream(sim, job, reply), media_type="text/event-stream")
    assert job.finish_reason is not None
    text = filler_text(0, job.emitted)
    return JSONResponse(reply.full(text, job.finish_reason, job.prompt_tokens, job.emitted))


async def _wait_unless_disconnected(
    sim: SimulatedEngine, job: SimRequest, request: Request, wait: Callable[[], Awaitable[None]]
) -> None:
    """Like vLLM's `with_cancellation`: a client that hangs up aborts its request."""

    async def abort_on_disconnect() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass
        sim.abort(job)

    watcher = asyncio.create_task(abort_on_disconnect())
    try:
        await wait()
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher


async def _stream(sim: SimulatedEngine, job: SimRequest, reply: Reply) -> AsyncIterator[str]:
    """SSE body: role chunk (chat), one chunk per delivery, finish, usage, [DONE]."""
    sent = 0
    try:
        if reply.chat:
            yield sse(reply.chunk("", None, first=True))
        while True:
            if job.emitted > sent or job.finished:
                yield sse(reply.chunk(filler_text(sent, job.emitted - sent), job.finish_reason))
                sent = job.emitted
                if job.finished:
                    break
            await job.wait_progress()
        if reply.include_usage:
            yield sse(reply.usage_chunk(job.prompt_tokens, job.emitted))
        yield sse("[DONE]")
    finally:
        # Starlette cancels the body when the client disconnects mid-stream.
        if not job.finished:
            sim.abort(job)


def _uvicorn_config(app: FastAPI, host: str, port: int, log_level: str) -> uvicorn.Config:
    # log_config=None: an embedded server must not rewrite the host process's logging.
    return uvicorn.Config(app, host=host, port=port, log_level=log_level, log_config=None,
                          access_log=False, ws="none", lifespan="on",
                          timeout_graceful_shutdown=5)  # fmt: skip


class SimServer:
    """The simulator on 127.0.0.1:<free port> in a background thread.

    with SimServer(SimulatedEngine(profile=...)) as server:
        httpx.get(server.metrics_url)
    """

    def __init__(
        self, sim: SimulatedEngine | None = None, *, host: str = "127.0.0.1", port: int = 0,
        log_level: str = "warning",
    ) -> None:  # fmt: skip
        self.sim = sim or SimulatedEngine()
        self.app = create_app(self.sim)
        self.host, self.port = host, port  # port 0: a free one, known once started
        self._log_level = log_level
        self._server: uvicorn.Server | None = None
        self._socket: socket.socket | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def metrics_url(self) -> str:
        return f"{self.url}/metrics"

    def start(self, timeout_s: float = 10.0) -> SimServer:
        """Start serving; returns once GET /health answers 200."""
        # Bound here and handed to uvicorn, so the free port cannot be taken in between.
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Accepted sockets inherit it: without it the first SSE chunk after the response head
        # waits ~40 ms for the client's delayed ACK (Nagle), which the canary sees as TTFT.
        self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._socket.bind((self.host, self.port))
        self.port = self._socket.getsockname()[1]
        self._server = uvicorn.Server(
            _uvicorn_config(self.app, self.host, self.port, self._log_level)
        )
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, name="sim-server",
            daemon=True,
        )  # fmt: skip
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._healthy():
            if time.monotonic() > deadline or not self._thread.is_alive():
                self.stop()
                raise RuntimeError(f"simulator did not come up on {self.url}")
            time.sleep(0.01)
        return self

    def _healthy(self) -> bool:
        try:
            return httpx.get(f"{self.url}/health", timeout=1.0).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self, timeout_s: float = 10.0) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None
        if self._socket is not None:
            self._socket.close()
            self._socket = None

    def __enter__(self) -> SimServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:  # fmt: skip
        self.stop()


async def serve(
    sim: SimulatedEngine, host: str = "127.0.0.1", port: int = 8000, *,
    started: asyncio.Event | None = None, log_level: str = "warning",
) -> None:  # fmt: skip
    """Serve the simulator in the running event loop until cancelled (then shut down
    gracefully). `started` is set once the port accepts connections."""
    await serve_in_loop(InLoopServer(_uvicorn_config(create_app(sim), host, port, log_level)), started)


class InLoopServer(uvicorn.Server):
    """A uvicorn server inside a loop that someone else runs (the demo, a bench scenario).

    It leaves SIGINT and SIGTERM to the loop's owner. uvicorn's own capture replaces the handler
    and re-raises the signal only once it has shut down; with several servers in one process
    every one chains to the previous one, so one Ctrl-C stopped them one by one, each waiting
    for its connections, and the demo took 2 minutes to exit."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def serve_in_loop(server: uvicorn.Server, started: asyncio.Event | None = None) -> None:
    """Any uvicorn server in the running loop until cancelled; `started` once it accepts connections.
    The demo's helpers (the judge simulator, the webhook sink) run this way too."""
    serving = asyncio.ensure_future(server.serve())
    try:
        while not server.started and not serving.done():
            await asyncio.sleep(0.01)
        if started is not None:
            started.set()
        await asyncio.shield(serving)
    finally:
        if not serving.done():
            server.should_exit = True
            await serving
