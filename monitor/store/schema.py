"""Every table of the store on one `MetaData`: what the migrations must produce."""

from __future__ import annotations

from monitor.store import alerting_state, baseline, cost, outbox, quality  # noqa: F401  (their tables join Base)
from monitor.store.models import Base

metadata = Base.metadata
