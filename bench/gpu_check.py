"""`python -m bench.gpu_check`: does /metrics track the GPU? The check itself, and how to run it
on a device or on the H200 recording, is tests/support/gpu_check.py (the suite runs it on the
recording, tests/infra/test_gpu_check.py)."""

from __future__ import annotations

import contextlib
import sys

from tests.support.gpu_check import main

if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
