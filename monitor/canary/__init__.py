"""The canary: a synthetic user that streams a small chat completion through the OpenAI-compatible
API on a schedule and measures what users see (TTFT, TPOT, end-to-end, outcome) from the client's
side, where a gateway, a load balancer or a broken network path shows and the engine's own
histograms are blind.

probe.py: one probe's I/O (the openai SDK); outcome.py: pure classification and numbers;
collector.py: scheduling and state; render.py: metric families.
"""

CANARY_HEADER = "X-Infermon-Canary"  # on every probe request, value: the probe's name
