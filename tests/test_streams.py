"""Contract tests for the chunk stream backends: in-process, SQLite and a real Redis.

Redis is at ``TURNS_TEST_REDIS_URL`` (default ``redis://127.0.0.1:6379/0``); each test uses
its own key prefix and deletes its keys. An unreachable Redis fails the Redis tests with a
message saying so; they are never skipped.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import sys
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from durable_turns.messages import TextDelta, ToolInputDelta, ToolInputStart
from durable_turns.streams import (
    CHUNK,
    RESET,
    STEP_FINISH,
    STEP_START,
    TURN_FINISH,
    ChunkPublisher,
    ChunkStreamBackend,
    StreamEvent,
    live_events,
    open_stream_backend,
)
from durable_turns.streams import base as stream_base
from durable_turns.streams.base import StreamClaim, StreamNotOwned
from durable_turns.streams.redis import RedisStreamBackend
from durable_turns.streams.sqlite import SQLiteStreamBackend
from tests.support.probes import wait_until

REDIS_URL = os.environ.get("TURNS_TEST_REDIS_URL") or "redis://127.0.0.1:6379/0"
ROOT = Path(__file__).resolve().parents[1]
WAIT = 30.0


async def _redis_prefix() -> AsyncIterator[str]:
    """A fresh key prefix on a reachable Redis; its keys are deleted afterwards."""
    client = aioredis.Redis.from_url(REDIS_URL, socket_connect_timeout=5)
    try:
        await client.ping()
    except Exception as e:
        await client.aclose()
        pytest.fail(
            f"Redis at {REDIS_URL} is not reachable ({e!r}); start it (redis-server) or set"
            " TURNS_TEST_REDIS_URL. The Redis chunk stream tests are not skipped.",
            pytrace=False,
        )
    prefix = f"test:chunks:{uuid.uuid4().hex}:"
    try:
        yield prefix
    finally:
        keys = [k async for k in client.scan_iter(match=f"{prefix}*")]
        if keys:
            await client.delete(*keys)
        await client.aclose()


@pytest.fixture(params=["memory", "sqlite", "redis"])
async def url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    if request.param == "memory":
        yield f"memory://{uuid.uuid4().hex}"
    elif request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/chunks.db"  # tmp_path is absolute: sqlite:////…
    else:
        async for prefix in _redis_prefix():
            yield f"{REDIS_URL}?prefix={prefix}&ttl=600&maxlen=1000"


@pytest.fixture(params=["sqlite", "redis"])
async def shared_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """A backend that several processes can share."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/chunks.db"
    else:
        async for prefix in _redis_prefix():
            yield f"{REDIS_URL}?prefix={prefix}&ttl=600"


async def _open(url: str) -> ChunkStreamBackend:
    backend = open_stream_backend(url)
    assert backend is not None
    await backend.open()
    return backend


@pytest.fixture
async def backend(url: str) -> AsyncIterator[ChunkStreamBackend]:
    b = await _open(url)
    try:
        yield b
    finally:
        await b.close()


def _sid() -> str:
    return f"turn-{uuid.uuid4().hex[:8]}"


async def _publish_turn(
    backend: ChunkStreamBackend, sid: str, n: int, *, every: int = 10, pause: float = 0.0
) -> list[str]:
    """A one-step turn of ``n`` text deltas, published as a model step would; its texts."""
    texts = [f"t{i} " for i in range(n)]
    async with ChunkPublisher(backend, sid, step=0, attempt=1) as pub:
        await pub.step_start(0)
        for i, text in enumerate(texts):
            pub.publish_chunk(TextDelta(text=text))
            if i % every == every - 1:
                await asyncio.sleep(pause)
        await pub.step_finish({"finish_reason": "stop"})
        await pub.turn_finish("completed")
    return texts


async def _collect(
    it: AsyncIterator[StreamEvent], stop_after: int | None = None
) -> list[StreamEvent]:
    out = []
    async for ev in it:
        out.append(ev)
        if stop_after is not None and len(out) >= stop_after:
            break
    return out


def _check_turn(events: list[StreamEvent], texts: list[str]) -> None:
    assert [e.offset for e in events] == list(range(len(texts) + 3))
    assert [e.type for e in events] == [STEP_START, *[CHUNK] * len(texts), STEP_FINISH, TURN_FINISH]
    assert [e.data["text"] for e in events if e.type == CHUNK] == texts
    assert events[-1].data == {"status": "completed"}


# --- readers -----------------------------------------------------------------------------


async def test_live_reader_sees_every_event_in_order(backend: ChunkStreamBackend) -> None:
    sid = _sid()
    reader = asyncio.create_task(_collect(backend.follow(sid, poll_interval=0.01)))
    await asyncio.sleep(0.05)
    texts = await _publish_turn(backend, sid, 500, pause=0.001)
    events = await asyncio.wait_for(reader, WAIT)
    _check_turn(events, texts)
    assert events == await backend.read(sid)


async def test_reader_resumes_after_disconnect_exactly_once(backend: ChunkStreamBackend) -> None:
    sid = _sid()
    publisher = asyncio.create_task(_publish_turn(backend, sid, 600, pause=0.002))
    first = await asyncio.wait_for(
        _collect(backend.follow(sid, poll_interval=0.01), stop_after=137), WAIT
    )
    assert not publisher.done(), "the reader should disconnect while the turn still streams"
    rest = await asyncio.wait_for(
        _collect(backend.follow(sid, after=first[-1].offset, poll_interval=0.01)), WAIT
    )
    texts = await publisher
    _check_turn(first + rest, texts)


async def test_late_reader_gets_everything_from_zero(backend: ChunkStreamBackend) -> None:
    sid = _sid()
    texts = await _publish_turn(backend, sid, 300)
    events = await asyncio.wait_for(_collect(backend.follow(sid)), WAIT)
    _check_turn(events, texts)
    assert await backend.last_offset(sid) == len(texts) + 2


async def test_read_after_and_limit_across_batches(backend: ChunkStreamBackend) -> None:
    sid = _sid()
    for size in (1, 3, 7, 2, 5, 11):  # batches of uneven sizes
        await backend.append(sid, [{"type": CHUNK, "data": {"n": size}}] * size)
    full = await backend.read(sid)
    assert [e.offset for e in full] == list(range(29))
    for after in (-1, 0, 1, 3, 4, 10, 11, 12, 17, 27, 28, 40):
        assert await backend.read(sid, after) == full[after + 1 :]
        for limit in (1, 2, 5):
            assert await backend.read(sid, after, limit) == full[after + 1 : after + 1 + limit]
    assert await backend.read("no-such-stream") == []
    assert await backend.last_offset("no-such-stream") == -1
    assert await backend.append(sid, []) == 28


async def test_two_readers_see_identical_sequences(backend: ChunkStreamBackend) -> None:
    sid = _sid()
    readers = [
        asyncio.create_task(_collect(backend.follow(sid, poll_interval=0.01))) for _ in range(2)
    ]
    await asyncio.sleep(0.02)
    texts = await _publish_turn(backend, sid, 400, pause=0.001)
    a, b = await asyncio.wait_for(asyncio.gather(*readers), WAIT)
    assert a == b
    _check_turn(a, texts)


async def test_follow_ends_at_turn_finish(backend: ChunkStreamBackend) -> None:
    sid = _sid()
    reader = asyncio.create_task(_collect(backend.follow(sid, poll_interval=0.01)))
    await _publish_turn(backend, sid, 5)
    await backend.append(sid, [{"type": CHUNK, "data": {"late": True}}])  # not seen
    events = await asyncio.wait_for(reader, WAIT)
    assert events[-1].type == TURN_FINISH
    assert len(events) == 8
    # until_finished=False keeps reading; idle_timeout ends a stream that goes quiet
    everything = await asyncio.wait_for(
        _collect(backend.follow(sid, until_finished=False, idle_timeout=0.3)), WAIT
    )
    assert [e.offset for e in everything] == list(range(9))
    assert await asyncio.wait_for(_collect(backend.follow(_sid(), idle_timeout=0.2)), WAIT) == []


# --- retries -----------------------------------------------------------------------------


async def test_reset_marker_between_attempts(backend: ChunkStreamBackend) -> None:
    sid = _sid()
    first = ChunkPublisher(backend, sid, step=0, attempt=1)  # the attempt that stalls
    await first.step_start(0)
    for text in ("Hel", "lo wo"):
        first.publish_chunk(TextDelta(text=text))
    first.publish_chunk(ToolInputStart(tool_call_id="c1", tool_name="search"))
    first.publish_chunk(ToolInputDelta(tool_call_id="c1", delta='{"q":'))
    await first.flush()

    second = ChunkPublisher(backend, sid, step=0, attempt=2)  # the retry, maybe elsewhere
    await second.reset(reason="stalled")
    await second.step_start(0)
    first.publish_chunk(TextDelta(text="zombie"))  # the lost worker still streams
    await first.aclose()
    for text in ("Hello", " world"):
        second.publish_chunk(TextDelta(text=text))
    await second.step_finish({"finish_reason": "stop"})
    await second.turn_finish("completed")
    await second.aclose()

    events = await backend.read(sid)
    assert [e.offset for e in events] == list(range(len(events)))
    resets = [i for i, e in enumerate(events) if e.type == RESET]
    assert len(resets) == 1
    r = resets[0]
    assert events[r].attempt == 2 and events[r].step == 0
    assert events[r].data == {"reason": "stalled"}
    assert all(e.attempt == 1 for e in events[:r])
    assert events[r + 1].type == STEP_START and events[r + 1].attempt == 2
    live = live_events(events)
    assert "".join(e.data.get("text", "") for e in live if e.type == CHUNK) == "Hello world"
    assert {e.attempt for e in live} == {2}
    assert live[-1].type == TURN_FINISH


def test_live_events_reset_without_step() -> None:
    def ev(offset: int, type_: str, text: str = "") -> StreamEvent:
        return StreamEvent(offset=offset, type=type_, data={"text": text} if text else {})

    events = [
        ev(0, CHUNK, "a"),
        ev(1, STEP_FINISH),
        ev(2, CHUNK, "partial"),
        ev(3, RESET),
        ev(4, CHUNK, "b"),
    ]
    assert [e.offset for e in live_events(events)] == [0, 1, 4]


# --- several processes -------------------------------------------------------------------

CHILD = """
import asyncio, json, sys
from durable_turns.streams import open_stream_backend

async def main(url, sid, tag, batches, per):
    backend = open_stream_backend(url)
    await backend.open()
    print("ready", flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    lasts = []
    for b in range(batches):
        events = [{"type": "chunk", "data": {"tag": tag, "i": b * per + j}} for j in range(per)]
        lasts.append(await backend.append(sid, events))
        await asyncio.sleep(0.0005)  # a gap: SQLite's busy handler backs off, and a writer that
        # never pauses can finish before the other's next try (a CI run saw no interleaving)
    await backend.close()
    print(json.dumps(lasts), flush=True)

url, sid, tag, batches, per = sys.argv[1:]
asyncio.run(main(url, sid, tag, int(batches), int(per)))
"""


async def test_two_processes_append_without_collisions(shared_url: str) -> None:
    sid, batches, per = _sid(), 2000, 3  # about a second each, so the two overlap
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            CHILD,
            shared_url,
            sid,
            tag,
            str(batches),
            str(per),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            cwd=ROOT,
            env=env,
        )
        for tag in ("a", "b")
    ]
    for p in procs:  # both connected: start them together so their appends interleave
        assert p.stdout is not None
        line = await asyncio.wait_for(p.stdout.readline(), WAIT)
        assert line.strip() == b"ready", line
    outputs = []
    for p in procs:
        assert p.stdin is not None
        p.stdin.write(b"go\n")
        await p.stdin.drain()
    for p in procs:
        out, _ = await asyncio.wait_for(p.communicate(), WAIT * 2)
        assert p.returncode == 0
        outputs.append(json.loads(out.decode().strip().splitlines()[-1]))

    for lasts in outputs:  # each process saw its own appends at increasing offsets
        assert lasts == sorted(lasts) and len(set(lasts)) == len(lasts)
    assert not set(outputs[0]) & set(outputs[1])

    async with open_stream_backend(shared_url) as backend:  # type: ignore[union-attr]
        events = await backend.read(sid)
    total = 2 * batches * per
    assert [e.offset for e in events] == list(range(total))
    for tag in ("a", "b"):
        assert [e.data["i"] for e in events if e.data["tag"] == tag] == list(range(batches * per))
    switches = sum(1 for x, y in itertools.pairwise(events) if x.data["tag"] != y.data["tag"])
    assert switches > 1, "the two processes' appends never interleaved"


# --- batching ----------------------------------------------------------------------------


class CountingBackend:
    """Counts a backend's appends (wraps its bound ``append``)."""

    def __init__(self, backend: ChunkStreamBackend) -> None:
        self.calls = 0
        self.sizes: list[int] = []
        inner = backend.append

        async def append(stream_id: str, events: Sequence[Mapping[str, Any]], **kw: Any) -> int:
            self.calls += 1
            self.sizes.append(len(events))
            return await inner(stream_id, events, **kw)

        backend.append = append  # type: ignore[method-assign]


@pytest.mark.parametrize("yield_every", [0, 1, 20])
async def test_batching_makes_few_appends(backend: ChunkStreamBackend, yield_every: int) -> None:
    """10,000 publish() calls: tight, yielding after each, or yielding now and then."""
    sid, n = _sid(), 10_000
    counter = CountingBackend(backend)
    pub = ChunkPublisher(backend, sid, flush_interval_s=0.03, max_batch=256)
    for i in range(n):
        pub.publish(CHUNK, {"i": i})
        if yield_every and i % yield_every == 0:
            await asyncio.sleep(0)
    await pub.aclose()
    assert counter.calls < 200, counter.calls
    assert max(counter.sizes) <= 256
    assert pub.appends == counter.calls
    events = await backend.read(sid)
    assert [e.offset for e in events] == list(range(n))
    assert [e.data["i"] for e in events] == list(range(n))


async def test_interval_flush_without_boundaries(backend: ChunkStreamBackend) -> None:
    """The first chunk goes out at once; later ones within about flush_interval_s."""
    sid = _sid()
    pub = ChunkPublisher(backend, sid, flush_interval_s=0.02)
    pub.publish(CHUNK, TextDelta(text="hi"))
    for _ in range(200):
        await asyncio.sleep(0.01)
        if pub.pending == 0:
            break
    pub.publish(CHUNK, TextDelta(text="!"))
    assert pub.pending == 1  # held for the interval, not appended on the spot
    for _ in range(200):
        await asyncio.sleep(0.01)
        if pub.pending == 0 and len(await backend.read(sid)) == 2:
            break
    assert [e.data["text"] for e in await backend.read(sid)] == ["hi", "!"]
    await pub.aclose()


async def _holds(backend: ChunkStreamBackend, sid: str, n: int) -> bool:
    """Whether the stream holds ``n`` events yet."""
    return len(await backend.read(sid)) == n


async def test_the_first_chunk_after_a_boundary_is_not_batched(backend: ChunkStreamBackend) -> None:
    """A reader's first token never waits for the batching interval."""
    sid = _sid()
    pub = ChunkPublisher(backend, sid, flush_interval_s=60)
    await pub.step_start(0)
    pub.publish_chunk(TextDelta(text="first"))
    await wait_until(lambda: _holds(backend, sid, 2), within=5)
    assert len(await backend.read(sid)) == 2
    pub.publish_chunk(TextDelta(text="second"))
    await asyncio.sleep(0.05)
    assert pub.pending == 1  # the rest is batched again
    await pub.aclose()
    assert [e.type for e in await backend.read(sid)] == ["step-start", CHUNK, CHUNK]


async def test_open_step_does_not_wait_and_keeps_the_first_chunk_eager(
    backend: ChunkStreamBackend,
) -> None:
    """A model step opens its step without waiting on the store; the step start reaches
    readers at once, in order, and the step's first chunk is still not batched."""
    sid = _sid()
    pub = ChunkPublisher(backend, sid, flush_interval_s=60)
    pub.open_step(3, {"model": "demo:x"})
    assert pub.pending == 1  # published, not yet written: nothing was awaited
    await wait_until(lambda: _holds(backend, sid, 1), within=5)
    pub.publish_chunk(TextDelta(text="first"))
    await wait_until(lambda: _holds(backend, sid, 2), within=5)
    events = await backend.read(sid)
    assert [(e.type, e.step) for e in events] == [("step-start", 3), (CHUNK, 3)]
    assert events[0].data == {"model": "demo:x"}
    pub.publish_chunk(TextDelta(text="second"))
    await asyncio.sleep(0.05)
    assert pub.pending == 1  # after the first chunk, batching as before
    await pub.aclose()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="wake-ups need Linux")
async def test_sqlite_readers_are_woken_not_polled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A follower on the SQLite file sees another writer's append at once, although it
    would otherwise reread only every 30 s (a wake-up, not a poll, delivers it)."""
    monkeypatch.setattr(stream_base, "WAKE_FALLBACK_POLL_S", 30.0)
    path = tmp_path / "a-rather-long-folder-name-to-pass-the-108-byte-socket-path-limit" / "c.db"
    reader, writer = SQLiteStreamBackend(path), SQLiteStreamBackend(path)
    await reader.open()
    await writer.open()
    sid = _sid()
    try:
        got: list[float] = []

        async def follow() -> None:
            async for _ev in reader.follow(sid, poll_interval=30.0):
                got.append(asyncio.get_running_loop().time())

        task = asyncio.create_task(follow())
        await asyncio.sleep(0.2)  # the follower has read once and is waiting
        sent = asyncio.get_running_loop().time()
        await writer.append(sid, [{"type": CHUNK, "data": {"text": "hi"}}])
        for _ in range(1000):
            if got:
                break
            await asyncio.sleep(0.005)
        assert got and got[0] - sent < 1.0
        await writer.append(sid, [{"type": TURN_FINISH, "data": {"status": "completed"}}])
        await asyncio.wait_for(task, 5)
        assert len(got) == 2
        assert await asyncio.to_thread(os.listdir, f"{path}.wake") == []  # unregistered
    finally:
        await reader.close()
        await writer.close()


async def test_failed_background_flush_is_retried_in_order() -> None:
    backend = open_stream_backend(f"memory://{uuid.uuid4().hex}")
    assert backend is not None
    inner, failures = backend.append, [1]

    async def flaky(stream_id: str, events: Sequence[Mapping[str, Any]], **kw: Any) -> int:
        if failures:
            failures.pop()
            raise ConnectionError("backend down")
        return await inner(stream_id, events, **kw)

    backend.append = flaky  # type: ignore[method-assign]
    pub = ChunkPublisher(backend, "s", flush_interval_s=0.005)
    for i in range(10):
        pub.publish(CHUNK, {"i": i})
    for _ in range(300):
        await asyncio.sleep(0.01)
        if pub.pending == 0:
            break
    await pub.aclose()
    assert [e.data["i"] for e in await backend.read("s")] == list(range(10))


# --- Redis retention, URLs ---------------------------------------------------------------


async def test_redis_sets_ttl_and_bounds_length() -> None:
    async for prefix in _redis_prefix():
        backend = open_stream_backend(f"{REDIS_URL}?prefix={prefix}&ttl=120&maxlen=50")
        assert isinstance(backend, RedisStreamBackend)
        assert (backend.ttl_s, backend.maxlen, backend.prefix) == (120, 50, prefix)
        async with backend:
            sid = _sid()
            for i in range(1000):
                await backend.append(sid, [{"type": CHUNK, "data": {"i": i}}])
            key = backend.key(sid)
            assert 0 < await backend.client.ttl(key) <= 120
            length = await backend.client.xlen(key)
            assert 50 <= length < 1000, length  # MAXLEN ~ trims whole nodes (100 entries)
            assert await backend.append(sid, [{"type": CHUNK, "data": {}}]) == 1000
            events = await backend.read(sid)
            assert events[-1].offset == 1000
            assert [e.offset for e in events] == list(range(1001 - len(events), 1001))
            await backend.expire(sid, 5)
            assert 0 < await backend.client.ttl(key) <= 5
            await backend.delete(sid)
            assert await backend.last_offset(sid) == -1


async def test_redis_appends_go_on_after_the_server_forgot_the_script() -> None:
    """Appends go as a pipeline of the append script by its SHA; a Redis that lost its
    scripts (a restart, SCRIPT FLUSH) gets it again and the append is written once."""
    async for prefix in _redis_prefix():
        async with RedisStreamBackend(REDIS_URL, prefix=prefix) as backend:
            sid = _sid()
            assert await backend.append(sid, [_ev("before")], writer="w", seq=1) == 0
            await backend.client.script_flush()
            got = await asyncio.gather(
                backend.append(sid, [_ev("after")], writer="w", seq=2),
                backend.append(_sid(), [_ev("another")]),
            )
            assert got == [1, 0]
            assert [e.data["text"] for e in await backend.read(sid)] == ["before", "after"]


async def test_sqlite_trim_drops_only_idle_streams(tmp_path: Path) -> None:
    async with SQLiteStreamBackend(tmp_path / "c.db") as backend:
        await backend.append("old", [{"type": CHUNK, "data": {}}] * 3)
        await asyncio.sleep(0.05)
        await backend.append("new", [{"type": CHUNK, "data": {}}])
        assert await backend.trim(older_than_s=0.03) == 1
        assert await backend.read("old") == []
        assert len(await backend.read("new")) == 1


async def test_redis_follows_more_streams_than_redis_pys_default_pool() -> None:
    """One follower per stream holds a connection for its blocking XREAD: 300 streams followed
    at once by one process all end (redis-py's default pool of 100 failed the 101st)."""
    async for prefix in _redis_prefix():
        async with open_stream_backend(f"{REDIS_URL}?prefix={prefix}&block_ms=2000") as backend:
            sids = [_sid() for _ in range(300)]
            readers = [asyncio.create_task(_collect(backend.follow(sid))) for sid in sids]
            await asyncio.sleep(0.5)  # every reader parked in its XREAD
            for sid in sids:
                await _publish_turn(backend, sid, 2)
            done = await asyncio.wait_for(asyncio.gather(*readers), WAIT)
            assert all(events[-1].type == TURN_FINISH for events in done)


def test_open_stream_backend_urls() -> None:
    for off in ("", None, "none", " NONE "):
        assert open_stream_backend(off) is None
    rel = open_stream_backend("sqlite:///.data/chunks.db")
    absolute = open_stream_backend("sqlite:////var/tmp/chunks.db")
    assert isinstance(rel, SQLiteStreamBackend) and rel.path == ".data/chunks.db"
    assert isinstance(absolute, SQLiteStreamBackend) and absolute.path == "/var/tmp/chunks.db"
    r = open_stream_backend("redis://h:6380/2?ttl=60&maxlen=7&prefix=p:&socket_timeout=5")
    assert isinstance(r, RedisStreamBackend)
    assert (r.url, r.ttl_s, r.maxlen, r.prefix) == (
        "redis://h:6380/2?socket_timeout=5",
        60,
        7,
        "p:",
    )
    with pytest.raises(ValueError, match="unknown chunk stream URL"):
        open_stream_backend("kafka://x")


# --- who owns a stream (issue 25, item 10) ------------------------------------------------


def _ev(text: str) -> dict[str, Any]:
    return {"type": CHUNK, "data": {"type": "text-delta", "text": text}}


async def test_a_stream_refuses_appends_from_another_run(backend: ChunkStreamBackend) -> None:
    sid = _sid()
    await backend.append(sid, [_ev("mine")], owner="run-a", by_conversation=True)
    with pytest.raises(StreamNotOwned) as refused:
        await backend.append(sid, [_ev("planted")], owner="run-b")
    assert refused.value.stream_id == sid and refused.value.owner == "run-a"
    await backend.append(sid, [_ev("mine too")], owner="run-a", by_conversation=True)
    texts = [e.data["text"] for e in await backend.read(sid)]
    assert texts == ["mine", "mine too"], "the refused append wrote nothing"
    assert await backend.claim(sid) == StreamClaim(owner="run-a", by_conversation=True)


async def test_concurrent_appends_of_many_streams_each_count_alone(
    backend: ChunkStreamBackend,
) -> None:
    """Appends made at once (the SQLite backend commits them in one transaction) are each
    numbered on their own stream, idempotent per writer, and one refused (another run owns
    its stream) fails alone: the others are written."""
    owned, dup, others = _sid(), _sid(), [_sid() for _ in range(20)]
    await backend.append(owned, [_ev("mine")], owner="run-a", by_conversation=True)
    await backend.append(dup, [_ev("once")], writer="d", seq=1)
    for k in range(3):  # a writer's appends follow one another, as a publisher's do
        appends = [
            backend.append(sid, [_ev(f"{sid}-{k}")], owner=f"run-{sid}", writer="w", seq=k + 1)
            for sid in others
        ]
        refused = backend.append(owned, [_ev("planted")], owner="run-b")
        again = backend.append(dup, [_ev("again")], writer="d", seq=1)
        got = await asyncio.gather(*appends, refused, again, return_exceptions=True)
        assert got[:-2] == [k] * len(others), "each stream numbered alone"
        assert isinstance(got[-2], StreamNotOwned)
        assert got[-1] == 0, "a repeated (writer, seq) is not written again"
    for sid in others:
        assert [e.data["text"] for e in await backend.read(sid)] == [f"{sid}-{k}" for k in range(3)]
    assert [e.data["text"] for e in await backend.read(owned)] == ["mine"]
    assert [e.data["text"] for e in await backend.read(dup)] == ["once"]


async def test_the_conversation_takes_over_and_readers_never_see_the_squatter(
    backend: ChunkStreamBackend,
) -> None:
    """A run started elsewhere streamed first (even its turn-finish): a reader of the
    conversation's turn sees nothing until the conversation's run appends, then only it."""
    sid = _sid()
    await backend.append(sid, [_ev("planted"), {"type": TURN_FINISH, "data": {}}], owner="squat")
    assert await backend.read(sid, by_conversation=True) == []
    assert [e.data.get("text") for e in await backend.read(sid)] == ["planted", None]
    follower = asyncio.create_task(_collect(backend.follow(sid, by_conversation=True)))
    await asyncio.sleep(0.3)
    assert not follower.done(), "the squatter's turn-finish ends no conversation reader"

    await backend.append(sid, [_ev("real")], owner="conv-run", by_conversation=True)
    with pytest.raises(StreamNotOwned):
        await backend.append(sid, [_ev("planted again")], owner="squat")
    await backend.append(sid, [{"type": TURN_FINISH, "data": {}}], owner="conv-run")
    seen = await asyncio.wait_for(follower, WAIT)
    assert [(e.offset, e.data.get("text")) for e in seen] == [(2, "real"), (3, None)]
    for by_conversation in (True, False):
        events = await backend.read(sid, by_conversation=by_conversation)
        assert [e.offset for e in events] == [2, 3], "nothing from before the take-over"
        assert await backend.read(sid, 0, by_conversation=by_conversation) == events
    assert await backend.claim(sid) == StreamClaim(owner="conv-run", by_conversation=True, since=2)
    # a run started elsewhere never takes a conversation's stream; a new conversation run does
    with pytest.raises(StreamNotOwned):
        await backend.append(sid, [_ev("x")], owner="another-squat")
    await backend.append(sid, [_ev("re-run")], owner="conv-run-2", by_conversation=True)
    assert [e.data.get("text") for e in await backend.read(sid)] == ["re-run"]
    await backend.delete(sid)
    assert await backend.claim(sid) is None and await backend.read(sid) == []


async def test_unowned_events_stay_visible_to_the_first_owner(backend: ChunkStreamBackend) -> None:
    """Appends without an owner (a worker from before owners) are not checked, and the first
    owner's claim keeps what they wrote, as the store adopts turn records from before owners."""
    sid = _sid()
    await backend.append(sid, [_ev("old worker")])
    assert await backend.claim(sid) is None
    assert len(await backend.read(sid, by_conversation=True)) == 1
    await backend.append(sid, [_ev("new worker")], owner="run-a", by_conversation=True)
    await backend.append(sid, [_ev("old worker again")])
    texts = [e.data["text"] for e in await backend.read(sid, by_conversation=True)]
    assert texts == ["old worker", "new worker", "old worker again"]


async def test_a_refused_publisher_stops_and_says_so(backend: ChunkStreamBackend) -> None:
    sid = _sid()
    await backend.append(sid, [_ev("mine")], owner="conv-run", by_conversation=True)
    pub = ChunkPublisher(backend, sid, step=0, attempt=1, owner="squat")
    pub.publish_chunk(TextDelta(text="planted"))
    await wait_until(lambda: pub.refused is not None, WAIT)  # the background flush
    with pytest.raises(StreamNotOwned):
        pub.publish_chunk(TextDelta(text="more"))
    with pytest.raises(StreamNotOwned):
        await pub.aclose()
    assert [e.data["text"] for e in await backend.read(sid)] == ["mine"]


# --- lost answers, hung links ------------------------------------------------------------


async def test_an_append_is_idempotent_per_writer_and_seq(backend: ChunkStreamBackend) -> None:
    sid, one = _sid(), [{"type": CHUNK, "data": {"i": 1}}]
    assert await backend.append(sid, one, writer="w", seq=1) == 0
    assert await backend.append(sid, one, writer="w", seq=1) == 0  # a retry: not again
    assert await backend.append(sid, one * 2, writer="x", seq=1) == 2  # another writer
    assert await backend.append(sid, one, writer="w", seq=2) == 3
    assert await backend.append(sid, one, writer="w", seq=1) == 3  # late and old: skipped
    assert await backend.append(sid, one) == 4  # no writer: always appended
    assert [e.offset for e in await backend.read(sid)] == list(range(5))
    await backend.delete(sid)
    assert await backend.append(sid, one, writer="w", seq=1) == 0  # a new stream


async def test_an_append_applied_but_unanswered_is_written_once(
    backend: ChunkStreamBackend,
) -> None:
    """The backend applies an append and the answer is lost (a reset link, a timeout): the
    publisher's retry of that batch appends nothing, and nothing is lost or repeated."""
    sid, inner, lost = _sid(), backend.append, [2, 5]

    async def lossy(stream_id: str, events: Sequence[Mapping[str, Any]], **kw: Any) -> int:
        last = await inner(stream_id, events, **kw)
        if lost and kw["seq"] == lost[0]:
            lost.pop(0)
            raise ConnectionError("connection reset by peer")
        return last

    backend.append = lossy  # type: ignore[method-assign]
    pub = ChunkPublisher(backend, sid, flush_interval_s=0.001, max_batch=3)
    await pub.step_start(0)
    for i in range(20):
        pub.publish(CHUNK, {"i": i})
        await asyncio.sleep(0.002)
    await pub.step_finish()
    await pub.aclose()
    events = await backend.read(sid)
    assert not lost
    assert [e.offset for e in events] == list(range(22))
    assert [e.data["i"] for e in events if e.type == CHUNK] == list(range(20))


async def test_attempts_sharing_a_writer_end_the_stream_once(backend: ChunkStreamBackend) -> None:
    """Two attempts of one activity publish the same boundary (the first one's answer was
    lost): with one writer, the stream holds it once."""
    sid = _sid()
    for _attempt in (1, 2):
        async with ChunkPublisher(backend, sid, writer="run/5/turn-finish") as pub:
            await pub.turn_finish("completed")
    assert [e.type for e in await backend.read(sid)] == [TURN_FINISH]


async def test_a_hung_stream_write_gives_up_within_its_bound() -> None:
    """A backend that never answers (a blackholed link): the boundary waits
    ``write_timeout_s``, raises StreamUnavailable, and the publisher stops writing."""
    backend = open_stream_backend(f"memory://{uuid.uuid4().hex}")
    assert backend is not None
    hang = asyncio.Event()

    async def blackholed(stream_id: str, events: Sequence[Mapping[str, Any]], **kw: Any) -> int:
        await hang.wait()
        raise AssertionError("unreachable")

    backend.append = blackholed  # type: ignore[method-assign]
    beats: list[str] = []
    pub = ChunkPublisher(backend, "s", write_timeout_s=0.3, on_wait=beats.append, wait_beat_s=0.05)
    pub.publish(CHUNK, {"i": 0})
    started = asyncio.get_running_loop().time()
    with pytest.raises(stream_base.StreamUnavailable, match=r"not writable within 0\.3s"):
        await pub.step_finish()
    assert 0.25 < asyncio.get_running_loop().time() - started < 2.0
    assert pub.failed is not None and pub.dropped == 2
    assert len(beats) >= 3 and beats[0] == "waiting for the chunk stream s"  # heartbeats
    pub.publish(CHUNK, {"i": 1})  # dropped, not raised: the step goes on
    assert pub.dropped == 3 and pub.pending == 0
    with pytest.raises(stream_base.StreamUnavailable):
        await pub.turn_finish("completed")
    await asyncio.wait_for(pub.aclose(), 1)  # no second wait


async def test_a_failing_stream_write_is_retried_until_its_bound() -> None:
    backend = open_stream_backend(f"memory://{uuid.uuid4().hex}")
    assert backend is not None
    inner, failures = backend.append, [1, 1, 1]

    async def flaky(stream_id: str, events: Sequence[Mapping[str, Any]], **kw: Any) -> int:
        if failures:
            failures.pop()
            raise ConnectionError("refused")
        return await inner(stream_id, events, **kw)

    backend.append = flaky  # type: ignore[method-assign]
    pub = ChunkPublisher(backend, "s", write_timeout_s=10)
    await pub.turn_finish("completed")  # three failures, then through
    assert [e.type for e in await backend.read("s")] == [TURN_FINISH]
    await pub.aclose()
