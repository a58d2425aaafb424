"""`infermon bench`: a load test of an OpenAI-compatible endpoint that records its conditions.

    data.py        prompt files (ShareGPT JSON, JSONL) -> prompts sampled to a scenario's lengths
    scenario.py    chat | batch | mixed | a scenario file: target lengths, load levels, goodput
    load.py        the load itself: warm-up, closed-loop concurrency or Poisson rate, per request; sweeps
    stream.py      the bench's own streaming client, on the wire's HTTP/1.1 client (monitor/wire/)
    sse.py         an engine's event stream read as it arrives: SSE events, chat-completion chunks
    bounded.py     what one request may keep: its answer capped in bytes as it arrives
    sampling.py    GPU (NVML / dcgm-exporter / replay) and engine pages during a measured window
    conditions.py  the six variables and the rest of what a result is only valid under
    client.py      the client machine's load and the bench's own CPU during a window
    tokenizer.py   the input lengths by the engine's own tokenizer (vLLM, llama-server), before the load
    stats.py       samples -> percentiles, throughput, goodput, in flight, lengths served; repeats -> mean ± spread
    capacity.py    the search for the highest concurrency at the objectives; Pareto points
    verdict.py     whether a run (failures) or a comparison (the client machine drifted) may be believed
    result.py      the versioned JSON result
    compare.py     two results -> differences beyond noise; several -> one table
    summary.py     rich tables for a person
    report.py      one self-contained HTML page, inline SVG
"""

SCHEMA_VERSION = 1
