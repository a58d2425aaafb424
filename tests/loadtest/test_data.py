"""Prompt files (ShareGPT, JSONL) -> requests drawn to a scenario's lengths, the same for the same
seed; bad files fail with the file and the reason; synthetic prompts are marked."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from monitor.loadtest.data import DatasetError, draw_requests, length_stats, load_dataset, synthetic_dataset
from monitor.loadtest.scenario import BUILT_IN, ScenarioError, load_scenario


def _sharegpt(tmp_path: Path) -> Path:
    conversations = [
        {"id": "a", "conversations": [{"from": "human", "value": "x" * 800}, {"from": "gpt", "value": "y" * 400}]},
        {"id": "b", "conversations": [{"from": "system", "value": "be brief"}, {"from": "human", "value": "z" * 40},
                                      {"from": "gpt", "value": "ok"}]},
        {"id": "c", "conversations": []},  # no human turn: skipped
        {"id": "d", "conversations": [{"from": "human", "value": "w" * 20000}]},
    ]
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(conversations))
    return path


def test_sharegpt_first_human_turn_is_the_prompt_and_the_file_is_hashed(tmp_path: Path) -> None:
    path = _sharegpt(tmp_path)
    dataset = load_dataset(path)
    assert dataset.source == "sharegpt"
    assert [p.input_tokens for p in dataset.prompts] == [200, 10, 5000]
    assert dataset.prompts[0].reference_output_tokens == 100
    assert dataset.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert dataset.describe()["synthetic"] is False


def test_jsonl_prompt_text_or_messages(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "hello world"}\n\n{"text": "abcd", "output_tokens": 7}\n'
                    '{"messages": [{"role": "system", "content": "be nice"}, {"role": "user", "content": "hi"}]}\n')
    prompts = load_dataset(path).prompts
    assert prompts[1].reference_output_tokens == 7
    assert prompts[2].messages[0] == {"role": "system", "content": "be nice"}


@pytest.mark.parametrize(("text", "reason"), [('{"prompt": "a"}\nnot json\n', "p.jsonl:2: not a JSON line"),
                                              ('{"question": "a"}\n', "needs a 'prompt', 'text' or 'messages'"),
                                              ("[1, 2]", "no prompt found"), ("[{", "not valid ShareGPT JSON")])
def test_a_bad_file_names_itself_and_the_reason(tmp_path: Path, text: str, reason: str) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text(text)
    with pytest.raises(DatasetError, match=reason):
        load_dataset(path)
    with pytest.raises(DatasetError, match="cannot read"):
        load_dataset(tmp_path / "missing.json")


def test_requests_are_drawn_near_each_class_and_repeat_with_the_seed(tmp_path: Path) -> None:
    dataset = load_dataset(_sharegpt(tmp_path))
    mixed = BUILT_IN["mixed"]
    first, again = draw_requests(dataset, mixed, 200, seed=3), draw_requests(dataset, mixed, 200, seed=3)
    assert first == again
    assert first != draw_requests(dataset, mixed, 200, seed=4)
    chat = [r for r in first if r.kind == "chat"]
    batch = [r for r in first if r.kind == "batch"]
    assert {r.input_tokens for r in chat} == {200} and {r.max_tokens for r in chat} == {100}
    assert {r.input_tokens for r in batch} == {5000} and {r.max_tokens for r in batch} == {2000}
    assert 0.7 < len(chat) / 200 < 0.9  # four chat requests to one batch request
    stats = length_stats(first)
    assert stats["input_tokens"]["p50"] == 200 and stats["output_tokens"]["p99"] == 2000


def test_synthetic_prompts_are_varied_words_at_the_target_length() -> None:
    dataset = synthetic_dataset(BUILT_IN["chat"])
    assert dataset.describe()["synthetic"] is True and dataset.sha256 is None
    text = dataset.prompts[0].messages[0]["content"]
    assert 190 <= dataset.prompts[0].input_tokens <= 210
    assert len(set(text.split())) > 10  # not "repeat [1000 spaces]"


def test_synthetic_requests_are_new_for_every_request_and_the_same_for_the_same_seed() -> None:
    mixed = BUILT_IN["mixed"]
    dataset = synthetic_dataset(mixed)
    assert dataset.describe()["unique_per_request"] is True
    stream = draw_requests(dataset, mixed, 10, seed=7)
    first = stream[:3000]
    assert len(first) == 3000 and stream[:3000] == first  # made on demand, the same each time
    assert draw_requests(dataset, mixed, 10, seed=7)[:50] == first[:50]  # same seed: same prompts
    assert draw_requests(dataset, mixed, 10, seed=8)[:50] != first[:50]
    texts = [r.messages[0]["content"] for r in first]
    assert len(set(texts)) == len(texts)  # none repeats ...
    assert len(stream) > 10**15 and stream[10**12].messages[0]["content"].endswith(f"({10**12})")  # ... however long
    # ... and none shares a prefix-cache block with another: two prompts agree on a word or two by chance.
    assert len({tuple(text.split()[:6]) for text in texts}) == len(texts)
    chat = [r for r in first if r.kind == "chat"]
    assert 0.75 < len(chat) / len(first) < 0.85  # the scenario's shares
    assert all(190 <= r.input_tokens <= 212 and r.max_tokens == 100 for r in chat)
    assert all(4990 <= r.input_tokens <= 5012 for r in first if r.kind == "batch")


def test_scenario_file_and_its_errors(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("name: bot\nclasses: [{share: 0.9, input_tokens: 150, output_tokens: 80}]\nconcurrency: [1, 16]\n")
    scenario = load_scenario(str(path))
    assert scenario.name == "bot" and scenario.concurrency == (1, 16) and scenario.classes[0].input_tokens == 150
    path.write_text("classes: [{share: 1}]\n")
    with pytest.raises(ScenarioError, match=r"classes\[0\]: needs input_tokens"):
        load_scenario(str(path))
    with pytest.raises(ScenarioError, match="neither chat, batch, mixed, long-context, moe nor a file"):
        load_scenario("chatty")
