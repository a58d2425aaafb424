import pytest


@pytest.fixture(autouse=True)
def _file_store(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Quality tests keep their store in a real SQLite file (runs span several Store objects)."""
    monkeypatch.setenv("INFERMON_STORAGE__URL", f"sqlite:///{tmp_path / 'quality.db'}")
