"""Alembic migrations of every table (env.py, versions/). `monitor.store.migrate` runs them."""
