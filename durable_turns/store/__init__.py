"""Transcript stores, chosen by URL: ``sqlite:///path/file.db`` or ``postgresql://…``."""

from __future__ import annotations

from durable_turns.store.base import (
    StepRecord,
    StoreUnavailable,
    ToolCallRepair,
    ToolResultRecord,
    TranscriptStore,
    TurnNotOwned,
    TurnRecord,
    TurnState,
    mask_url,
)


def open_store(url: str) -> TranscriptStore:
    """Build (not yet open) the store a URL names."""
    if url.startswith("sqlite://"):
        from durable_turns.sqlite_wal import sqlite_path
        from durable_turns.store.sqlite import SQLiteStore

        return SQLiteStore(sqlite_path(url))
    if url.startswith(("postgres://", "postgresql://")):
        try:
            from durable_turns.store.postgres import PostgresStore
        except ImportError as e:  # pragma: no cover - depends on the install
            raise ValueError(
                "a PostgreSQL store needs the 'postgres' extra: pip install 'durable-turns[postgres]'"
            ) from e
        return PostgresStore(url)
    raise ValueError(
        f"unknown transcript store URL {mask_url(url)!r}: use sqlite:///PATH or postgresql://…"
    )


__all__ = [
    "StepRecord",
    "StoreUnavailable",
    "ToolCallRepair",
    "ToolResultRecord",
    "TranscriptStore",
    "TurnNotOwned",
    "TurnRecord",
    "TurnState",
    "mask_url",
    "open_store",
]
