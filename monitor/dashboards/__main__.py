"""`python -m monitor.dashboards [ROOT]`: rewrite the generated dashboards and deploy files under ROOT."""

from __future__ import annotations

import sys
from pathlib import Path

from monitor.dashboards.generated import write_all

if __name__ == "__main__":
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[2]
    for path in write_all(root):
        print(path)
