"""docs/metrics.md and docs/configuration.md are generated from the catalog and the settings model;
these tests fail when either page is stale, when a key has no description, or when a secret's
default would be printed."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import Field, SecretStr

from monitor.catalog import CATALOG
from monitor.config import _Section, load_settings
from monitor.reference import configuration, metrics

ROOT = Path(__file__).resolve().parent.parent


def test_docs_metrics_md_is_the_catalog() -> None:
    assert (ROOT / "docs" / "metrics.md").read_text() == metrics.markdown(), \
        "docs/metrics.md is stale: python -m monitor.reference.metrics > docs/metrics.md"


def test_docs_configuration_md_is_the_settings_model() -> None:
    assert (ROOT / "docs" / "configuration.md").read_text() == configuration.markdown(), \
        "docs/configuration.md is stale: python -m monitor.reference.configuration > docs/configuration.md"


def test_every_family_is_a_row_with_its_type_labels_and_meaning() -> None:
    page = metrics.markdown()
    for definition in CATALOG.values():
        row = next(line for line in page.splitlines() if line.startswith(f"| `{definition.name}` |"))
        assert f"| {definition.type} |" in row and definition.help.split(" (")[0] in row, row
        assert all(f"`{label}`" in row for label in definition.labels), row


def test_every_key_has_a_description_and_server_host_says_where_it_binds() -> None:
    rows = [row for _, _, section in configuration.sections() for row in section]
    assert len(rows) > 150
    assert [row.path for row in rows if not row.description] == []
    host = next(row for row in rows if row.path == "server.host")
    assert host.default == "`0.0.0.0`" and "every interface" in host.description
    assert "| `server.host` | text | `0.0.0.0` | `INFERMON_SERVER__HOST` |" in configuration.markdown()


@pytest.mark.parametrize(("key", "variable", "text", "read"), [
    ("server.host", "INFERMON_SERVER__HOST", "127.0.0.1", lambda s: s.server.host),
    ("server.port", "INFERMON_SERVER__PORT", "9999", lambda s: s.server.port),
    ("alerting.causes.kv_cache_ratio", "INFERMON_ALERTING__CAUSES__KV_CACHE_RATIO", "0.5",
     lambda s: s.alerting.causes.kv_cache_ratio),
    ("quality.judge.model", "INFERMON_QUALITY__JUDGE__MODEL", "judge-x", lambda s: s.quality.judge.model),
])
def test_the_documented_variable_sets_the_key(monkeypatch: pytest.MonkeyPatch, key: str, variable: str,
                                              text: str, read: object) -> None:
    assert f"| `{key}` |" in configuration.markdown() and f"`{variable}`" in configuration.markdown()
    monkeypatch.setenv(variable, text)
    assert str(read(load_settings(None))) == text  # type: ignore[operator]


class _WithSecrets(_Section):
    password: SecretStr = Field(SecretStr("hunter2-default"), description="A secret with a default")
    unset: SecretStr | None = Field(None, description="A secret without one")


def test_a_secrets_default_is_never_printed() -> None:
    rows = {row.path: row for row in configuration.keys(_WithSecrets, "x", "INFERMON_X")}
    assert rows["x.password"].default == "(secret, not shown)"
    assert rows["x.unset"].default == "(unset)"
    assert "hunter2" not in repr(rows)
