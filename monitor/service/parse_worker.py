"""A parse worker's process: `python -m monitor.service.parse_worker INDEX` (monitor.service.workers)."""

import sys

from monitor.service.workers import serve

if __name__ == "__main__":
    serve(int(sys.argv[1]))
