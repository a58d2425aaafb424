"""The HTTP wire: one HTTP/1.1 client (`http1`) and one byte cap (`limits`) for every answer the
monitor reads from outside.

The scrapes of `infermon serve` and the bench's streamed requests run on `http1.Connections`;
everything else talks through httpx (the receivers, dcgm-exporter, the judge, Langfuse, version
probes, the history import; tests/test_layout.py names them), and where an httpx answer must be
bounded its body goes through the same `limits.ByteCap` (`limits.CappedStream`).
"""
