import os
import shutil
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


def require_binary(name: str) -> str:
    """The path of a real binary (prometheus, promtool); in CI a missing one fails the run."""
    path = shutil.which(name)
    if path is None:
        message = f"{name} not found: install the Debian package 'prometheus' (apt-get install prometheus)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path


@pytest.fixture(autouse=True)
def _memory_store(monkeypatch: pytest.MonkeyPatch) -> None:
    """Monitors built by tests keep their history in memory, not in ./infermon.db."""
    monkeypatch.setenv("INFERMON_STORAGE__URL", "sqlite://")
