"""Reading exported /metrics text back: {(sample name, sorted labels): value}."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(text: str) -> Samples:
    out: Samples = {}
    for fam in text_string_to_metric_families(text):
        for sample in fam.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def value(page: Samples, name: str, **labels: str) -> float:
    return page[(name, tuple(sorted(labels.items())))]


def names(page: Samples, prefix: str = "inference_gpu_") -> set[str]:
    return {name for name, _ in page if name.startswith(prefix)}


def series(page: Samples, name: str, **labels: str) -> list[dict[str, str]]:
    """Label sets of `name` that include `labels`."""
    return [dict(lbl) for (n, lbl), _ in page.items() if n == name and labels.items() <= dict(lbl).items()]
