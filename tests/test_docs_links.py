"""The README is what a user reads first: short, its two commands first, and every relative link in
it and in docs/ reaches a file that exists (and, for `page.md#anchor`, a heading of that page as
GitHub names it)."""

from __future__ import annotations

import re
from functools import cache
from itertools import pairwise
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from markdown_it import MarkdownIt
from markdown_it.token import Token

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
README_MAX_LINES = 250
PAGES = sorted([README, *(ROOT / "docs").rglob("*.md")])
PARSER = MarkdownIt("commonmark").enable("table")


def github_slug(heading: str) -> str:
    """GitHub's anchor for a heading's text: lower case, every character that is not a letter, a
    digit, `_`, `-` or a space dropped, spaces turned into hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _inline_text(token: Token) -> str:
    return "".join(child.content for child in token.children or []
                   if child.type in ("text", "code_inline"))


def _walk(tokens: list[Token]) -> list[Token]:
    return [leaf for token in tokens for leaf in [token, *_walk(token.children or [])]]


@cache
def anchors(page: Path) -> frozenset[str]:
    """The headings' slugs (a repeated heading gets -1, -2, … as on GitHub) and explicit `id`/`name`s."""
    tokens = PARSER.parse(page.read_text())
    seen: dict[str, int] = {}
    found: set[str] = set()
    for opening, inline in pairwise(tokens):
        if opening.type == "heading_open":
            slug = github_slug(_inline_text(inline))
            found.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
            seen[slug] = seen.get(slug, 0) + 1
    found.update(re.findall(r"""<[^>]*\b(?:id|name)=["']([^"']+)["']""", page.read_text()))
    return frozenset(found)


def links(page: Path) -> list[str]:
    """Every link and image target written in the page (code blocks and code spans are not links)."""
    return [str(token.attrs["href"] if token.type == "link_open" else token.attrs["src"])
            for token in _walk(PARSER.parse(page.read_text())) if token.type in ("link_open", "image")]


def broken_links(page: Path) -> list[str]:
    broken = []
    for link in links(page):
        parts = urlsplit(link)
        if parts.scheme or parts.netloc:  # http(s), mailto: not ours to check
            continue
        target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
        if not target.exists():
            broken.append(f"{link}: no such file")
        elif parts.fragment and target.suffix == ".md" and unquote(parts.fragment) not in anchors(target):
            broken.append(f"{link}: no heading #{parts.fragment} in {target.name}")
    return broken


def test_the_readme_is_short_and_starts_with_the_two_commands() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= README_MAX_LINES, \
        f"README.md has {len(text.splitlines())} lines (at most {README_MAX_LINES}): move reference text to docs/"
    first_block = text.split("```sh\n", 1)[1].split("```", 1)[0]
    assert [line.split()[:2] for line in first_block.splitlines()] == [["make", "demo"], ["make", "test"]]
    # CI runs the README's test command (`make test`), not a command of its own
    assert re.search(r"^make test\b", (ROOT / ".ci" / "run").read_text(), re.MULTILINE)


def test_the_readme_has_the_vllm_quickstart_in_five_lines() -> None:
    section = README.read_text().split("## I have vLLM on :8000\n", 1)[1]
    commands = section.split("```sh\n", 1)[1].split("```", 1)[0].splitlines()
    assert len(commands) == 5
    assert "http://127.0.0.1:8000/metrics" in commands[1] and "infermon serve" in commands[3]


@pytest.mark.parametrize("page", PAGES, ids=[str(page.relative_to(ROOT)) for page in PAGES])
def test_every_relative_link_reaches_a_file_and_its_heading(page: Path) -> None:
    assert broken_links(page) == []


def test_the_slugs_are_githubs() -> None:
    assert github_slug("Past one core: parse workers (service.parse_workers)") == \
        "past-one-core-parse-workers-serviceparse_workers"
    assert github_slug("Fault → webhook POST, embedded vs Prometheus + Alertmanager") == \
        "fault--webhook-post-embedded-vs-prometheus--alertmanager"
    assert github_slug("One process, 1,000 targets") == "one-process-1000-targets"


def test_a_broken_link_and_a_missing_heading_are_found(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other\n\n## Twice\n\n## Twice\n")
    page = tmp_path / "page.md"
    page.write_text("[ok](other.md#twice-1) [gone](missing.md) [bad](other.md#nowhere) "
                    "[self](#top) `[code](missing.md)`\n\n# Top\n\n```\n[block](missing.md)\n```\n")
    assert broken_links(page) == ["missing.md: no such file", "other.md#nowhere: no heading #nowhere in other.md"]


def test_every_figure_in_docs_measurements_says_how_to_reproduce_it() -> None:
    rows = [line for line in (ROOT / "docs" / "measurements.md").read_text().splitlines()
            if line.startswith("| ") and not line.startswith(("| what |", "|---"))]
    assert len(rows) >= 20
    for row in rows:
        what, value, machine, reproduce = (cell.strip() for cell in row.strip("|").split(" | "))
        assert what and value and machine, row
        assert "`" in reproduce or "not known" in reproduce, f"no command to reproduce: {row}"
