"""`python -m monitor.dashboards [ROOT]`: rewrite the generated dashboards and deploy files under ROOT."""

from __future__ import annotations

import argparse
from pathlib import Path

from monitor.dashboards.generated import write_all


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m monitor.dashboards",
        description="Rewrite the generated files (Grafana dashboards, recording and trend rules, deploy files) "
                    "under ROOT, and print each path written.")
    parser.add_argument("root", nargs="?", type=Path, default=Path(__file__).resolve().parents[2],
                        help="the project's root (default: this checkout)")
    args = parser.parse_args(argv)
    if not args.root.is_dir():
        parser.error(f"{args.root} is not a directory")
    for path in write_all(args.root):
        print(path)


if __name__ == "__main__":
    main()
