"""The quality layer: a daily LLM-judge run over sampled responses, refusals, length drift."""
