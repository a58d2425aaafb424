"""The generated references in docs/: every exported metric (metrics.py, from the catalog) and every
configuration key (configuration.py, from the settings model). Each is a `python -m` generator, and a
test fails when the checked-in page differs from what it generates."""
