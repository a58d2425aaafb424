"""The tests' private PostgreSQL cluster: started as a non-root user, removed with its process at
the end, and a missing server skips locally but fails in CI."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from tests.support import postgres


def test_cluster_runs_unprivileged_and_is_removed_with_its_process() -> None:
    with postgres.postgres_server() as url:
        engine = create_engine(url)
        with engine.connect() as conn:
            data = Path(conn.execute(text("SHOW data_directory")).scalar_one())
            socket_dir = conn.execute(text("SHOW unix_socket_directories")).scalar_one()
        engine.dispose()
        pid = int((data / "postmaster.pid").read_text().split()[0])
        assert data.stat().st_uid != 0
        assert Path(socket_dir) == data.parent  # the unix socket stays inside the temp folder
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not data.parent.exists()


@pytest.mark.parametrize(("ci", "outcome"), [("true", pytest.fail.Exception), (None, pytest.skip.Exception)])
def test_missing_server_fails_in_ci_and_skips_elsewhere(monkeypatch: pytest.MonkeyPatch, ci: str | None,
                                                        outcome: type[BaseException]) -> None:
    monkeypatch.setattr(postgres, "_bindir", lambda: None)
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    with pytest.raises(outcome, match="postgresql"), postgres.postgres_server():
        pass
