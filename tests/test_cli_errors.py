"""Errors that say the fix, as a user meets them: `infermon check` against a llama-server without
--metrics, a URL without /metrics, a JSON page; a missing replay trace; the monitor's port taken
under `serve` and `demo`. Real processes, real loopback servers."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from monitor.ports import free_port
from tests.service.test_error_hints import EXPECTED, serve_errors, targets
from tests.support.pageserver import PageServer
from tests.test_cli import env, infermon


def run(args: list[str], tmp_path: Path, environ: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(infermon(*args), capture_output=True, text=True, env=environ or env(tmp_path), timeout=60,
                          check=False, cwd=tmp_path)


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A loopback port held by a listening socket for the test's length."""
    with socket.socket() as holder:
        holder.bind(("0.0.0.0", free_port()))
        holder.listen()
        yield int(holder.getsockname()[1])


def test_check_says_what_each_broken_target_needs(tmp_path: Path) -> None:
    with PageServer() as server:
        serve_errors(server)
        base = server.url("").rstrip("/")
        config = tmp_path / "targets.yaml"
        config.write_text("infra: {nvml: {enabled: 'false'}}\nservice:\n  targets:\n"
                          + "".join(f"    - {{name: {t['name']}, url: '{t['url']}'}}\n" for t in targets(server)))
        result = run(["check", "--config", str(config)], tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    for name, text in EXPECTED.items():
        line = next(line for line in result.stdout.splitlines() if line.strip().startswith(name + " "))
        assert line.endswith("DOWN: " + text.format(base=base)), line
    assert "Traceback" not in result.stdout + result.stderr


def test_check_says_a_missing_replay_trace_in_a_line(tmp_path: Path) -> None:
    config = tmp_path / "replay.yaml"
    config.write_text(f"infra:\n  replay:\n    file: {tmp_path / 'gone.json'}\n")
    result = run(["check", "--config", str(config)], tmp_path)
    assert result.returncode == 2
    assert result.stdout == ""  # no "configuration OK" before it
    assert result.stderr.splitlines() == [
        "configuration error:", f"{config}: infra.replay.file: {tmp_path / 'gone.json'}: cannot read: "
        "No such file or directory"]


def test_serve_names_server_port_when_the_port_is_taken(tmp_path: Path, taken_port: int) -> None:
    result = run(["serve", "--port", str(taken_port)], tmp_path)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"server.port: port {taken_port} on 0.0.0.0 is already in use (another infermon serve or demo?): stop it, "
        "or choose another with --port, server.port or INFERMON_SERVER__PORT"], result.stderr
    assert not (tmp_path / "infermon.db").exists()  # nothing started: no store, no migration


def test_demo_says_the_port_is_taken_in_one_line_and_starts_nothing(tmp_path: Path, taken_port: int) -> None:
    result = run(["demo", "--port", str(taken_port), "--duration", "5"], tmp_path)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"demo: port {taken_port} on 127.0.0.1 is already in use (another infermon serve or demo?): stop it, "
        f"or run it on another with --port (infermon demo --port {taken_port + 1})"], result.stderr
    assert result.stdout == ""  # no simulator, judge or sink started: nothing to end


def test_check_against_a_real_llama_server_without_metrics_says_start_it_with_metrics(tmp_path: Path) -> None:
    from tests.support.llamacpp import LlamaServer, llama_server_binary, tiny_model

    binary = llama_server_binary()
    with LlamaServer(binary, tiny_model(tmp_path / "m.gguf"), metrics=False) as server:
        config = tmp_path / "llama.yaml"
        config.write_text(f"infra: {{nvml: {{enabled: 'false'}}}}\nservice:\n  targets:\n"
                          f"    - {{name: llama, url: '{server.url}/metrics'}}\n")
        result = run(["check", "--config", str(config)], tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    line = next(line for line in result.stdout.splitlines() if line.strip().startswith("llama "))
    assert "DOWN: HTTP 501: This server does not support metrics endpoint." in line, line
    assert "--metrics" in line, line  # the build's own words, or the hint for builds that do not say how
