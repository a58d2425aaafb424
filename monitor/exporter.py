"""State -> /metrics: one custom collector on a private registry, fresh families per scrape.

Each layer contributes a render function that turns its latest view into families; nothing
here does I/O, so /metrics answers in milliseconds however broken the sources are.
"""

from __future__ import annotations

import functools
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from monitor.catalog import family
from monitor.health import HealthBook

Renderer = Callable[[], Iterable[Metric]]


class MonitorExporter(Collector):
    def __init__(self, renderers: list[Renderer]) -> None:
        self.renderers = renderers

    def collect(self) -> Iterator[Metric]:
        for render in self.renderers:
            for fam in render():
                if fam.samples:  # an empty family would print a bare HELP/TYPE pair
                    yield fam

    def describe(self) -> list[Metric]:
        return []  # nothing to describe ahead of time: families depend on what was scraped


def make_registry(renderers: list[Renderer]) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(MonitorExporter(renderers))
    return registry


class TextWriter:
    """The text exposition format, byte for byte what `generate_latest` writes, faster.

    `generate_latest` formats every label set anew on each scrape, a cost per sample that adds up
    on a node of many GPUs (docs/performance.md). Our label sets repeat from scrape to scrape, so
    their text is cached.
    """

    def __init__(self, cache_limit: int = 500_000) -> None:
        self._labels: dict[tuple[tuple[str, str], ...], str] = {}
        self._limit = cache_limit

    def render(self, registry: CollectorRegistry, out: list[str] | None = None) -> bytes:
        """The page; `out` holds text to put before the registry's."""
        return b"".join(self.render_chunks(registry, out))

    def render_chunks(self, registry: CollectorRegistry, out: list[str] | None = None) -> list[bytes]:
        """The page as `encode_chunks` gives it: pieces of about `CHUNK` bytes, whole lines each."""
        self.trim()
        out = [] if out is None else out
        for fam in registry.collect():
            out.append(header(fam))
            self.samples(fam, out)
        return encode_chunks(out)

    def trim(self) -> None:
        """Forget the label texts once there are too many (targets come and go)."""
        if len(self._labels) > self._limit:
            self._labels.clear()

    def line(self, name: str, labels: dict[str, str], value: float) -> str:
        """One sample's line; its label text from the cache."""
        key = tuple(labels.items())
        text = self._labels.get(key)
        if text is None:
            text = self._labels[key] = _label_text(labels)
        return f"{name}{text} {_go_float(value)}\n"

    def samples(self, fam: Metric, out: list[str]) -> None:
        """The family's sample lines (no HELP/TYPE), appended to `out`."""
        line = self.line
        out.extend([line(sample.name, sample.labels, sample.value) for sample in fam.samples])


CHUNK = 1 << 20  # characters joined and encoded at a time: about a millisecond of C each


def encode_chunks(parts: list[str]) -> list[bytes]:
    """`"".join(parts).encode()` as pieces of about `CHUNK` bytes, each cut between two parts.

    A join and an encode are single C calls that hold the interpreter: on a large fleet's page
    one join, and a last join of the encoded pieces into one bytes object (fresh memory,
    page-faulted in), held it long enough to stall the event loop (and /healthz) all along
    (docs/history/measurements-2026.md, seventh and eighth stops). The pieces are what /metrics sends and the
    rules read back: never joined in one call. A part is written whole into one piece (a family's
    text may be larger)."""
    chunks: list[bytes] = []
    start, size = 0, 0
    for at, part in enumerate(parts):
        size += len(part)
        if size >= CHUNK:
            chunks.append("".join(parts[start : at + 1]).encode())
            start, size = at + 1, 0
    if start < len(parts):
        chunks.append("".join(parts[start:]).encode())
    return chunks


def header(fam: Metric) -> str:
    """The family's HELP and TYPE lines."""
    name = f"{fam.name}_total" if fam.type == "counter" else fam.name
    help_text = fam.documentation.replace("\\", r"\\").replace("\n", r"\n")
    return f"# HELP {name} {help_text}\n# TYPE {name} {_TEXT_TYPES.get(fam.type, fam.type)}\n"


_TEXT_TYPES = {"stateset": "gauge", "unknown": "untyped"}  # our catalog has no info/_created families


def _go_float(value: float) -> str:
    # floatToGoString's answer, without its float() and branches for the common case: it writes
    # otherwise than repr only NaN, the infinities and numbers with over six digits before the point
    # (repr of a float in this range never has more: only 1e6 itself would round to seven).
    if -1e6 < value < 1e6:  # never NaN
        return repr(value)
    return str(floatToGoString(value))  # type: ignore[no-untyped-call]


def _label_text(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    pairs = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()))
    return f"{{{pairs}}}"


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def render_text(registry: CollectorRegistry, writer: TextWriter | None = None) -> bytes:
    return (writer or TextWriter()).render(registry)


def render_health(book: HealthBook) -> Iterator[Metric]:
    success = family("inference_monitor_collector_success")
    duration = family("inference_monitor_collector_duration_seconds")
    last = family("inference_monitor_last_success_timestamp_seconds")
    for entry in list(book.entries.values()):  # a copy: rendered in the worker thread while the loop adds
        if not entry.present or entry.success is None:
            continue  # "not present" is not a failure: no series at all
        labels = {"collector": entry.collector, "target": entry.target}
        success.add_sample(success.name, labels, 1.0 if entry.success else 0.0)
        if entry.duration_seconds is not None:
            duration.add_sample(duration.name, labels, entry.duration_seconds)
        if entry.last_success is not None:
            last.add_sample(last.name, labels, entry.last_success)
    yield success
    yield duration
    yield last
    yield from render_jobs(book)


def render_jobs(book: HealthBook) -> Iterator[Metric]:
    healthy = family("inference_monitor_job_healthy")
    progress = family("inference_monitor_job_last_progress_timestamp_seconds")
    errors = family("inference_monitor_job_errors_total")
    skipped = family("inference_monitor_job_skipped_runs_total")
    now = book.wall()
    for job in list(book.jobs.values()):
        if job.interval_seconds is None:
            continue  # not a scheduled job (`run_once`, `infermon check`): no series
        labels = {"job": job.job}
        healthy.add_sample(healthy.name, labels, 0.0 if job.problem(now) else 1.0)
        if job.last_progress is not None:
            progress.add_sample(progress.name, labels, job.last_progress)
        errors.add_sample(f"{errors.name}_total", labels, float(job.errors))
        skipped.add_sample(f"{skipped.name}_total", labels, float(job.skipped))
    yield healthy
    yield progress
    yield errors
    yield skipped


@dataclass(frozen=True)
class Exposition:
    """One rendered /metrics page: what /metrics serves and in-process readers (the alert
    evaluator) take, without rendering again. Kept as the render's pieces (`encode_chunks`): a
    big page is sent and read back piece by piece, never joined in one call on the way."""

    chunks: tuple[bytes, ...]
    rendered_at: float  # wall-clock seconds when the render started
    render_seconds: float
    sequence: int  # 1 for the first render, +1 for each later one
    _packed: list[bytes] = field(default_factory=list, repr=False, compare=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @functools.cached_property
    def body(self) -> bytes:
        """The whole page as one bytes object (joined once, when first asked for)."""
        return b"".join(self.chunks)  # one piece: itself, not a copy

    @property
    def size(self) -> int:
        return sum(map(len, self.chunks))

    def gzipped(self) -> bytes:
        """The body compressed, once, when a scraper that accepts gzip (Prometheus does) first asks
        for it: most renders are never scraped (a page every 5 s, Prometheus every 15), and a large
        fleet's body takes long to compress each time (docs/performance.md). zlib
        lets go of the GIL while it works: call it from a thread, never on the event loop."""
        with self._lock:
            if not self._packed:  # the gzip stream `gzip.compress` writes, piece by piece
                packer = zlib.compressobj(1, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
                packed = [packer.compress(chunk) for chunk in self.chunks]
                self._packed.append(b"".join([*packed, packer.flush()]))
            return self._packed[0]


class ExpositionCache:
    """The latest render of a registry, refreshed in the background (`refresh()` from a worker
    thread); readers take `latest` (None until the first refresh) and never wait for a render."""

    def __init__(self, registry: CollectorRegistry, wall: Callable[[], float] = time.time,
                 prefix: Callable[[TextWriter, list[str]], None] | None = None) -> None:
        self.registry = registry
        self.wall = wall
        self.prefix = prefix  # text rendered ahead of the registry's (the service layer's, kept per target)
        self.writer = TextWriter()  # its own label cache: never shared with a render on another thread
        self.latest: Exposition | None = None
        self._lock = threading.Lock()  # one render at a time

    def refresh(self) -> Exposition:
        with self._lock:
            at, started = self.wall(), time.perf_counter()
            head: list[str] = []
            if self.prefix is not None:
                self.prefix(self.writer, head)
            chunks = self.writer.render_chunks(self.registry, head)
            sequence = self.latest.sequence + 1 if self.latest else 1
            self.latest = Exposition(tuple(chunks), at, time.perf_counter() - started, sequence)
            return self.latest
