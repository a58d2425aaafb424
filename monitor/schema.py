"""Every table of the store on one `MetaData`: what the migrations must produce.

Each layer keeps its tables beside its code; importing them here puts them all on the store's
declarative `Base`, for autogenerate and the test that compares models with migrations.
`python -m monitor.schema "what changed"` writes the next migration from them.
"""

from __future__ import annotations

from monitor.alerting import store as _alerting_tables  # noqa: F401  (alert states, the outbox)
from monitor.cost import store as _cost_tables  # noqa: F401  (spend totals, $/token baseline samples)
from monitor.history import store as _history_tables  # noqa: F401  (the trend rules' 5-minute points, by day)
from monitor.quality import store as _quality_tables  # noqa: F401  (request log, runs, judgments)
from monitor.service import baseline as _service_tables  # noqa: F401  (the service baselines' points)
from monitor.store.models import Base

metadata = Base.metadata


if __name__ == "__main__":
    import sys

    from monitor.store.migrate import new_revision

    new_revision(" ".join(sys.argv[1:]) or "schema change", metadata)
