"""``sqlite_wal.SQLiteFile``: transactions at once when the file is free, on a thread when not.

The transcript store and the SQLite chunk stream share it. A free file's transaction runs on
the event loop's own thread (no trip to a worker thread); a file another process holds is
waited for on a worker thread while the loop goes on; the log is checkpointed on a thread
every ``CHECKPOINT_EVERY`` writes, so it never grows without bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from collections.abc import AsyncIterator
from pathlib import Path

from durable_turns.sqlite_wal import CHECKPOINT_EVERY, SQLiteFile
from durable_turns.store import TurnRecord
from durable_turns.store.sqlite import SQLiteStore
from durable_turns.streams.sqlite import SQLiteStreamBackend
from tests.support.probes import wait_until


def turn(n: int) -> TurnRecord:
    return TurnRecord(
        turn_id=f"c/turn-{n}", conversation_id="c", turn_number=n, request_id=f"r{n}", owner="o"
    )


@contextlib.asynccontextmanager
async def opened(file: SQLiteFile) -> AsyncIterator[list[int]]:
    """``file`` open, recording the thread of every statement it runs; closed after."""
    await file.open()
    threads: list[int] = []
    file._db().set_trace_callback(lambda _sql: threads.append(threading.get_ident()))
    try:
        yield threads
    finally:
        await file.close()


async def test_a_free_file_is_written_on_the_loops_own_thread(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "t.db")
    async with opened(store) as threads:
        await store.save_turn(turn(1))
        assert (await store.get_turn("c/turn-1")) is not None
        assert threads and set(threads) == {threading.get_ident()}


async def test_a_busy_file_is_waited_for_on_a_thread_while_the_loop_goes_on(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    stream = SQLiteStreamBackend(path)
    blocker = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.01)

    async with opened(stream) as threads:
        ticker = asyncio.create_task(tick())
        try:
            blocker.execute("BEGIN IMMEDIATE")  # another process's write lock, as it were
            event = {"type": "chunk", "data": {"i": 0}}
            append = asyncio.create_task(stream.append("s", [event]))
            await asyncio.sleep(0.3)
            assert not append.done()  # waiting for the lock, not failed
            assert ticks >= 10  # and not on the loop: the loop went on meanwhile
            blocker.execute("COMMIT")
            assert await asyncio.wait_for(append, 10) == 0
            assert threading.get_ident() in threads and len(set(threads)) == 2  # tried, waited
            assert [e.offset for e in await stream.read("s")] == [0]
        finally:
            ticker.cancel()
            blocker.close()


async def test_the_log_is_checkpointed_into_the_file_every_so_many_writes(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    stream = SQLiteStreamBackend(path)
    await stream.open()
    try:
        empty = path.stat().st_size
        for i in range(CHECKPOINT_EVERY * 2):
            await stream.append("s", [{"type": "chunk", "data": {"text": "x" * 2000, "i": i}}])
        # the checkpoint runs on a thread, after the write that asked for it
        await wait_until(lambda: path.stat().st_size > empty + CHECKPOINT_EVERY * 2000, 5)
    finally:
        await stream.close()
    reopened = SQLiteStreamBackend(path)
    await reopened.open()
    try:
        assert len(await reopened.read("s")) == CHECKPOINT_EVERY * 2
    finally:
        await reopened.close()
