"""Every shipped rule, in every rule file (alerts/*.yml, those added later too), names its runbook:
a `runbook` annotation `docs/runbooks/<file>.md#<anchor>` whose file and anchor exist, so a
receiver (with alerting.runbook_base_url, a link) and the overview page lead to what to do."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from monitor.alerting.runbooks import RUNBOOK_DIR

ROOT = Path(__file__).resolve().parents[2]
_PATH = re.compile(r"^docs/runbooks/[\w.-]+\.md#[\w-]+$")


def anchors(markdown: str) -> set[str]:
    """The anchors a page has: `<a id="...">` and each heading's GitHub slug (lower case, punctuation
    other than '-' and '_' dropped, spaces as '-')."""
    found = set(re.findall(r'<a id="([^"]+)"', markdown))
    for heading in re.findall(r"^#{1,6} +(.+?) *$", markdown, flags=re.MULTILINE):
        found.add(re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-"))
    return found


def shipped_rules() -> list[tuple[str, str, dict[str, str]]]:
    rules = []
    for path in sorted((ROOT / "alerts").glob("*.yml")):
        for group in (yaml.safe_load(path.read_text()) or {}).get("groups", []):
            rules += [(path.name, rule["alert"], rule.get("annotations") or {})
                      for rule in group["rules"] if "alert" in rule]
    return rules


def test_anchors_are_read_as_github_makes_them() -> None:
    page = '# Title\n\n<a id="a1"></a>\n\n## TTFTP99High\n\n## Latency creep: TTFTP99Creep, TPOTP99Creep\n'
    assert anchors(page) == {"title", "a1", "ttftp99high", "latency-creep-ttftp99creep-tpotp99creep"}


def test_every_rule_has_a_runbook_whose_file_and_anchor_exist() -> None:
    rules = shipped_rules()
    assert len(rules) > 60
    missing = [f"{file}: {name}" for file, name, notes in rules if not _PATH.match(notes.get("runbook", ""))]
    assert missing == [], f"rules without a docs/runbooks/<file>.md#<anchor> runbook: {missing}"
    broken = []
    for file, name, notes in rules:
        page, _, anchor = notes["runbook"].partition("#")
        assert page.startswith(RUNBOOK_DIR)
        if not (ROOT / page).is_file() or anchor not in anchors((ROOT / page).read_text()):
            broken.append(f"{file}: {name} -> {notes['runbook']}")
    assert broken == [], f"runbook file or anchor missing: {broken}"
