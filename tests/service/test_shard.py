"""`service.shard`: each monitor keeps the targets whose hashmod of the name is its index.

Two sharded monitors, scraped by the real Prometheus, give the fleet-wide numbers of one monitor
over all the targets (a sum by model and window of the shards' per-target series); and the split
is the one Prometheus' own `hashmod` relabelling makes.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from monitor.app import create_app
from monitor.config import ConfigError, load_settings
from monitor.runtime import Monitor
from monitor.service.shard import shard_of
from tests.conftest import FIXTURES, require_binary
from tests.service.pagegen import grow
from tests.support.appserver import serve_asgi
from tests.support.pageserver import Generated, PageServer
from tests.support.promserver import PrometheusServer

NAMES = [f"vllm-{i}" for i in range(8)]
SUMMED = ["inference_requests_per_second", "inference_prompt_tokens_per_second",
          "inference_generation_tokens_per_second", "inference_preemptions_per_second"]


def settings_for(targets: list[dict[str, str]], shard: dict[str, int] | None, **service: object) -> object:
    section: dict[str, object] = {"windows": ["30s", "1m"], "targets": targets, **service}
    if shard is not None:
        section["shard"] = shard
    return load_settings(None, {"infra": {"nvml": {"enabled": "false"}}, "alerting": {"enabled": False},
                                "storage": {"url": "sqlite://"}, "service": section})


def test_shard_index_must_be_below_count() -> None:
    with pytest.raises(ConfigError, match="index 2 is not below count 2"):
        settings_for([], {"index": 2, "count": 2})
    with pytest.raises(ConfigError, match="count"):
        settings_for([], {"index": 0, "count": 0})


def test_static_and_file_sd_targets_are_split_once(tmp_path: Path) -> None:
    static = [{"name": n, "url": f"http://10.0.0.{i}:8000/metrics"} for i, n in enumerate(NAMES[:4])]
    sd = tmp_path / "targets.json"
    sd.write_text(json.dumps([{"targets": [f"10.0.1.{i}:8000"], "labels": {"target": n}}
                              for i, n in enumerate(NAMES[4:])]))
    kept = []
    for index in range(3):
        monitor = Monitor(settings_for(static, {"index": index, "count": 3}, file_sd=[str(sd)]))  # type: ignore[arg-type]
        kept.append(set(monitor.service.targets))
        assert kept[-1] == {n for n in NAMES if shard_of(n, 3) == index}
        assert monitor.status()["layers"]["service"]["shard"] == {"index": index, "count": 3}
        asyncio.run(monitor.aclose())
    assert set().union(*kept) == set(NAMES) and sum(map(len, kept)) == len(NAMES)


def test_two_shards_through_prometheus_equal_one_monitor() -> None:
    binary = require_binary("prometheus")
    base = (FIXTURES / "sample_vllm_v1.prom").read_text()
    step = [0]
    clock = [1_767_300_000.0]
    with PageServer() as pages:
        urls = {name: pages.set(f"/{name}", Generated(_growing(base, i, step))) for i, name in enumerate(NAMES)}
        targets = [{"name": name, "url": url} for name, url in urls.items()]
        monitors = {"all": Monitor(settings_for(targets, None), wall=lambda: clock[0]),  # type: ignore[arg-type]
                    **{f"shard{i}": Monitor(settings_for(targets, {"index": i, "count": 2}),  # type: ignore[arg-type]
                                            wall=lambda: clock[0]) for i in range(2)}}
        assert all(monitors[f"shard{i}"].service.targets for i in range(2)), "both shards own targets"

        async def rounds() -> None:
            for _ in range(5):  # every monitor scrapes the same page at the same (injected) time
                for monitor in monitors.values():
                    await monitor.run_once()
                step[0] += 1
                clock[0] += 15.0

        asyncio.run(rounds())
        host = f"127.0.0.1:{pages.port}"
        with serve_asgi(create_app(monitors["all"], schedule=False)) as all_url, \
                serve_asgi(create_app(monitors["shard0"], schedule=False)) as url0, \
                serve_asgi(create_app(monitors["shard1"], schedule=False)) as url1, \
                PrometheusServer({"all": [f"{all_url}/metrics"], "shards": [f"{url0}/metrics", f"{url1}/metrics"]},
                                 interval="1s", binary=binary, scrape_configs=[_hashmod_job(host)]) as prom:
            _wait(lambda: len(prom.query('up{job=~"all|shards"} == 1')) == 3
                  and len(prom.active_targets()) >= 1
                  and bool(prom.query(f'{SUMMED[0]}{{job="shards"}}')), 60)
            for name in SUMMED:
                one = _by(prom.query(f'{name}{{job="all", target=""}}'))
                shards = _by(prom.query(f'sum by (model, window) ({name}{{job="shards", target!=""}})'))
                assert one and shards.keys() == one.keys(), name
                for key, value in one.items():
                    assert shards[key] == pytest.approx(value, rel=1e-9), (name, key)
            owners = _by(prom.query('count by (target) (inference_target_up{job="shards"})'), ("target",))
            assert owners == {(n,): 1.0 for n in NAMES}  # each target in exactly one shard
            kept = {t["labels"]["target"] for t in prom.active_targets() if t["labels"]["job"] == "hashmod"}
        assert kept == set(monitors["shard0"].service.targets)
        for monitor in monitors.values():
            asyncio.run(monitor.aclose())


def _growing(base: str, index: int, step: list[int]) -> Callable[[int], str]:
    """The page of target `index` at the current step (not per hit: three monitors read each)."""
    return lambda hit: grow(base, 1 + 0.1 * (step[0] + 1) * (index + 1))


def _hashmod_job(host: str) -> dict[str, object]:
    """Prometheus' own hashmod on the `target` label, keeping shard 0 of 2."""
    return {
        "job_name": "hashmod", "scrape_interval": "1s", "scrape_timeout": "1s",
        "static_configs": [{"targets": [host], "labels": {"target": n, "__metrics_path__": f"/{n}"}} for n in NAMES],
        "relabel_configs": [
            {"source_labels": ["target"], "modulus": 2, "target_label": "__tmp_shard", "action": "hashmod"},
            {"source_labels": ["__tmp_shard"], "regex": "0", "action": "keep"},
        ],
    }


def _by(result: list[dict[str, object]], keys: tuple[str, ...] = ("model", "window")) -> dict[tuple[str, ...], float]:
    return {tuple(r["metric"].get(k, "") for k in keys): float(r["value"][1]) for r in result}  # type: ignore[attr-defined,index]


def _wait(condition: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.2)
