"""Secrets in URLs never reach the unauthenticated routes, the logs, errors or `infermon check`:
userinfo and secret-looking query parameters are redacted by one function (monitor.redaction),
and configuration errors never quote the configuration text."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import yaml

from monitor.config import ConfigError, load_settings
from monitor.redaction import RedactingFilter, redact_urls, safe_url
from monitor.runtime import Monitor
from tests.service.test_discovery import wait_until
from tests.support.appserver import serve_app
from tests.support.pageserver import Page, PageServer
from tests.test_cli import FIXTURE, env, infermon

SECRETS = ("s3cr3t-pass", "tok-9f8e7d", "ak-112233", "sig-abcdef", "judge-pw-77", "dcgm-key-55")


@pytest.mark.parametrize(("url", "shown"), [
    ("https://bob:pw@h:8000/metrics?token=abc&model=x", "https://h:8000/metrics?token=<redacted>&model=x"),
    ("http://h/m?api_key=1&Signature=2&X-Amz-Signature=3&access_token=4&password=5&secret=6&page=2",
     "http://h/m?api_key=<redacted>&Signature=<redacted>&X-Amz-Signature=<redacted>&access_token=<redacted>"
     "&password=<redacted>&secret=<redacted>&page=2"),
    ("http://h:9400/metrics", "http://h:9400/metrics"),
    ("http://token@h/", "http://h/"),
    ("http://[::1/", "<redacted>"),
    # An empty host keeps its three slashes (it read sqlite:/x.db), and loses the userinfo beside it.
    ("sqlite:///./x.db", "sqlite:///./x.db"),
    ("sqlite:////var/lib/infermon.db?key=k1", "sqlite:////var/lib/infermon.db?key=<redacted>"),
    ("http://bob:pw@/x", "http:///x"),
])
def test_safe_url(url: str, shown: str) -> None:
    assert safe_url(url) == shown


def test_urls_in_text_and_in_log_records() -> None:
    text = "Client error '404' for url 'http://u:s3cr3t-pass@h/m?token=tok-9f8e7d'"
    assert redact_urls(text) == "Client error '404' for url 'http://h/m?token=<redacted>'"
    record = logging.LogRecord("monitor.x", logging.WARNING, __file__, 1, "scrape %s failed", ("http://u:s3cr3t-pass@h/",),
                               None)
    try:
        raise RuntimeError("GET http://h/?sig=sig-abcdef")
    except RuntimeError:
        record.exc_info = sys.exc_info()
    RedactingFilter().filter(record)
    assert record.getMessage() == "scrape http://h/ failed"
    assert "sig-abcdef" not in (record.exc_text or "") and "sig=<redacted>" in (record.exc_text or "")


def leaky_settings(pages: PageServer) -> dict[str, object]:
    address = pages.url("/m").split("/")[2]
    return {
        "infra": {"nvml": {"enabled": "false"},
                  "dcgm": {"targets": [{"name": "dcgm", "url": f"http://{address}/gone?api_key=dcgm-key-55"}]}},
        "alerting": {"enabled": False},
        "service": {"scrape_interval": "1s", "targets": [
            {"name": "a", "url": f"http://scraper:s3cr3t-pass@{address}/m?token=tok-9f8e7d"},
            {"name": "b", "url": f"http://{address}/missing?sig=sig-abcdef&key=ak-112233"}]},
        "quality": {"judge": {"base_url": "https://judge:judge-pw-77@judge.example/v1"}},
    }


def test_status_page_and_metrics_show_no_url_secret() -> None:
    with PageServer() as pages:
        pages.set("/m", Page(FIXTURE))
        settings = load_settings(None, leaky_settings(pages))  # type: ignore[arg-type]
        with serve_app(Monitor(settings)) as url, httpx.Client(base_url=url) as client:
            def status() -> str:
                return client.get("/api/v1/status").text

            wait_until(lambda: '"name":"b"' in status() and '"error":null' not in status().split('"name":"b"')[1][:600])
            wait_until(lambda: "dcgm" in status() and "gone" in status())
            shown = status() + client.get("/").text + client.get("/metrics").text
    for secret in SECRETS:
        assert secret not in shown, secret
    assert "token=<redacted>" in shown and "https://judge.example/v1" in shown


def test_reload_errors_never_quote_the_config(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    config = tmp_path / "infermon.yaml"

    async def reload_with(text: str) -> str:
        config.write_text("infra: {nvml: {enabled: 'false'}}\nalerting: {enabled: false}\n")
        monitor = Monitor(load_settings(config), config_path=config)
        try:
            config.write_text(text)
            assert monitor.reload() is False
            return str(monitor.status()["config"]["last_reload_error"])
        finally:
            await monitor.aclose()

    typo = "infra: {nvml: {enabled: 'false'}}\napi:\n  token: tok-9f8e7d: oops\n"
    error = asyncio.run(reload_with(typo))
    assert error == f"{config}: not valid YAML: line 3, column 20: mapping values are not allowed here"
    bad_url = "infra: {nvml: {enabled: 'false'}}\nservice:\n  targets: [{name: a, url: 'http://u:s3cr3t-pass@ h/m'}]\n"
    error = asyncio.run(reload_with(bad_url))
    assert error == f"{config}: service.targets.0.url: not an http(s) URL (http://host:port/path)"
    for secret in SECRETS:
        assert secret not in caplog.text


def test_config_errors_redact_urls_in_validator_messages() -> None:
    with pytest.raises(ConfigError) as raised:
        load_settings(None, {"canary": {"probes": [{"name": "p", "model": "m", "base_url": "ftp://u:s3cr3t-pass@h"}]}})
    assert "s3cr3t-pass" not in str(raised.value)
    assert "canary.probes.0.base_url: not an http(s) URL" in str(raised.value)


def test_check_cli_shows_no_url_secret(tmp_path: Path) -> None:
    with PageServer() as pages:
        pages.set("/m", Page(FIXTURE))
        config = tmp_path / "infermon.yaml"
        config.write_text(yaml.safe_dump(leaky_settings(pages)))
        done = subprocess.run(infermon("check", "--config", str(config)), env=env(tmp_path), capture_output=True,
                              text=True, timeout=60)
    output = done.stdout + done.stderr
    assert "a " in output and "token=<redacted>" in output, output
    for secret in SECRETS:
        assert secret not in output, secret
