"""Client CPU per request: `infermon bench run` beside `vllm bench serve`, one real vLLM server.

Both clients run as their own processes against the same server with the same workload
(bench/vllm_peer.py's runners: streamed chat completions of INPUT random tokens, OUTPUT tokens with
ignore_eos, closed loop at CONCURRENCY), alternately, ROUNDS times each. What is compared is the
CPU time (user + system) of the load phase only, not the start-up (vLLM's client imports torch:
~6 s of CPU that would swamp a few hundred requests):

    vllm bench serve   /proc/<pid>/stat read when it prints "Starting main benchmark run..." (after
                       its warm-ups) and when it prints its result header, over its completed requests
    infermon bench     its own figure, `client.client_cpu_ms_per_request`: the process's CPU time
                       over the measured window (after the warm-up) over its requests

Each side's number covers everything its client does while the load runs; infermon's includes its
engine-page reads (every 0.5 s) and its progress bar, which `vllm bench serve` does not do.

Each round runs every client once, a different one first each round; `--clients` names infermon's
(`--client stream`, the bench's own and default, and `openai`, the SDK path the canary measures
through). Beside the CPU, each row has the client's TTFT P50 and the engine's own over the same run
(vLLM's histogram between two reads of its page, interpolated in its buckets): their difference
is roughly what the client adds.

`--server sim` puts the simulator in the real vLLM's place: a child process pinned to the last CPU,
answering with a fixed SIM_TTFT_S to the first token and SIM_PER_TOKEN_S a token after (no jitter,
served as the same model name), while the clients share the other CPUs. The engine then takes no
CPU from the clients, and what a client adds to a TTFT is exactly its TTFT P50 less SIM_TTFT_S.

    .venv/bin/python -m bench.client_cpu [--rounds 3] [--prompts 160] [--duration 16] [--clients stream,openai]
                                         [--server vllm|sim]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import httpx

from bench.vllm_peer import (
    CONCURRENCY,
    INPUT,
    OUTPUT,
    Serving,
    engine_page,
    engine_side,
    run_infermon_bench,
    vllm_bench_command,
    vllm_bench_row,
)
from tests.support.vllm_real import MODEL_NAME, VllmServer, vllm_home

LOAD_STARTS = "Starting main benchmark run"
LOAD_ENDED = "Serving Benchmark Result"


def process_cpu_s(pid: int) -> float:
    """utime + stime of a running process, in seconds (proc(5): fields 14 and 15, after the comm)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def vllm_load_cpu(server: Serving, out_dir: Path, seed: int, prompts: int) -> dict[str, Any]:
    command, env, name = vllm_bench_command(server, out_dir, seed, prompts)
    marks: dict[str, float] = {}
    lines = []
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env={**env, "PYTHONUNBUFFERED": "1"}) as child:
        assert child.stdout is not None
        for line in child.stdout:
            lines.append(line)
            for mark in (LOAD_STARTS, LOAD_ENDED):
                if mark in line and mark not in marks:
                    marks[mark] = process_cpu_s(child.pid)
        code = child.wait(600)
    if code != 0 or len(marks) != 2:
        raise RuntimeError(f"vllm bench serve: exit {code}, marks {marks}: {''.join(lines[-30:])}")
    row = vllm_bench_row(out_dir / name)
    cpu_s = marks[LOAD_ENDED] - marks[LOAD_STARTS]
    return {**row, "load_cpu_s": cpu_s, "cpu_ms_per_request": 1000 * cpu_s / row["requests"]}


def infermon_load_cpu(server: Serving, out_dir: Path, seed: int, duration_s: float,
                      client: str = "stream") -> dict[str, Any]:
    row = run_infermon_bench(server, out_dir, seed, duration_s, client)
    window = row.pop("client_window")
    return {**row, "load_cpu_s": window["client_cpu_s"], "cpu_ms_per_request": window["client_cpu_ms_per_request"]}


SIM_TTFT_S, SIM_PER_TOKEN_S = 0.020, 0.004


def _serve_sim(ready: Any, stop: Any, cpu: int) -> None:
    os.sched_setaffinity(0, {cpu})
    from monitor.sim import EngineConfig, LatencyProfile, SimServer, SimulatedEngine

    profile = LatencyProfile(prefill_s=SIM_TTFT_S, prefill_per_token_s=0.0, per_token_s=SIM_PER_TOKEN_S,
                             output_tokens=(OUTPUT, OUTPUT), jitter=0.0)
    config = EngineConfig(deterministic=True, min_step_s=0.001, model_name=MODEL_NAME)
    with SimServer(SimulatedEngine(config, profile)) as server:
        ready.put(server.url)
        stop.wait()


class SimTarget:
    """The simulator as the server (`--server sim`), with what `vllm_bench_command` needs of one: the
    tokenizer of the real vLLM's model (for `vllm bench serve`'s random prompts) and its python."""

    def __init__(self, home: Path) -> None:
        self.python, self.model = home / "venv" / "bin" / "python", home / "model"
        self._env = VllmServer(home, Path(os.devnull)).environment()
        self.startup_s = 0.0

    def environment(self) -> dict[str, str]:
        return self._env

    def metrics(self) -> str:
        return httpx.get(f"{self.url}/metrics", timeout=10).text

    def __enter__(self) -> SimTarget:
        cpus = sorted(os.sched_getaffinity(0))
        context = multiprocessing.get_context("spawn")
        ready, self._stop = context.Queue(), context.Event()
        self._child = context.Process(target=_serve_sim, args=(ready, self._stop, cpus[-1]), daemon=True)
        self._child.start()
        self.url = ready.get(timeout=60)
        os.sched_setaffinity(0, set(cpus[:-1]) or set(cpus))  # the clients (children inherit it)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._child.join(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--prompts", type=int, default=160, help="vllm bench serve: requests a run")
    parser.add_argument("--duration", type=float, default=16.0, help="infermon bench: its measured window, s")
    parser.add_argument("--clients", default="stream,openai", help="infermon bench's --client values to run")
    parser.add_argument("--server", choices=("vllm", "sim"), default="vllm")
    args = parser.parse_args()
    out_dir = Path(tempfile.mkdtemp(prefix="client-cpu-"))
    rows = []
    runners = ["vllm", *args.clients.split(",")]
    serving = VllmServer(vllm_home(), out_dir / "vllm.log") if args.server == "vllm" else SimTarget(vllm_home())
    with serving as server:
        print(f"{args.server} up in {server.startup_s:.1f} s at {server.url}", flush=True)
        httpx.post(f"{server.url}/v1/completions", timeout=60, json={"model": MODEL_NAME, "prompt": "warm",
                                                                      "max_tokens": 4})
        for round_ in range(args.rounds):
            for client in runners[round_ % len(runners):] + runners[:round_ % len(runners)]:  # each first in turn
                before = engine_page(server)
                row = (vllm_load_cpu(server, out_dir, round_, args.prompts) if client == "vllm"
                       else infermon_load_cpu(server, out_dir, round_, args.duration, client))
                row.pop("engine_figures", None)
                row["engine"] = engine_side(before, engine_page(server))
                # What the client adds to a TTFT: its P50 less the engine's own (vLLM's histogram,
                # interpolated) or, on the simulator, less the TTFT it imposes
                engine_ttft_ms = row["engine"]["ttft_p50_ms"] if args.server == "vllm" else 1000 * SIM_TTFT_S
                row["added_ttft_p50_ms"] = row["ttft_p50_ms"] - engine_ttft_ms
                row["round"] = round_
                rows.append(row)
                print(json.dumps({k: row[k] for k in ("client", "round", "requests", "req_per_s", "load_cpu_s",
                                                      "cpu_ms_per_request", "ttft_p50_ms", "added_ttft_p50_ms")}),
                      flush=True)
    by_client: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_client.setdefault(row["client"], []).append(row)
    print(f"\nper streamed request ({INPUT} tokens in, {OUTPUT} out, c={CONCURRENCY}), each round:")
    print(f"  {'client':26} {'client CPU ms':>24} {'TTFT P50 ms':>24} {'added TTFT P50 ms':>24} {'req/s':>18}")
    for client, got in by_client.items():
        def cells(key: str, got: list[dict[str, Any]] = got) -> str:
            return ", ".join(f"{_value(r, key):.2f}" for r in got)
        print(f"  {client:26} {cells('cpu_ms_per_request'):>24} {cells('ttft_p50_ms'):>24} "
              f"{cells('added_ttft_p50_ms'):>24} {cells('req_per_s'):>18}")
    mean = {client: sum(r["cpu_ms_per_request"] for r in got) / len(got) for client, got in by_client.items()}
    for client in mean:
        if client != "vllm bench serve":
            print(f"  client CPU ratio {client} / vllm bench serve: {mean[client] / mean['vllm bench serve']:.2f}")
    target = Path("build") / f"client_cpu_{args.server}.json"
    target.parent.mkdir(exist_ok=True)
    target.write_text(json.dumps({"input": INPUT, "output": OUTPUT, "concurrency": CONCURRENCY, "rows": rows},
                                 indent=1))
    print(f"written {target}")


def _value(row: dict[str, Any], key: str) -> float:
    value: Any = row
    for part in key.split("."):
        value = value[part]
    return float(value)


if __name__ == "__main__":
    main()
