"""Golden /metrics pages: compare (UPDATE_GOLDEN=1 rewrites), lint with promtool, list families."""

import os
import subprocess
from pathlib import Path

from tests.conftest import require_binary


def assert_golden(path: Path, text: str) -> None:
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text()


def assert_promtool_accepts(path: Path) -> None:
    promtool = require_binary("promtool")
    result = subprocess.run([promtool, "check", "metrics"], input=path.read_text(),
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def emitted_families(path: Path) -> set[str]:
    return {line.split()[2] for line in path.read_text().splitlines() if line.startswith("# TYPE")}
