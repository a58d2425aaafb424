"""Persistent history (SQLAlchemy): SQLite embedded, PostgreSQL at fleet scale."""
