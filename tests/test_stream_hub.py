"""One reader per stream per process: the hub, and the SQLite wake-ups by stream id."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from pathlib import Path
from typing import Any

import pytest

from durable_turns.streams import MemoryBackend, encode_event
from durable_turns.streams.hub import StreamHub
from durable_turns.streams.sqlite import SQLiteStreamBackend
from durable_turns.streams.wakeup import WakeChannel


async def test_subscribers_share_one_reader_and_see_the_same_events() -> None:
    backend = MemoryBackend()
    await backend.append("t", [encode_event("chunk", {"n": 0})])
    hub = StreamHub(backend)
    reads = 0
    real_read = backend.read

    async def counted(*args, **kw):  # type: ignore[no-untyped-def]
        nonlocal reads
        reads += 1
        return await real_read(*args, **kw)

    backend.read = counted  # type: ignore[method-assign]
    async with hub.open("t") as a, hub.open("t") as b:
        assert hub.followed == 1
        assert [e.offset for e in a.present] == [e.offset for e in b.present] == [0]
        await backend.append("t", [encode_event("chunk", {"n": 1}), encode_event("turn-finish")])
        got_a = [e.offset async for e in a.live(idle_timeout=5)]
        got_b = [e.offset async for e in b.live(idle_timeout=5)]
        assert got_a == got_b == [1, 2]
        async with hub.open("t") as late:  # joins the same reader: all of it is present
            assert [e.offset for e in late.present] == [0, 1, 2]
    assert hub.followed == 0, "the reader goes with its last subscriber"
    assert reads < 10, f"one reader for every subscriber ({reads} reads)"


async def test_live_ends_quietly_after_the_idle_timeout() -> None:
    hub = StreamHub(MemoryBackend())
    async with hub.open("quiet") as sub:
        assert [e async for e in sub.live(idle_timeout=0.2)] == []


async def test_a_wake_up_names_its_stream(tmp_path: Path) -> None:
    channel = WakeChannel(str(tmp_path / "chunks.db"))
    writer = WakeChannel(str(tmp_path / "chunks.db"))
    async with channel.listen("a") as a, channel.listen("b") as b, channel.listen() as anything:
        assert a is not None and b is not None and anything is not None
        assert len(list(channel.folder.iterdir())) == 1, "one socket for the whole process"
        assert writer.notify("a") == 1
        await asyncio.wait_for(a.wait(), 5)
        await asyncio.wait_for(anything.wait(), 5)
        await asyncio.sleep(0.1)
        assert not b.is_set(), "another stream's append does not wake b"
        a.clear()
        anything.clear()
        writer.notify()  # no stream named (what earlier versions send): everyone
        await asyncio.wait_for(b.wait(), 5)
        await asyncio.wait_for(a.wait(), 5)
    assert list(channel.folder.iterdir()) == [], "the name file goes with the last follower"
    writer.close()


async def test_one_wake_up_names_many_streams(tmp_path: Path) -> None:
    """A group commit's wake-up: one datagram per reading process names every stream that
    grew (split when the names are long), and wakes exactly their followers."""
    channel = WakeChannel(str(tmp_path / "chunks.db"))
    writer = WakeChannel(str(tmp_path / "chunks.db"))
    names = [f"stream-{i}-" + "x" * 200 for i in range(40)]  # more than one datagram's worth
    async with contextlib.AsyncExitStack() as stack:
        woken = [await stack.enter_async_context(channel.listen(n)) for n in names]
        other = await stack.enter_async_context(channel.listen("other"))
        assert all(w is not None for w in woken) and other is not None
        assert writer.notify_many(names) == 1, "one reading process"
        for w in woken:
            assert w is not None
            await asyncio.wait_for(w.wait(), 5)
        await asyncio.sleep(0.1)
        assert not other.is_set(), "a stream not named is not woken"
        assert writer.notify_many([]) == 0
    writer.close()


async def test_sqlite_followers_of_other_streams_do_not_reread(tmp_path: Path) -> None:
    backend = SQLiteStreamBackend(tmp_path / "chunks.db")
    await backend.open()
    try:
        reads: dict[str, int] = {}
        real_read = backend.read

        async def counted(stream_id: str, *args, **kw):  # type: ignore[no-untyped-def]
            reads[stream_id] = reads.get(stream_id, 0) + 1
            return await real_read(stream_id, *args, **kw)

        backend.read = counted  # type: ignore[method-assign]

        async def follow(stream: str) -> list[int]:
            return [e.offset async for e in backend.follow(stream)]

        quiet = asyncio.create_task(follow("quiet"))
        busy = asyncio.create_task(follow("busy"))
        await asyncio.sleep(0.2)
        for i in range(50):
            await backend.append("busy", [encode_event("chunk", {"i": i})])
        await backend.append("busy", [encode_event("turn-finish")])
        assert len(await asyncio.wait_for(busy, 10)) == 51
        assert reads["quiet"] <= 3, f"woken by another stream's appends: {reads['quiet']} reads"
        quiet.cancel()
    finally:
        await backend.close()


async def test_a_writer_lists_the_readers_again_only_when_they_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer sends after every commit: it keeps the folder's listing while the folder is
    unchanged (and settled), and a reader that comes or goes is still seen at once."""
    from durable_turns.streams import wakeup

    listings = 0
    real_listdir = os.listdir

    def counted(path: Any) -> list[str]:
        nonlocal listings
        listings += 1
        return real_listdir(path)

    monkeypatch.setattr(wakeup.os, "listdir", counted)
    db = str(tmp_path / "chunks.db")
    first, second, writer = WakeChannel(db), WakeChannel(db), WakeChannel(db)
    async with first.listen("a") as a:
        assert a is not None
        old = time.time() - 10  # a folder that changed long ago: its listing is kept
        os.utime(first.folder, (old, old))
        assert writer.notify("a") == 1
        assert writer.notify("a") == 1
        assert listings == 1, "an unchanged folder is listed once"
        await asyncio.wait_for(a.wait(), 5)
        async with second.listen("a") as b:  # a new reader: the folder changed
            assert b is not None
            assert writer.notify("a") == 2, "the new reader is told at once"
            await asyncio.wait_for(b.wait(), 5)
        assert writer.notify("a") == 1, "the reader that left is not counted"
        assert listings == 3, "a recently changed folder is listed on every send"
    assert writer.notify("a") == 0
    writer.close()
