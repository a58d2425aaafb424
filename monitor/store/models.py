"""The declarative `Base` every layer's tables join (one MetaData, one set of migrations), and the
store's own table: collectors going down and coming back."""

from __future__ import annotations

from sqlalchemy import Float, Integer, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


class CollectorEvent(Base):
    """A collector (or one of its targets) went down or came back: when, and why."""

    __tablename__ = "collector_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    ts: Mapped[float] = mapped_column(Float, index=True)
    collector: Mapped[str] = mapped_column(String(64))
    target: Mapped[str] = mapped_column(String(256))
    state: Mapped[str] = mapped_column(String(16))  # "down" | "up"
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
