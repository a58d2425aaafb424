"""The suite's support (as CPython's `test.support`): real servers, page farms, pages, forwarders,
scenario worlds and fixtures the tests share. Benchmarks under `bench/` may import from here; nothing
here, and no test, imports from `bench/` (tests/test_layout.py)."""
