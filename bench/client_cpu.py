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

    .venv/bin/python -m bench.client_cpu [--rounds 2] [--prompts 160] [--duration 16]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import httpx

from bench.vllm_peer import CONCURRENCY, INPUT, OUTPUT, run_infermon_bench, vllm_bench_command, vllm_bench_row
from tests.vllm_real import MODEL_NAME, VllmServer, vllm_home

LOAD_STARTS = "Starting main benchmark run"
LOAD_ENDED = "Serving Benchmark Result"


def process_cpu_s(pid: int) -> float:
    """utime + stime of a running process, in seconds (proc(5): fields 14 and 15, after the comm)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def vllm_load_cpu(server: VllmServer, out_dir: Path, seed: int, prompts: int) -> dict[str, Any]:
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


def infermon_load_cpu(server: VllmServer, out_dir: Path, seed: int, duration_s: float) -> dict[str, Any]:
    row = run_infermon_bench(server, out_dir, seed, duration_s)
    window = row.pop("client_window")
    return {**row, "load_cpu_s": window["client_cpu_s"], "cpu_ms_per_request": window["client_cpu_ms_per_request"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--prompts", type=int, default=160, help="vllm bench serve: requests a run")
    parser.add_argument("--duration", type=float, default=16.0, help="infermon bench: its measured window, s")
    args = parser.parse_args()
    out_dir = Path(tempfile.mkdtemp(prefix="client-cpu-"))
    rows = []
    with VllmServer(vllm_home(), out_dir / "vllm.log") as server:
        print(f"vLLM up in {server.startup_s:.1f} s", flush=True)
        httpx.post(f"{server.url}/v1/completions", timeout=60, json={"model": MODEL_NAME, "prompt": "warm",
                                                                      "max_tokens": 4})
        for round_ in range(args.rounds):
            for client in ("vllm", "infermon") if round_ % 2 == 0 else ("infermon", "vllm"):
                row = (vllm_load_cpu(server, out_dir, round_, args.prompts) if client == "vllm"
                       else infermon_load_cpu(server, out_dir, round_, args.duration))
                row.pop("engine_figures", None)
                row["round"] = round_
                rows.append(row)
                print(json.dumps({k: row[k] for k in ("client", "round", "requests", "req_per_s", "load_cpu_s",
                                                      "cpu_ms_per_request", "ttft_p50_ms")}), flush=True)
    by_client: dict[str, list[float]] = {}
    for row in rows:
        by_client.setdefault(row["client"], []).append(row["cpu_ms_per_request"])
    print(f"\nclient CPU per streamed request ({INPUT} tokens in, {OUTPUT} out, c={CONCURRENCY}), ms:")
    for client, values in by_client.items():
        print(f"  {client:18} " + ", ".join(f"{v:.2f}" for v in values))
    mean = {client: sum(v) / len(v) for client, v in by_client.items()}
    print(f"  ratio infermon / vllm: {mean['infermon bench'] / mean['vllm bench serve']:.2f}")
    target = Path("build") / "client_cpu.json"
    target.parent.mkdir(exist_ok=True)
    target.write_text(json.dumps({"input": INPUT, "output": OUTPUT, "concurrency": CONCURRENCY, "rows": rows},
                                 indent=1))
    print(f"written {target}")


if __name__ == "__main__":
    main()
