"""A benchmark run as its operator runs it, `python -m bench.<name> ...`, for the tests that hold a
bench to what it measures and prints: the suite reaches `bench/` only this way, never by import."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_bench(name: str, *args: str, timeout: float = 300.0, expect: int = 0) -> str:
    """Run `bench.<name>` from the repository's root; its stdout, once it exited with `expect`."""
    done = subprocess.run([sys.executable, "-m", f"bench.{name}", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    assert done.returncode == expect, f"bench.{name} {' '.join(args)} exited {done.returncode}:\n" \
                                      f"{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done.stdout
