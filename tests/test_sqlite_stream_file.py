"""The SQLite chunk stream's file: reads on the primary key alone, and files from before.

Batches are found by ``(stream_id, first_offset)`` only; the index ``chunk_batches_by_last``
of older releases is dropped when a backend opens their file, safely while other processes
open it or append, and an older process still using the file goes on working without it.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from durable_turns.sqlite_wal import connect_wal
from durable_turns.streams.base import CHUNK
from durable_turns.streams.sqlite import _APPEND_STATE, _READ, SCHEMA, SQLiteStreamBackend

OLD_INDEX = (
    "CREATE INDEX IF NOT EXISTS chunk_batches_by_last ON chunk_batches (stream_id, last_offset);"
)
OLD_SCHEMA = SCHEMA.replace("DROP INDEX IF EXISTS chunk_batches_by_last;", OLD_INDEX)
OLD_READ = (  # an older release's read, on its index
    "SELECT first_offset, body FROM chunk_batches WHERE stream_id = ?"
    " AND last_offset > ? ORDER BY last_offset LIMIT ?"
)


class OldBackend(SQLiteStreamBackend):
    """An older release's backend, as far as the file is concerned: it creates the index."""

    schema = OLD_SCHEMA


def _indexes(path: Path) -> set[str]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'").fetchall()
    return {row[0] for row in rows}


def _event(n: int) -> dict[str, object]:
    return {"type": CHUNK, "data": {"n": n}}


def test_the_queries_use_the_primary_key_and_scan_no_table() -> None:
    conn = sqlite3.connect(":memory:")
    conn.executescript(SCHEMA)
    for sql, params in ((_READ, ("s", 3, -1)), (_APPEND_STATE, ("s", "w"))):
        plan = [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params)]
        batches = [s for s in plan if "chunk_batches" in s or s.startswith("SEARCH b ")]
        assert batches and all(
            "USING" in step and "sqlite_autoindex_chunk_batches_1" in step for step in batches
        ), plan
        assert not any(step.startswith("SCAN chunk_batches") for step in plan), plan
        assert not any("TEMP B-TREE" in step for step in plan), plan


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 6), max_size=12),
    other=st.lists(st.integers(1, 6), max_size=4),
    after=st.integers(-3, 45),
    limit=st.one_of(st.just(-1), st.integers(0, 8)),
)
def test_a_read_finds_exactly_the_batches_the_old_index_found(
    sizes: list[int], other: list[int], after: int, limit: int
) -> None:
    conn = sqlite3.connect(":memory:")
    conn.executescript(OLD_SCHEMA)
    # two streams' batches interleaved, each stream's contiguous from 0
    for sid, batch_sizes in (("s", sizes), ("r", other), ("t", sizes[:2])):
        first = 0
        for size in batch_sizes:
            conn.execute(
                "INSERT INTO chunk_batches VALUES (?, ?, ?, ?, ?)",
                (sid, first, first + size - 1, f"{sid}{first}", time.time()),
            )
            first += size
    for sid in ("s", "r", "t", "none"):
        old = conn.execute(OLD_READ, (sid, after, limit)).fetchall()
        assert conn.execute(_READ, (sid, after, limit)).fetchall() == old


@settings(max_examples=30, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 5), min_size=1, max_size=8),
    reads=st.lists(
        st.tuples(st.integers(-2, 30), st.one_of(st.none(), st.integers(1, 7))), max_size=6
    ),
)
def test_read_with_after_and_limit_returns_exactly_the_events_past_after(
    sizes: list[int], reads: list[tuple[int, int | None]]
) -> None:
    async def run() -> None:
        async with SQLiteStreamBackend(":memory:") as backend:
            n = 0
            for size in sizes:
                assert await backend.append("s", [_event(n + i) for i in range(size)]) == (
                    n + size - 1
                )
                n += size
            full = await backend.read("s")
            assert [(e.offset, e.data["n"]) for e in full] == [(i, i) for i in range(n)]
            for after, limit in reads:
                want = full[max(after + 1, 0) :]
                if limit is not None:
                    want = want[:limit]
                assert await backend.read("s", after, limit) == want

    asyncio.run(run())


async def test_an_older_file_opens_reads_the_same_and_appends(tmp_path: Path) -> None:
    path = tmp_path / "chunks.db"
    async with OldBackend(path) as old:
        for seq, size in enumerate((1, 3, 2, 4), 1):
            await old.append("s", [_event(size)] * size, owner="run", writer="w", seq=seq)
        await old.append("other", [_event(0)] * 2)
        before = {
            (after, limit): await old.read("s", after, limit)
            for after in range(-1, 11)
            for limit in (None, 1, 3)
        }
    assert "chunk_batches_by_last" in _indexes(path)

    # an older release's process, still reading the file on its index
    elder = sqlite3.connect(path, isolation_level=None)
    assert len(elder.execute(OLD_READ, ("s", 2, -1)).fetchall()) == 3

    async with SQLiteStreamBackend(path) as backend:
        assert "chunk_batches_by_last" not in _indexes(path)
        for (after, limit), events in before.items():
            assert await backend.read("s", after, limit) == events
        assert await backend.last_offset("s") == 9
        assert await backend.append("s", [_event(5)] * 2, owner="run", writer="w", seq=5) == 11
        assert await backend.append("s", [_event(5)] * 2, owner="run", writer="w", seq=5) == 11
        assert [e.offset for e in await backend.read("s", 8)] == [9, 10, 11]
        # the older process's statements go on, without the index
        assert [row[0] for row in elder.execute(OLD_READ, ("s", 2, -1))] == [1, 4, 6, 10]
        elder.execute(
            "INSERT INTO chunk_batches VALUES ('s', 12, 12, ?, ?)", ('[{"type": "chunk"}]', 0.0)
        )
        assert [e.offset for e in await backend.read("s", 10)] == [11, 12]
    elder.close()


async def test_openers_drop_the_old_index_while_others_open_and_append(tmp_path: Path) -> None:
    path = tmp_path / "chunks.db"
    async with OldBackend(path) as old:
        await old.append("s", [_event(0)])
        appending = True

        async def append() -> int:
            n = 0
            while appending:
                await old.append("s", [_event(n)])
                n += 1
                await asyncio.sleep(0)
            return n

        appender = asyncio.create_task(append())
        # several openers at once, each its own connection (SQLite's locks are per
        # connection, as between processes); the file's write lock is busy meanwhile
        openers = [SQLiteStreamBackend(path) for _ in range(4)]
        await asyncio.gather(*(b.open() for b in openers))
        appending = False
        appended = await appender
        try:
            assert "chunk_batches_by_last" not in _indexes(path)
            offsets = [e.offset for e in await openers[0].read("s")]
            assert offsets == list(range(appended + 1))
            await openers[1].append("s", [_event(-1)])
            assert await old.last_offset("s") == appended + 1
        finally:
            for b in openers:
                await b.close()


def test_connect_wal_waits_for_the_write_lock_to_drop_the_index(tmp_path: Path) -> None:
    path = str(tmp_path / "chunks.db")
    connect_wal(path, OLD_SCHEMA).close()
    holder = connect_wal(path, OLD_SCHEMA)
    holder.execute("BEGIN IMMEDIATE")  # another process's write, as it were
    try:
        with ThreadPoolExecutor(1) as pool:
            opening = pool.submit(connect_wal, path, SCHEMA)
            time.sleep(0.2)
            assert not opening.done()  # waiting for the lock (busy timeout), not failed
            holder.execute("COMMIT")
            opening.result(10).close()
    finally:
        holder.close()
    assert "chunk_batches_by_last" not in _indexes(Path(path))
