"""The issue's judge, for real: llama.cpp's llama-server with a tiny random-weight model (tests/support/llamacpp.py).

It answers the rubric with noise: most answers never close their JSON (judge errors), and the
verdicts that parse carry reasons that are not language. Either way the run fails with no model
figure, where the issue's run was "judged: 8 of 8", exit 0, and blamed the model."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from monitor.quality.cli import run_command
from monitor.quality.store import QualityStore
from monitor.quality.summary import QualitySummary
from monitor.store.session import Store
from tests.quality.helpers import DAY, make_samples, quality_settings
from tests.support.llamacpp import MODEL_NAME, LlamaServer, serve_tiny_model

SAMPLES = 8


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    yield from serve_tiny_model(tmp_path_factory, "judge")


def test_a_tiny_random_model_as_judge_fails_the_run_with_no_model_figure(server: LlamaServer, tmp_path: Path) -> None:
    url = f"{server.url}/v1"
    settings = quality_settings(tmp_path, url, sample_size=SAMPLES, judge={
        "base_url": url, "model": MODEL_NAME, "concurrency": 4, "timeout": "30s", "max_retries": 0,
        "max_tokens": 2048, "calibration": None})
    store = Store(settings.storage.url)
    QualityStore(store.engine).add_samples(make_samples(SAMPLES))
    assert run_command(settings, DAY, None, False) == 1
    run = QualityStore(store.engine).run(DAY, "qwen3-8b")
    store.close()
    assert run is not None
    summary = QualitySummary.from_stored(run.summary)
    assert summary.failed and summary.score_mean is None and summary.hallucination_ratio is None
    assert summary.judge_endpoint_model is not None  # what /v1/models of llama-server lists
    # Every verdict it did give (most answers never close their JSON) has a reason of noise: suspect.
    assert summary.nonlanguage_reasons == (summary.sampled or 0) - (summary.judge_errors or 0)
