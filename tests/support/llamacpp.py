"""A real llama.cpp `llama-server` for tests: the binary, a tiny model made here, a server on loopback.

    binary = llama_server_binary()            # built once per machine by scripts/llama_server.sh
    model = tiny_model(tmp_path / "m.gguf")   # random weights, 2 layers, 64 dims, ~300 tokens
    with LlamaServer(binary, model) as server:
        server.url                            # http://127.0.0.1:<port>  (/metrics, /v1/...)

The model is written with the `gguf` package, without any download: a llama architecture, an
SPM vocabulary of ASCII characters and letter pairs with chatml's control tokens and a chatml
chat template. `add_space_prefix` is false: with it, llama.cpp's grammar sampler rejects
structured-output requests (HTTP 400). Its answers are random text, quickly; the server's
sampling seed is fixed (`--seed 1`), and an answer without max_tokens stops at
DEFAULT_MAX_TOKENS (`-n`).

Without a built binary the tests that need it skip -- except under CI (CI=true), where a missing
build fails: `make test` and `.ci/run` build it first (scripts/llama_server.sh).
"""

from __future__ import annotations

import os
import shutil
import string
import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType

import httpx
import numpy as np
import pytest

from monitor.ports import free_port
from tests.support.served_process import wait_healthy

ROOT = Path(__file__).parents[2]
SCRIPT = ROOT / "scripts" / "llama_server.sh"
MODEL_NAME = "tiny-llama"
IM_START, IM_END = "<|im_start|>", "<|im_end|>"
CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
EMBED, LAYERS, HEADS, FFN = 64, 2, 4, 128
# Tokens per answer when the request sets no max_tokens (the judge): a JSON object of the judge's
# schema never fits, so a schema-constrained answer is always unfinished.
DEFAULT_MAX_TOKENS = 16


def llama_server_binary() -> str:
    """The cached llama-server (LLAMA_SERVER overrides); skip without one, fail under CI."""
    given = os.environ.get("LLAMA_SERVER")
    if given:
        return given
    found = _cached_binary()
    if found:
        return found
    if os.environ.get("CI") == "true":
        pytest.fail("llama-server is not built: run scripts/llama_server.sh (make test does)")
    pytest.skip("llama-server is not built (scripts/llama_server.sh builds it once, ~20 min)")


def _cached_binary() -> str | None:
    # The script answers at once when its cache holds a working binary; it builds only when asked to.
    version = next(line.split('"')[1] for line in SCRIPT.read_text().splitlines() if line.startswith("VERSION="))
    roots = [os.environ.get("LLAMA_SERVER_CACHE"), "/var/cache/infermon",
             str(Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "infermon")]
    for root in filter(None, roots):
        binary = Path(root) / f"llama-server-{version}" / "bin" / "llama-server"
        if binary.is_file() and os.access(binary, os.X_OK):
            return str(binary)
    return shutil.which("llama-server")


def vocabulary() -> tuple[list[str], list[float], list[int]]:
    """Tokens, scores and types: controls, '▁' for a space, printable ASCII, newline, letter pairs."""
    import gguf

    tokens = ["<unk>", "<s>", "</s>", IM_START, IM_END]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL,
             gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    singles = ["▁", *(c for c in string.printable if c not in string.whitespace)]
    pairs = [a + b for a in "etaoinsrhl" for b in "etaoinsrhldcu"] + ["▁" + c for c in string.ascii_lowercase]
    tokens += [*singles, "<0x0A>", *pairs]
    types += [gguf.TokenType.NORMAL] * len(singles) + [gguf.TokenType.BYTE] + [gguf.TokenType.NORMAL] * len(pairs)
    # SPM merges the highest-scoring piece first: pairs before single characters.
    scores = [0.0] * 5 + [-100.0] * len(singles) + [-100.0] + [-10.0] * len(pairs)
    return tokens, scores, [int(t) for t in types]


def tiny_model(path: Path, seed: int = 0) -> Path:
    """Write a random-weight llama GGUF model (F32) to `path`."""
    import gguf

    tokens, scores, types = vocabulary()
    rng = np.random.default_rng(seed)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name(MODEL_NAME)
    writer.add_context_length(4096)
    writer.add_embedding_length(EMBED)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(HEADS)
    writer.add_rope_dimension_count(EMBED // HEADS)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(tokens.index(IM_END))
    writer.add_add_bos_token(False)
    writer.add_add_space_prefix(False)
    writer.add_chat_template(CHATML)

    def weight(*shape: int) -> np.ndarray:  # numpy shape = ggml's dimensions reversed
        return (rng.standard_normal(shape) * 0.2).astype(np.float32)

    vocab = len(tokens)
    writer.add_tensor("token_embd.weight", weight(vocab, EMBED))
    writer.add_tensor("output_norm.weight", np.ones(EMBED, dtype=np.float32))
    writer.add_tensor("output.weight", weight(vocab, EMBED))
    for layer in range(LAYERS):
        block = f"blk.{layer}"
        writer.add_tensor(f"{block}.attn_norm.weight", np.ones(EMBED, dtype=np.float32))
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            writer.add_tensor(f"{block}.{name}.weight", weight(EMBED, EMBED))
        writer.add_tensor(f"{block}.ffn_norm.weight", np.ones(EMBED, dtype=np.float32))
        writer.add_tensor(f"{block}.ffn_gate.weight", weight(FFN, EMBED))
        writer.add_tensor(f"{block}.ffn_up.weight", weight(FFN, EMBED))
        writer.add_tensor(f"{block}.ffn_down.weight", weight(EMBED, FFN))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


class LlamaServer:
    """`llama-server --metrics` on a free loopback port; started on enter, stopped by pid on exit."""

    def __init__(self, binary: str, model: Path, log: Path | None = None, startup_seconds: float = 60.0,
                 slots: int = 1, metrics: bool = True) -> None:
        self.binary, self.model, self.slots = binary, model, slots  # slots: -np, requests run at once
        self.metrics_flag = ["--metrics"] if metrics else []  # without it, /metrics answers 501
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log or model.with_suffix(".log")
        self.startup_seconds = startup_seconds
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> LlamaServer:
        command = [self.binary, "-m", str(self.model), "--host", "127.0.0.1", "--port", str(self.port),
                   *self.metrics_flag, "--alias", MODEL_NAME, "-c", "4096", "-np", str(self.slots), "-t", "1",
                   "-ngl", "0", "--no-warmup", "--seed", "1", "-n", str(DEFAULT_MAX_TOKENS)]
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        self._wait_healthy()
        return self

    def _wait_healthy(self) -> None:
        assert self.process is not None
        try:
            wait_healthy(self.process, f"{self.url}/health", self.startup_seconds, "llama-server", self.log_tail)
        except RuntimeError:
            self.stop()
            raise

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:]) if self.log.exists() else ""

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def metrics(self) -> str:
        return httpx.get(f"{self.url}/metrics", timeout=10).text


def serve_tiny_model(tmp_path_factory: pytest.TempPathFactory, name: str, slots: int = 1) -> Iterator[LlamaServer]:
    """A module fixture's body: the built binary serving a fresh tiny model until the module ends."""
    directory: Path = tmp_path_factory.mktemp(name)
    with LlamaServer(llama_server_binary(), tiny_model(directory / "tiny.gguf"), slots=slots) as running:
        yield running
