"""A turn's out-of-band chunk stream, chosen by URL.

``sqlite:///rel.db`` / ``sqlite:////abs.db`` (as the transcript store), ``redis://host:port/db``
(or ``rediss://``; optional ``?prefix=…&ttl=SECONDS&maxlen=BATCHES``), ``memory://[name]``
for unit tests, and ``none`` or empty for no stream at all.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from durable_turns.store.base import mask_url
from durable_turns.streams.base import (
    AGENT_CHUNK,
    CHUNK,
    RECOVERING,
    RESET,
    STEP_FINISH,
    STEP_START,
    TOOL_RESULT,
    TOOL_WAIT,
    TURN_FINISH,
    ChunkPublisher,
    ChunkStreamBackend,
    MemoryBackend,
    StreamClaim,
    StreamEvent,
    StreamNotOwned,
    StreamUnavailable,
    encode_event,
    live_events,
)

_REDIS_OPTIONS = frozenset({"prefix", "ttl", "maxlen", "block_ms"})
"""Query parameters the backend takes; the rest go to the redis client (e.g. password)."""


def open_stream_backend(url: str | None) -> ChunkStreamBackend | None:
    """Build (not yet open) the backend a URL names; None when streaming is disabled."""
    url = (url or "").strip()
    if url.lower() in ("", "none", "off", "disabled"):
        return None
    if url.startswith("sqlite://"):
        from durable_turns.sqlite_wal import sqlite_path
        from durable_turns.streams.sqlite import SQLiteStreamBackend

        return SQLiteStreamBackend(sqlite_path(url))
    if url.startswith(("redis://", "rediss://")):
        try:
            from durable_turns.streams.redis import RedisStreamBackend
        except ImportError as e:  # pragma: no cover - depends on the install
            raise ValueError(
                "a Redis chunk stream needs the 'redis' extra: pip install 'durable-turns[redis]'"
            ) from e
        parts = urlsplit(url)
        query = parse_qsl(parts.query, keep_blank_values=True)
        ours = {k: v for k, v in query if k in _REDIS_OPTIONS}
        rest = [(k, v) for k, v in query if k not in _REDIS_OPTIONS]
        client_url = urlunsplit(parts._replace(query=urlencode(rest)))
        return RedisStreamBackend(
            client_url,
            prefix=ours.get("prefix", "turns:chunks:"),
            ttl_s=int(ours.get("ttl", 24 * 3600)),
            maxlen=int(ours.get("maxlen", 10_000)),
            block_ms=int(ours.get("block_ms", 1000)),
        )
    if url.startswith("memory://"):
        return MemoryBackend(url.removeprefix("memory://"))
    raise ValueError(
        f"unknown chunk stream URL {mask_url(url)!r}: use sqlite:///PATH, redis://HOST:PORT/DB,"
        " memory:// or none"
    )


__all__ = [
    "AGENT_CHUNK",
    "CHUNK",
    "RECOVERING",
    "RESET",
    "STEP_FINISH",
    "STEP_START",
    "TOOL_RESULT",
    "TOOL_WAIT",
    "TURN_FINISH",
    "ChunkPublisher",
    "ChunkStreamBackend",
    "MemoryBackend",
    "StreamClaim",
    "StreamEvent",
    "StreamNotOwned",
    "StreamUnavailable",
    "encode_event",
    "live_events",
    "open_stream_backend",
]
