"""The demo's own webhook receiver: takes Alertmanager-style webhook posts and logs one line
per alert in them, so the demo shows an alert firing, delivered and resolved, end to end."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import uvicorn
from fastapi import FastAPI, Request

from monitor.sim.server import serve_in_loop

log = logging.getLogger("monitor.demo.webhook")


def create_sink_app(received: list[dict[str, Any]] | None = None) -> FastAPI:
    app = FastAPI(title="demo webhook sink")
    kept = received if received is not None else []

    @app.post("/hook")
    async def hook(request: Request) -> dict[str, int]:
        body = await request.json()
        alerts = body.get("alerts", []) if isinstance(body, dict) else []
        for alert in alerts:
            labels = alert.get("labels", {})
            detail = " ".join(f"{k}={v}" for k, v in sorted(labels.items()) if k not in ("alertname", "severity"))
            log.info("webhook received: %s %s %s", alert.get("status"), labels.get("alertname"), detail)
        kept.append(body)
        del kept[:-100]  # bounded: the demo runs for days
        return {"received": len(alerts)}

    return app


async def serve_sink(port: int, started: asyncio.Event) -> None:
    config = uvicorn.Config(create_sink_app(), host="127.0.0.1", port=port, log_level="warning",
                            log_config=None, access_log=False, lifespan="off")
    await serve_in_loop(uvicorn.Server(config), started)
