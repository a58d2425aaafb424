"""Engine pages for benchmarks and tests from the real V1 fixture: 1 engine x 1 model, 8 engines x 4 models."""

from __future__ import annotations

import re
from pathlib import Path

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "sample_vllm_v1.prom"
_MODEL = 'model_name="meta-llama/Llama-3.1-8B-Instruct"'


def v1_page() -> str:
    return FIXTURE.read_text()


def fleet_page(engines: int = 8, models: int = 4) -> str:
    """One server page carrying `engines` x `models` children of every vLLM family (~700 KB)."""
    out: list[str] = []
    for line in v1_page().splitlines():
        if not line.startswith("vllm:") or _MODEL not in line:
            out.append(line)
            continue
        for model in range(models):
            for engine in range(engines):
                child = line.replace('engine="0"', f'engine="{engine}"')
                out.append(child.replace(_MODEL, f'model_name="org/model-{model}"'))
    return "\n".join(out) + "\n"


def grown(text: str, factor: float) -> str:
    """A later scrape: every counter-like vLLM sample multiplied by `factor`."""

    def bump(match: re.Match[str]) -> str:
        name = match.group(1).split("{", 1)[0]
        if "_created" in name or "num_requests" in name or "perc" in name or "info" in name:
            return match.group(0)
        return f"{match.group(1)} {float(match.group(2)) * factor!r}"

    return re.sub(r"^(vllm:\S*(?:\{.*\})?) (\S+)$", bump, text, flags=re.M)
