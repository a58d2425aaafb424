"""Grafana dashboards and Kubernetes manifests generated from the metric catalog and alerts/*.yml.

`python -m monitor.dashboards` rewrites `dashboards/*.json` and the generated files under
`deploy/`; a test checks that the committed files are what this produces.
"""
