"""The Prometheus rule files' language: the expression subset, the rules, their templates, their thresholds.

Below the layers: the alert evaluator, the dashboards and the quality report all read the rule
files through it, and it imports nothing of theirs.
"""
