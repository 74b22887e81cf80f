"""SQLite chunk streams: one row per batch in a WAL file that workers and readers share.

The embedded default, needing no server. Offsets are allocated inside a ``BEGIN IMMEDIATE``
transaction (the file's write lock), so appends from different processes serialise and
never collide; WAL lets readers read while a writer appends, and each committed append
wakes the readers that follow the file (``streams.wakeup``), so none of them polls. Appends
and reads run at once when the file is free and on a worker thread when it is busy, like the
transcript store's transactions (``sqlite_wal.SQLiteFile``).

A process's appends are group-committed (``streams.groups``): those made within one turn
of the event loop (a worker streaming many turns makes one per token per turn), or while
the group waits for :data:`~durable_turns.streams.groups.COMMIT_INTERVAL_S` since the last
one began, share one write transaction and one wake-up datagram per reading process, each
still checked and numbered as if alone.

A stream's owner is a row of ``chunk_claims``, read and written in the append's write
transaction (``streams.base.claim_stream``); a file from before claims gets the table when
a backend opens it, and its streams count as unclaimed.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
import time
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from durable_turns.errors import StreamNotOwned
from durable_turns.sqlite_wal import SQLiteFile
from durable_turns.streams.base import (
    MARK_TTL_S,
    ChunkStreamBackend,
    StreamClaim,
    StreamEvent,
    claim_stream,
    decode_batch,
    encode_batch,
    visible_after,
)
from durable_turns.streams.groups import COMMIT_INTERVAL_S, AppendGroups, QueuedAppend
from durable_turns.streams.wakeup import WakeChannel

SCHEMA = """
CREATE TABLE IF NOT EXISTS chunk_batches (
    stream_id TEXT NOT NULL,
    first_offset INTEGER NOT NULL,
    last_offset INTEGER NOT NULL,
    body TEXT NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (stream_id, first_offset)
);
DROP INDEX IF EXISTS chunk_batches_by_last;
CREATE TABLE IF NOT EXISTS chunk_claims (
    stream_id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    by_conversation INTEGER NOT NULL,
    since INTEGER NOT NULL,
    claimed_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS chunk_writers (
    stream_id TEXT NOT NULL,
    writer TEXT NOT NULL,
    seq INTEGER NOT NULL,
    last_offset INTEGER NOT NULL,
    PRIMARY KEY (stream_id, writer)
);
CREATE TABLE IF NOT EXISTS chunk_cancels (
    mark TEXT PRIMARY KEY,
    marked_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS chunk_workers (
    worker TEXT PRIMARY KEY,
    beats INTEGER NOT NULL,
    beat_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS chunk_attempts (
    worker TEXT NOT NULL,
    attempt TEXT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (worker, attempt)
);
"""
"""``chunk_writers``: each writer's last batch number per stream (idempotent appends);
``chunk_cancels``: cancel marks (``streams.cancel``), a row per cancelled request;
``chunk_workers`` and ``chunk_attempts``: worker liveness (``streams.liveness``)."""


class SQLiteStreamBackend(SQLiteFile, ChunkStreamBackend):
    """Batches as rows ``(stream_id, first_offset, last_offset, body)``; readers are woken."""

    schema = SCHEMA
    keeps_marks = True
    keeps_liveness = True

    def __init__(self, path: str | Path) -> None:
        super().__init__(path)
        self._wake = None if self.path == ":memory:" else WakeChannel(self.path)
        self._groups = AppendGroups(self._commit_group, self._woken, COMMIT_INTERVAL_S)
        self._checkpointer: sqlite3.Connection | None = None
        """A connection for checkpoints only (``_checkpoint``), opened by the first."""
        self._checkpointing = threading.Lock()

    def wakeups(
        self, stream_id: str
    ) -> contextlib.AbstractAsyncContextManager[asyncio.Event | None]:
        if self._wake is None:
            return contextlib.nullcontext(None)
        return self._wake.listen(stream_id)

    async def close(self) -> None:
        await self._groups.drain()  # the appends already queued are committed first
        if self._wake is not None:
            self._wake.close()
        await super().close()  # waits for a running checkpoint
        if self._checkpointer is not None:
            conn, self._checkpointer = self._checkpointer, None
            await asyncio.to_thread(conn.close)

    async def _checkpoint(self) -> None:
        """Copy the log into the file on a connection of its own, on a thread: a PASSIVE
        checkpoint waits on no writer, and no append waits on it (on the appends'
        connection, every append would wait behind it, and it syncs the disk: tens of ms)."""
        if self._conn is None:
            return

        def run() -> None:
            with self._checkpointing:
                if self._checkpointer is None:
                    self._checkpointer = sqlite3.connect(
                        self.path, check_same_thread=False, isolation_level=None
                    )
                self._checkpointer.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()

        try:
            await asyncio.to_thread(run)
        except sqlite3.Error:
            pass  # the next one catches up; the log is never lost, only longer

    async def append(
        self,
        stream_id: str,
        events: Sequence[Mapping[str, Any]],
        *,
        owner: str | None = None,
        by_conversation: bool = False,
        writer: str | None = None,
        seq: int = 0,
    ) -> int:
        if not events:
            return await self.last_offset(stream_id)
        queued = QueuedAppend(
            stream_id, encode_batch(events), len(events), owner, by_conversation, writer, seq
        )
        return await self._groups.submit(queued)

    async def _commit_group(self, group: list[QueuedAppend]) -> list[int | Exception]:
        """A group's appends (``streams.groups``) in one write transaction: a write
        transaction holds the file's write lock, so no other process allocates meanwhile."""
        results: list[int | Exception] = await self._transaction(
            lambda conn: [_append_one(conn, q) for q in group], write=True
        )
        return results

    def _woken(self, streams: dict[str, None]) -> None:
        if self._wake is not None:
            self._wake.notify_many(streams)

    async def _query(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        return await self._call(lambda conn: conn.execute(sql, params).fetchall(), write=False)

    async def read(
        self,
        stream_id: str,
        after: int = -1,
        limit: int | None = None,
        *,
        by_conversation: bool = False,
    ) -> list[StreamEvent]:
        def read(conn: sqlite3.Connection) -> tuple[int | None, list[Any]]:
            start = visible_after(_claim(conn, stream_id), after, by_conversation)
            if start is None:
                return None, []
            # Each row holds at least one event past ``start``, so ``limit`` rows are enough.
            params = (stream_id, start, -1 if limit is None else limit)
            return start, conn.execute(_READ, params).fetchall()

        start, rows = await self._transaction(read, write=False)  # one snapshot
        if start is None:
            return []
        after = start
        out: list[StreamEvent] = []
        for first, body in rows:
            out.extend(decode_batch(first, body, after))
        return out if limit is None else out[:limit]

    async def last_offset(self, stream_id: str) -> int:
        rows = await self._query(
            "SELECT last_offset FROM chunk_batches WHERE stream_id = ?"
            " ORDER BY first_offset DESC LIMIT 1",
            (stream_id,),
        )
        return int(rows[0][0]) if rows else -1

    async def claim(self, stream_id: str) -> StreamClaim | None:
        return await self._call(lambda conn: _claim(conn, stream_id), write=False)

    async def mark_cancel(self, key: str) -> bool:
        def mark(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT OR REPLACE INTO chunk_cancels (mark, marked_at) VALUES (?, ?)",
                (key, time.time()),
            )

        await self._transaction(mark, write=True)
        return True

    async def cancel_marks(self, keys: Collection[str]) -> set[str]:
        if not keys:
            return set()
        wanted = list(keys)
        sql = (  # one indexed lookup per key, in one read
            "SELECT mark FROM chunk_cancels WHERE marked_at > ? AND mark IN"
            f" ({','.join('?' * len(wanted))})"
        )
        rows = await self._query(sql, (time.time() - MARK_TTL_S, *wanted))
        return {row[0] for row in rows}

    async def beat(self, worker: str) -> None:
        def beat(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO chunk_workers (worker, beats, beat_at) VALUES (?, 1, ?)"
                " ON CONFLICT (worker) DO UPDATE SET beats = beats + 1, beat_at = excluded.beat_at",
                (worker, time.time()),
            )

        await self._transaction(beat, write=True)

    async def beats(self) -> dict[str, int]:
        rows = await self._query("SELECT worker, beats FROM chunk_workers", ())
        return {row[0]: int(row[1]) for row in rows}

    async def attempt_started(self, worker: str, key: str, body: str) -> None:
        def put(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT OR REPLACE INTO chunk_attempts (worker, attempt, body) VALUES (?, ?, ?)",
                (worker, key, body),
            )

        await self._transaction(put, write=True)

    async def attempt_ended(self, worker: str, key: str) -> None:
        await self.take_attempt(worker, key)

    async def attempts_of(self, worker: str) -> dict[str, str]:
        rows = await self._query(
            "SELECT attempt, body FROM chunk_attempts WHERE worker = ?", (worker,)
        )
        return {row[0]: row[1] for row in rows}

    async def take_attempt(self, worker: str, key: str) -> bool:
        def take(conn: sqlite3.Connection) -> bool:
            cur = conn.execute(
                "DELETE FROM chunk_attempts WHERE worker = ? AND attempt = ?", (worker, key)
            )
            return cur.rowcount > 0

        return await self._transaction(take, write=True)

    async def forget_worker(self, worker: str) -> None:
        def forget(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM chunk_workers WHERE worker = ?", (worker,))
            conn.execute("DELETE FROM chunk_attempts WHERE worker = ?", (worker,))

        await self._transaction(forget, write=True)

    async def delete(self, stream_id: str) -> None:
        def delete(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM chunk_batches WHERE stream_id = ?", (stream_id,))
            conn.execute("DELETE FROM chunk_writers WHERE stream_id = ?", (stream_id,))
            conn.execute("DELETE FROM chunk_claims WHERE stream_id = ?", (stream_id,))

        await self._transaction(delete, write=True)

    async def trim(self, older_than_s: float) -> int:
        """Delete whole streams whose last batch is older than ``older_than_s``.

        Whole streams only, so a late reader never meets a gap at the head of a stream, and
        an idle stream's offsets are never restarted under a reader that still holds one.
        """
        cutoff = time.time() - older_than_s
        return await self._on_thread(lambda conn: self._trim(conn, cutoff))  # a long one

    @staticmethod
    def _trim(conn: sqlite3.Connection, cutoff: float) -> int:
        cur = conn.execute(
            "DELETE FROM chunk_batches WHERE stream_id IN (SELECT stream_id"
            " FROM chunk_batches GROUP BY stream_id HAVING MAX(created_at) < ?)",
            (cutoff,),
        )
        conn.execute(  # the claims of the streams that are gone
            "DELETE FROM chunk_claims WHERE claimed_at < ? AND stream_id NOT IN"
            " (SELECT stream_id FROM chunk_batches)",
            (cutoff,),
        )
        conn.execute(
            "DELETE FROM chunk_writers WHERE stream_id NOT IN"
            " (SELECT DISTINCT stream_id FROM chunk_batches)"
        )
        conn.execute(
            "DELETE FROM chunk_cancels WHERE marked_at < ?",
            (min(cutoff, time.time() - MARK_TTL_S),),
        )
        return cur.rowcount


def _append_one(conn: sqlite3.Connection, q: QueuedAppend) -> int | StreamNotOwned:
    """One append inside its group's write transaction: its last offset, or the refusal
    (StreamNotOwned, raised before anything of it was written). What it checks (the
    writer's last batch, the stream's last offset, its claim) is one statement."""
    stream_id, writer = q.stream_id, q.writer
    seq, seen_last, last_offset, *claim_row = conn.execute(
        _APPEND_STATE, (stream_id, writer)
    ).fetchone()
    if writer is not None and seq is not None and seq >= q.seq:
        return int(seen_last)  # applied before: its answer was lost
    first = last_offset + 1 if last_offset is not None else 0
    last = first + q.n - 1
    if q.owner:
        row = None if claim_row[0] is None else tuple(claim_row)
        if row is None or row[0] != q.owner:  # the owner appending again needs no check
            current = _claim_of(row)
            try:
                claim = claim_stream(stream_id, current, q.owner, q.by_conversation, first)
            except StreamNotOwned as e:
                return e
            if claim is not None and claim != current:
                conn.execute(
                    "INSERT OR REPLACE INTO chunk_claims"
                    " (stream_id, owner, by_conversation, since, claimed_at)"
                    " VALUES (?, ?, ?, ?, ?)",
                    (stream_id, claim.owner, int(claim.by_conversation), claim.since, time.time()),
                )
    conn.execute(
        "INSERT INTO chunk_batches (stream_id, first_offset, last_offset, body, created_at)"
        " VALUES (?, ?, ?, ?, ?)",
        (stream_id, first, last, q.body, time.time()),
    )
    if writer is not None:
        conn.execute(  # updated in place (a REPLACE deletes the row and inserts it again)
            "INSERT INTO chunk_writers (stream_id, writer, seq, last_offset) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (stream_id, writer)"
            " DO UPDATE SET seq = excluded.seq, last_offset = excluded.last_offset",
            (stream_id, writer, q.seq, last),
        )
    return last


_READ = (
    "SELECT first_offset, body FROM chunk_batches WHERE stream_id = ?1 AND first_offset >="
    " coalesce((SELECT first_offset FROM chunk_batches WHERE stream_id = ?1"
    "  AND first_offset <= ?2 ORDER BY first_offset DESC LIMIT 1), ?2)"
    " AND last_offset > ?2 ORDER BY first_offset LIMIT ?3"
)
"""A stream's batches holding offsets past ?2, in order, at most ?3 of them (-1: all),
found on the primary key alone: the batch holding ?2 (the last one beginning at or before
it) and those after it, less that one if it ends at ?2. Batches never overlap (each begins
after the stream's last), so these are exactly the batches ending past ?2."""

_APPEND_STATE = (
    "SELECT w.seq, w.last_offset,"
    " (SELECT b.last_offset FROM chunk_batches b WHERE b.stream_id = k.stream_id"
    "  ORDER BY b.first_offset DESC LIMIT 1),"
    " c.owner, c.by_conversation, c.since"
    " FROM (SELECT ? AS stream_id, ? AS writer) k"
    " LEFT JOIN chunk_writers w ON w.stream_id = k.stream_id AND w.writer = k.writer"
    " LEFT JOIN chunk_claims c ON c.stream_id = k.stream_id"
)
"""What an append checks, in one row: its writer's last batch and offset (NULL: none, or
no writer), the stream's last offset (NULL: empty) and its claim (NULL: unclaimed)."""


def _claim(conn: sqlite3.Connection, stream_id: str) -> StreamClaim | None:
    row = conn.execute(
        "SELECT owner, by_conversation, since FROM chunk_claims WHERE stream_id = ?",
        (stream_id,),
    ).fetchone()
    return _claim_of(row)


def _claim_of(row: tuple[Any, ...] | None) -> StreamClaim | None:
    if row is None:
        return None
    return StreamClaim(owner=row[0], by_conversation=bool(row[1]), since=int(row[2]))
