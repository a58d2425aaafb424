"""`infermon serve` in a process of its own, for tests that measure the monitor's loop: in the
test's process, the harness (stand-in servers, pytest's own heap and its garbage collections)
would share the GIL with the monitor and be measured with it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import yaml

from monitor.ports import free_port

INFERMON = Path(sys.executable).parent / "infermon"


class Served(str):
    """The base URL, and the process's pid (to count its descriptors)."""

    pid: int


@contextmanager
def infermon_serve(tmp: Path, config: dict[str, Any], env: dict[str, str] | None = None) -> Iterator[Served]:
    """Yields the base URL once /healthz answers; ends the process (by its pid) after."""
    port = free_port()
    config = {**config, "server": {"host": "127.0.0.1", "port": port, **config.get("server", {})}}
    path, output = tmp / "infermon.yaml", tmp / "infermon.out"
    path.write_text(yaml.safe_dump(config))
    clean = {k: v for k, v in os.environ.items() if not k.startswith("INFERMON_")}
    with output.open("ab") as out:
        proc = subprocess.Popen([str(INFERMON), "serve", "--config", str(path)], stdout=out, stderr=out,
                                env={**clean, **(env or {})})
    url = Served(f"http://127.0.0.1:{port}")
    url.pid = proc.pid
    try:
        deadline = time.monotonic() + 60
        while not _healthy(url):
            assert proc.poll() is None, output.read_text()
            assert time.monotonic() < deadline, "infermon serve did not start"
            time.sleep(0.05)
        yield url
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(15)


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def stop(process: subprocess.Popen[Any], sig: int = signal.SIGINT, timeout_s: float = 60.0) -> str:
    """Signals the process (by its pid: Popen's own) and reaps it: its output when piped.

    A bound, not a pause: a stop takes seconds, the bound is for a machine busy with other work.
    Past it the process is killed and still reaped (its pipes closed): a process left behind is a
    ResourceWarning that fails a later, unrelated test."""
    if process.poll() is None:
        process.send_signal(sig)
    try:
        output = process.communicate(timeout=timeout_s)[0]
    except subprocess.TimeoutExpired:
        process.kill()
        output = process.communicate()[0]
    return output or ""


def wait_healthy(process: subprocess.Popen[Any], url: str, seconds: float, name: str,
                 log_tail: Callable[[], str], poll_s: float = 0.1) -> None:
    """Until `url` answers 200, the process exits (RuntimeError with its log's tail) or `seconds`
    pass (RuntimeError too): a server a test started, waited for on a condition, bounded."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited {process.returncode}: {log_tail()}")
        try:
            answered = httpx.get(url, timeout=2).status_code == 200
        except httpx.HTTPError:
            answered = False  # not listening yet
        if answered:
            return
        time.sleep(poll_s)  # polling for a condition, bounded by the deadline
    raise RuntimeError(f"{name} not healthy after {seconds:.0f} s: {log_tail()}")
