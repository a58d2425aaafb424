"""The README's screenshots, made again: the demo's overview once its first critical service alert
fires (desktop and phone), and a llama.cpp-only fleet (tests/web/llama_fleet.py), in the system Chromium.

    .venv/bin/python -m tests.web.screenshots [--out docs/img] [--wait 600]

Writes overview.png, overview-phone.png and overview-llamacpp.png. The demo runs in a process of
its own on a free loopback port, on a fresh state; its first faults start at minute 3, so this
takes about five minutes.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from monitor.ports import free_port
from tests.support.served_process import stop
from tests.web.browser import browser_page
from tests.web.llama_fleet import serving_llama_fleet

ROOT = Path(__file__).parents[2]
DESKTOP, PHONE = (1280, 900), (390, 844)


def _overview(url: str) -> dict[str, Any] | None:
    try:
        return dict(httpx.get(f"{url}/api/v1/status", timeout=5, trust_env=False).json()["overview"])
    except (httpx.HTTPError, ValueError, KeyError):
        return None


def _critical_firing(o: dict[str, Any]) -> bool:
    """A critical service alert fires with its cause (the fault cycle's first, TTFTP99High at about
    minute 4), today's quality run is in, and every chart has a line."""
    today = time.strftime("%Y-%m-%d", time.gmtime(o["ts"]))
    firing = [a for a in o["alerts"]["active"] if a["state"] == "firing"]
    return (any(a["labels"].get("severity") == "critical" and a["layer"] == "service" and a.get("probable_cause")
                for a in firing)
            and any(q["date"] == today for q in o["quality"]["rows"])
            and all(len(c["points"]) >= 2 for c in o["charts"]))


def demo_shots(out: Path, wait_s: float) -> None:
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="infermon-shots-") as tmp:
        env = {**os.environ, "INFERMON_STORAGE__URL": f"sqlite:///{tmp}/demo.db", "PYTHONUNBUFFERED": "1"}
        env.pop("OPENAI_API_KEY", None)
        with open(Path(tmp) / "demo.log", "w") as log:
            process = subprocess.Popen([sys.executable, "-m", "monitor.cli", "demo", "--port", str(port),
                                        "--duration", str(wait_s + 60)], env=env, stdout=log,
                                       stderr=subprocess.STDOUT, text=True, cwd=ROOT)
        url, started = f"http://127.0.0.1:{port}", time.monotonic()
        try:
            while True:
                o = _overview(url)
                if o is not None and _critical_firing(o):
                    break
                if time.monotonic() - started > wait_s or process.poll() is not None:
                    raise SystemExit(f"no critical alert fired in {wait_s:.0f} s: see {tmp}/demo.log")
                time.sleep(2)
            print(f"demo: a critical service alert firing after {time.monotonic() - started:.0f} s")
            shoot(f"{url}/?refresh=0", out / "overview.png", out / "overview-phone.png")
        finally:
            stop(process)


def shoot(url: str, desktop: Path, phone: Path | None = None) -> None:
    with browser_page(*DESKTOP) as (page, seen):
        page.goto(url, wait_until="load")
        page.screenshot(path=str(desktop), full_page=True)
        if phone is not None:
            page.set_viewport_size({"width": PHONE[0], "height": PHONE[1]})
            page.reload(wait_until="load")
            page.screenshot(path=str(phone), full_page=True)
    if seen.console_errors:
        raise SystemExit(f"console errors on {url}: {seen.console_errors}")
    for path in (desktop, phone):
        if path is not None:
            print(f"wrote {path} ({path.stat().st_size:,} bytes)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    parser.add_argument("--wait", type=float, default=600.0, help="seconds to wait for the demo's critical alert")
    parser.add_argument("--skip-demo", action="store_true", help="the llama.cpp fleet's screenshot only")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="infermon-shots-") as tmp:
        os.environ["INFERMON_STORAGE__URL"] = f"sqlite:///{tmp}/llama.db"  # a fresh store, not ./infermon.db
        with serving_llama_fleet(cycles=12) as (url, _):
            shoot(f"{url}/?refresh=0", args.out / "overview-llamacpp.png")
        del os.environ["INFERMON_STORAGE__URL"]
    if not args.skip_demo:
        demo_shots(args.out, args.wait)


if __name__ == "__main__":
    main()
