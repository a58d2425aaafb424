"""Alerting: the rule subset and its evaluator, the outbox, the receivers, the Alertmanager receiver."""
