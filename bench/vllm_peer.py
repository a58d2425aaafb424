"""`vllm bench serve` and `infermon bench run` side by side against one real vLLM server.

The peer comparison for the bench client: the same real server (vLLM's CPU build serving the tiny
random-weight model of scripts/vllm_server.sh, tests/support/vllm_real.py), the same workload (streamed
chat completions of random prompts of INPUT tokens, OUTPUT generated tokens with ignore_eos, closed
loop at CONCURRENCY), in
one session, alternately, ROUNDS times each. `vllm bench serve` runs from the server's own venv;
`infermon bench run` is the project's CLI. Besides each client's own numbers, the engine's page is
read before and after each run: the engine-side TTFT from vLLM's own histogram, the same for both
clients, tells the server's share of a TTFT from the client's.

    .venv/bin/python -m bench.vllm_peer            # ~4 min on 2 cores (server start included)

Prints one table and writes build/vllm_peer.json.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Protocol

import httpx
from prometheus_client.parser import text_string_to_metric_families

from monitor.service.promql import histogram_quantile
from tests.support.vllm_real import MODEL_NAME, VllmServer, vllm_home

INPUT, OUTPUT, CONCURRENCY, PROMPTS, ROUNDS = 128, 64, 4, 48, 2
# scripts/vllm_server.sh's tokenizer was trained on these words: each is one token after a space.
VOCABULARY = ["the", "a", "monitor", "engine", "request", "token", "cache", "prefix", "queue", "latency", "answer",
              "question", "model", "server", "metric", "scrape", "rate", "histogram", "quantile", "prompt", "output",
              "decode", "prefill", "batch", "time", "user", "assistant", "system", "hello", "world", "please",
              "reply", "with", "one", "short", "sentence", "about", "it"]
DURATION_S = 8  # infermon's measured window; vLLM's run is PROMPTS requests (about as long here)
# `vllm bench serve` without the `vllm` console script (it looks for a package named `vllm`).
VLLM_BENCH = ("import sys\nfrom vllm.benchmarks.serve import add_cli_args, main\n"
              "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
              "p = FlexibleArgumentParser()\nadd_cli_args(p)\nmain(p.parse_args(sys.argv[1:]))\n")


class Serving(Protocol):
    """What the runners need of a server: the real vLLM (tests/support/vllm_real.py) or one standing in for it
    with its tokenizer (bench/client_cpu.py's simulator)."""

    url: str
    python: Path
    model: Path

    def environment(self) -> dict[str, str]: ...

    def metrics(self) -> str: ...


def engine_page(server: Serving) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(server.metrics()) for s in family.samples}


def engine_side(before: dict[Any, float], after: dict[Any, float]) -> dict[str, float]:
    """The engine's own numbers between two reads: requests, TTFT P50/P99 from its buckets."""
    def moved(name: str) -> float:
        return sum(v - before.get(k, 0.0) for k, v in after.items() if k[0] == name)

    out = {"requests": moved("vllm:request_success_total"),
           "generation_tokens": moved("vllm:generation_tokens_total")}
    for metric, name in (("ttft", "vllm:time_to_first_token_seconds"),
                         ("tpot", "vllm:request_time_per_output_token_seconds")):
        buckets: dict[float, float] = {}
        for key, value in after.items():
            if key[0] == f"{name}_bucket":
                le = float(dict(key[1])["le"])
                buckets[le] = buckets.get(le, 0.0) + value - before.get(key, 0.0)
        for q in (0.5, 0.99):
            out[f"{metric}_p{round(q * 100)}_ms"] = 1000 * histogram_quantile(q, sorted(buckets.items()))
    return out


def run_vllm_bench(server: Serving, out_dir: Path, seed: int, prompts: int = PROMPTS) -> dict[str, Any]:
    command, env, name = vllm_bench_command(server, out_dir, seed, prompts)
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"vllm bench serve failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")
    return vllm_bench_row(out_dir / name)


def vllm_bench_command(server: Serving, out_dir: Path, seed: int,
                       prompts: int = PROMPTS) -> tuple[list[str], dict[str, str], str]:
    """`vllm bench serve`'s command line, environment and result file name, for the workload."""
    name = f"vllm-{seed}-{prompts}.json"
    command = [str(server.python), "-c", VLLM_BENCH, "--backend", "openai-chat", "--base-url", server.url,
               "--endpoint", "/v1/chat/completions", "--model", MODEL_NAME, "--tokenizer", str(server.model),
               "--dataset-name", "random", "--random-input-len", str(INPUT), "--random-output-len", str(OUTPUT),
               "--num-prompts", str(prompts), "--max-concurrency", str(CONCURRENCY), "--request-rate", "inf",
               "--ignore-eos", "--seed", str(seed), "--num-warmups", "2", "--disable-tqdm",
               "--percentile-metrics", "ttft,tpot,e2el", "--metric-percentiles", "50,99",
               "--save-result", "--result-dir", str(out_dir), "--result-filename", name]
    return command, {**server.environment(), "HF_HUB_OFFLINE": "1"}, name


def vllm_bench_row(path: Path) -> dict[str, Any]:
    raw = json.loads(path.read_text())
    return {"client": "vllm bench serve", "requests": raw["completed"], "failed": raw.get("failed", 0),
            "seconds": raw["duration"], "req_per_s": raw["request_throughput"],
            "output_tok_per_s": raw["output_throughput"],
            "ttft_p50_ms": raw["median_ttft_ms"], "ttft_p99_ms": raw["p99_ttft_ms"],
            "tpot_p50_ms": raw["median_tpot_ms"], "tpot_p99_ms": raw["p99_tpot_ms"],
            "e2e_p50_ms": raw["median_e2el_ms"], "e2e_p99_ms": raw["p99_e2el_ms"],
            "input_tokens_per_request": raw["total_input_tokens"] / max(raw["completed"], 1)}


def run_infermon_bench(server: Serving, out_dir: Path, seed: int, duration_s: float = DURATION_S,
                       client: str = "stream") -> dict[str, Any]:
    """One `infermon bench run` of the workload; `client`: its HTTP client (`--client`)."""
    scenario = out_dir / "scenario.yaml"
    scenario.write_text(f"name: peer\nclasses: [{{name: peer, share: 1.0, input_tokens: {INPUT}, "
                        f"output_tokens: {OUTPUT}}}]\nconcurrency: [{CONCURRENCY}]\n")
    result = out_dir / f"infermon-{client}-{seed}-{duration_s:g}.json"
    # Prompts of exactly INPUT tokens of this tokenizer (one per word of its training vocabulary),
    # each its own: the bench's synthetic text would be ~3x longer on a 512-token vocabulary.
    rng = random.Random(seed)
    dataset = out_dir / f"prompts-{seed}.jsonl"
    dataset.write_text("".join(json.dumps({"prompt": " ".join(rng.choice(VOCABULARY) for _ in range(INPUT))}) + "\n"
                               for _ in range(400)))
    command = [sys.executable, "-m", "monitor.cli", "bench", "run", "--target", server.url, "--model", MODEL_NAME,
               "--scenario", str(scenario), "--dataset", str(dataset), "--concurrency", str(CONCURRENCY),
               "--duration", f"{duration_s:g}s", "--repeats", "1", "--warmup", "2", "--seed", str(seed),
               "--ignore-eos", "--gpu", "none", "--client", client, "-o", str(result)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False,
                          env={**os.environ, "INFERMON_STORAGE__URL": "sqlite://"})
    if done.returncode != 0:
        raise RuntimeError(f"infermon bench failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")
    window = json.loads(result.read_text())["levels"][0]["repeats"][0]
    return {"client": "infermon bench" if client == "stream" else f"infermon bench ({client})",
            "requests": window["requests"], "failed": window["failed"],
            "seconds": window["duration_s"], "req_per_s": window["requests_per_s"],
            "output_tok_per_s": window["output_tokens_per_s"],
            "ttft_p50_ms": 1000 * window["ttft_s"]["p50"], "ttft_p99_ms": 1000 * window["ttft_s"]["p99"],
            "tpot_p50_ms": 1000 * window["tpot_s"]["p50"], "tpot_p99_ms": 1000 * window["tpot_s"]["p99"],
            "e2e_p50_ms": 1000 * window["e2e_s"]["p50"], "e2e_p99_ms": 1000 * window["e2e_s"]["p99"],
            "input_tokens_per_request": window["served_input_tokens"]["mean"],
            "engine_figures": window.get("engine"), "client_window": window.get("client"),
            "all_requests": window["requests"] + 2}  # with the warm-up's


def main() -> None:
    home = vllm_home()
    out_dir = Path(tempfile.mkdtemp(prefix="vllm-peer-"))
    rows = []
    with VllmServer(home, out_dir / "vllm.log") as server:
        print(f"vLLM up in {server.startup_s:.1f} s, RSS {server.rss_bytes() / 2**20:.0f} MiB", flush=True)
        httpx.post(f"{server.url}/v1/completions", timeout=60,
                   json={"model": MODEL_NAME, "prompt": "warm", "max_tokens": 4})
        for round_ in range(ROUNDS):
            runners = (run_vllm_bench, run_infermon_bench) if round_ % 2 == 0 else (run_infermon_bench,
                                                                                     run_vllm_bench)
            for runner in runners:
                before, started = engine_page(server), time.monotonic()
                row = runner(server, out_dir, round_)
                row["wall_s"] = time.monotonic() - started
                row["engine"] = engine_side(before, engine_page(server))
                row["round"] = round_
                rows.append(row)
                print(json.dumps(row), flush=True)
    keys = ("input_tokens_per_request", "req_per_s", "output_tok_per_s", "ttft_p50_ms", "ttft_p99_ms",
            "tpot_p50_ms", "tpot_p99_ms", "e2e_p50_ms", "e2e_p99_ms")
    print(f"\n{'client':18} {'round':>5} " + " ".join(f"{k:>16}" for k in keys) + f" {'engine ttft p50':>16}")
    for row in rows:
        cells = " ".join(f"{row[k]:16.2f}" if isinstance(row.get(k), float | int) else f"{'-':>16}" for k in keys)
        print(f"{row['client']:18} {row['round']:5d} {cells} {row['engine']['ttft_p50_ms']:16.2f}")
    target = Path("build") / "vllm_peer.json"
    target.parent.mkdir(exist_ok=True)
    target.write_text(json.dumps({"input": INPUT, "output": OUTPUT, "concurrency": CONCURRENCY, "rows": rows},
                                 indent=1))
    print(f"\nwritten {target}")


if __name__ == "__main__":
    main()
