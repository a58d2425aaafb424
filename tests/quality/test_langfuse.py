"""The Langfuse source against a local server: auth, pagination, 429, deterministic score ids."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from monitor.config import Settings
from monitor.quality.layer import build_sources
from monitor.quality.run import QualityRunError, QualityRunner, RunReport
from monitor.quality.sources.langfuse import LangfuseSource
from monitor.quality.store import QualityStore
from monitor.store.session import Store
from tests.quality.helpers import DAY, DAY_START, iso, quality_settings
from tests.quality.judgeserver import JudgeScript, judge_server
from tests.quality.langfuseserver import PUBLIC, SECRET, LangfuseState, langfuse_app
from tests.support.appserver import serve_asgi


def generations(count: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(count):
        out.append({
            "id": f"obs-{i}", "traceId": f"trace-{i}", "type": "GENERATION", "startTime": iso(DAY_START + 300 * i),
            "providedModelName": "llama-3.1-8b",
            "input": [{"role": "system", "content": "Be helpful."},
                      {"role": "user", "content": f"Question {i}? Mail me at me{i}@corp.example.org"}],
            "output": {"role": "assistant", "content": f"Answer {i}: " + "text " * (30 + i)},
            "usageDetails": {"input": 20, "output": 31 + i, "total": 51 + i},
        })
    out.append({**out[0], "id": "span-1", "type": "SPAN"})  # not a generation
    out.append({**out[0], "id": "obs-late", "startTime": iso(DAY_START + 86400 + 5)})  # the next day
    return out


def run(settings: Settings, force: bool = False, sleeps: list[float] | None = None) -> RunReport:
    store = Store(settings.storage.url)
    quality = QualityStore(store.engine)
    sources = build_sources(settings.quality, quality)
    for source in sources:
        if isinstance(source, LangfuseSource) and sleeps is not None:
            async def record(seconds: float) -> None:
                sleeps.append(seconds)
            source.sleep = record
    try:
        return asyncio.run(QualityRunner(settings.quality, quality, sources).run(DAY, force=force))
    finally:
        store.close()


def test_generations_in_scores_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", PUBLIC)
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", SECRET)
    state = LangfuseState(generations(25), throttle_on={2})
    script = JudgeScript()
    with serve_asgi(langfuse_app(state)) as host, judge_server(script) as judge_url:
        settings = quality_settings(tmp_path, judge_url, sample_size=20,
                                    sources=[{"type": "langfuse", "host": host, "page_size": 10}])
        sleeps: list[float] = []
        report = run(settings, sleeps=sleeps)
        outcome = report.outcomes[0]
        assert (outcome.model, outcome.available, outcome.sampled) == ("llama-3.1-8b", 25, 20)
        # pages of 10 over 25 generations: 3 pages, plus the one answered 429 (waited Retry-After)
        assert len(state.requests) == 4 and sleeps == [0.05]
        assert "cursor" not in state.requests[0] and state.requests[2]["cursor"] == state.requests[1].get("cursor")
        assert {r["type"] for r in state.requests} == {"GENERATION"}
        assert "io" in state.requests[0]["fields"]
        # three scores per judged generation, tied to its trace and observation
        assert len(state.scores) == 60 and state.score_posts == 60
        score = next(s for s in state.scores.values() if s["name"] == "quality_score")
        assert score["traceId"].startswith("trace-") and score["observationId"].startswith("obs-")
        assert score["dataType"] == "NUMERIC" and 1 <= score["value"] <= 5
        assert {s["name"] for s in state.scores.values()} == {"quality_score", "refusal", "hallucination"}
        # no e-mail reached the judge
        assert not any("corp.example.org" in b["messages"][0]["content"] for b in script.bodies)

        run(settings, force=True)  # judged again: the same score ids, overwritten, none added
        assert len(state.scores) == 60 and state.score_posts == 120


def test_wrong_keys_are_a_source_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", PUBLIC)
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", "wrong")
    state = LangfuseState(generations(3))
    with serve_asgi(langfuse_app(state)) as host:
        settings = quality_settings(tmp_path, "http://127.0.0.1:9/v1", sources=[{"type": "langfuse", "host": host}])
        report = run(settings)
    assert report.outcomes == []
    assert "401" in report.source_errors["langfuse"] and "wrong" not in report.source_errors["langfuse"]


def test_missing_keys_name_the_variables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LANGFUSE_PUBLIC_KEY", raising=False)
    settings = quality_settings(tmp_path, "http://127.0.0.1:9/v1", sources=[{"type": "langfuse"}])
    with pytest.raises(QualityRunError, match="LANGFUSE_PUBLIC_KEY"):
        build_sources(settings.quality, QualityStore(Store(settings.storage.url).engine))
