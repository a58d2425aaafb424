"""inference-monitor: GPU, serving-engine, quality and cost monitoring for LLM inference."""

__version__ = "0.1.0"
