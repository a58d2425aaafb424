"""The cost layer: GPU prices x inventory x measured throughput -> spend, $/1M tokens, idle spend, budget."""
