"""The demo's own webhook receiver: takes Alertmanager-style webhook posts and logs one line
per alert in them, so the demo shows an alert firing, delivered and resolved, end to end.

GET / is a small page of what arrived, newest first (each alert's status, labels, summary,
description and runbook, as the receiver got them); GET /received the same as JSON."""

from __future__ import annotations

import asyncio
import html
import json
import logging
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, Response
from starlette.requests import ClientDisconnect

from monitor.sim.server import InLoopServer, serve_in_loop

log = logging.getLogger("monitor.demo.webhook")


def create_sink_app(received: list[dict[str, Any]] | None = None) -> FastAPI:
    app = FastAPI(title="demo webhook sink")
    kept = received if received is not None else []

    @app.post("/hook", response_model=None)
    async def hook(request: Request) -> dict[str, int] | Response:
        try:
            body = await request.json()
        except ClientDisconnect:  # the monitor stopped mid-delivery: it retries what was not acknowledged
            return Response(status_code=499)
        alerts = body.get("alerts", []) if isinstance(body, dict) else []
        for alert in alerts:
            labels = alert.get("labels", {})
            detail = " ".join(f"{k}={v}" for k, v in sorted(labels.items()) if k not in ("alertname", "severity"))
            log.info("webhook received: %s %s %s", alert.get("status"), labels.get("alertname"), detail)
        kept.append(body)
        del kept[:-100]  # bounded: the demo runs for days
        return {"received": len(alerts)}

    @app.get("/received")
    async def received_json() -> list[dict[str, Any]]:
        return list(reversed(kept))

    @app.get("/", response_class=HTMLResponse)
    async def page() -> str:
        return received_page(list(reversed(kept)))

    return app


def received_page(bodies: list[dict[str, Any]]) -> str:
    """What the sink got, newest first: one block per alert, then the body exactly as posted."""
    rows = []
    for body in bodies:
        for alert in body.get("alerts", []) if isinstance(body, dict) else []:
            labels, notes = alert.get("labels", {}), alert.get("annotations", {})
            shown = " ".join(f"{k}={v}" for k, v in sorted(labels.items()) if k != "alertname")
            rows.append(
                f"<li class='{html.escape(str(alert.get('status')))}'><b>{html.escape(str(alert.get('status')))}"
                f" {html.escape(str(labels.get('alertname')))}</b> <small>{html.escape(shown)}</small>"
                + "".join(f"<br>{html.escape(key)}: {html.escape(str(notes[key]))}"
                          for key in ("summary", "description", "probable_cause", "runbook") if notes.get(key))
                + f"<br><small>starts {html.escape(str(alert.get('startsAt')))}</small></li>")
        rows.append(f"<details><summary>the body as posted</summary><pre>"
                    f"{html.escape(json.dumps(body, indent=2, ensure_ascii=False))}</pre></details>")
    listing = "".join(rows) or "<p>Nothing delivered yet: the demo's first fault raises an alert at minute 3.</p>"
    return ("<!doctype html><meta charset=utf-8><meta name=viewport content='width=device-width'>"
            "<meta http-equiv=refresh content=10><title>demo webhook sink</title>"
            "<style>body{font:14px system-ui;margin:1em;max-width:60em}li{margin:.6em 0}.firing b{color:#b00}"
            ".resolved b{color:#070}pre{white-space:pre-wrap;word-break:break-all}</style>"
            f"<h1>What the demo's webhook receiver got</h1><p>{len(bodies)} post(s), newest first; the last 100 kept."
            f"</p><ul>{listing}</ul>")


async def serve_sink(port: int, started: asyncio.Event) -> None:
    config = uvicorn.Config(create_sink_app(), host="127.0.0.1", port=port, log_level="warning",
                            log_config=None, access_log=False, lifespan="off")
    await serve_in_loop(InLoopServer(config), started)
