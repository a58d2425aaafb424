"""Every setting the monitor's pages, terminal view and CLI name in a hint is a key of the settings
model (a hint naming `infra.dcgm_targets` when the key is `infra.dcgm.targets` sends people nowhere);
and the key tree behind the "did you mean" of a misspelt key."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import pytest

from monitor.config import Settings
from monitor.settings_keys import env_var_for, fields_at, setting_exists, suggest

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = "server|service|infra|storage|api|alerting|canary|cost|quality"
# `cost.gpu_prices`, <code>infra.dcgm.targets</code>, "set cost.cny_per_usd": a section, a dot, keys.
HINT = re.compile(rf"(?<![\w./-])((?:{SECTIONS})(?:\.[a-z_]+)+)(?![\w(/-])")
HINTED = [*sorted((ROOT / "monitor/web/templates").glob("*.html")), *sorted((ROOT / "monitor/web").glob("*.py")),
          ROOT / "monitor/cli.py", ROOT / "monitor/cost/prices.py", ROOT / "monitor/cost/collector.py"]


def prose(path: Path) -> str:
    """What a reader sees of a file: a template without its {{ }}/{% %} code, a module's strings."""
    text = path.read_text()
    if path.suffix == ".html":
        return re.sub(r"\{\{.*?\}\}|\{%.*?%\}", " ", text, flags=re.S)
    kinds = {tokenize.STRING, getattr(tokenize, "FSTRING_MIDDLE", tokenize.STRING)}
    return "\n".join(t.string for t in tokenize.generate_tokens(io.StringIO(text).readline) if t.type in kinds)


def hints() -> list[tuple[str, str]]:
    return [(path.name, match[1]) for path in HINTED for match in HINT.finditer(prose(path))]


def test_the_hints_are_found() -> None:
    named = {hint for _, hint in hints()}
    assert {"cost.gpu_prices", "infra.dcgm.targets", "cost.cny_per_usd"} <= named


@pytest.mark.parametrize(("where", "hint"), hints())
def test_every_hint_names_a_setting(where: str, hint: str) -> None:
    assert setting_exists(Settings, hint), f"{where} names {hint}, which is no setting"


def test_the_key_tree() -> None:
    assert setting_exists(Settings, "infra.dcgm.targets") and not setting_exists(Settings, "infra.dcgm_targets")
    assert {"name", "url", "node", "gpus", "pod"} <= (fields_at(Settings, ("service", "targets", 0)) or set())
    assert fields_at(Settings, ("cost", "gpu_prices", "H100")) == {"usd_per_hour", "cny_per_hour"}
    assert fields_at(Settings, ("nothing",)) is None


@pytest.mark.parametrize(("loc", "meant"), [
    (("service", "scrape_intervall"), "scrape_interval"),
    (("service", "targets", 0, "nod"), "node"),
    (("cost", "gpu_price"), "gpu_prices"),
    (("service", "zzzz"), None),
])
def test_did_you_mean(loc: tuple[str | int, ...], meant: str | None) -> None:
    assert suggest(Settings, loc) == meant


def test_the_variable_that_set_a_value() -> None:
    environ = {"INFERMON_SERVICE__SCRAPE_INTERVAL": "soon", "infermon_cost__currency": "x", "HOME": "/"}
    assert env_var_for(("service", "scrape_interval"), environ) == "INFERMON_SERVICE__SCRAPE_INTERVAL"
    assert env_var_for(("cost", "currency"), environ) == "infermon_cost__currency"
    assert env_var_for(("service", "windows"), environ) is None
