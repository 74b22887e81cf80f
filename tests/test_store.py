"""Contract tests for the transcript stores, run against SQLite and PostgreSQL.

PostgreSQL is at ``TURNS_TEST_POSTGRES_URL`` (default
``postgresql://postgres@127.0.0.1:5432/test``). Each test gets its own PostgreSQL schema,
dropped at the end of the session. An unreachable server fails the PostgreSQL tests with a
message saying so; they are never skipped.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import asyncpg
import pytest

from durable_turns.messages import Message, TextPart, Usage, copied
from durable_turns.store import (
    StepRecord,
    ToolResultRecord,
    TranscriptStore,
    TurnRecord,
    open_store,
)
from durable_turns.store.base import ParsedMessages
from durable_turns.store.postgres import MIGRATIONS, SCHEMA_VERSION, PostgresStore
from durable_turns.store.sqlite import SQLiteStore

PG_URL = os.environ.get("TURNS_TEST_POSTGRES_URL") or "postgresql://postgres@127.0.0.1:5432/test"
CONNECT_TIMEOUT = 30


def _url_with_schema(url: str, schema: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}schema={schema}"


class PgSchemas:
    """Hands out fresh, uniquely named PostgreSQL schemas and drops them afterwards."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def new_url(self) -> str:
        name = f"turns_test_{uuid.uuid4().hex[:16]}"
        self.names.append(name)
        return _url_with_schema(PG_URL, name)


def _unreachable(e: BaseException) -> str:
    return (
        f"PostgreSQL is unreachable at {PG_URL} ({type(e).__name__}: {e}). These tests need a"
        " running server: start one (e.g. `pg_ctlcluster <version> main start`) or set"
        " TURNS_TEST_POSTGRES_URL to a reachable database."
    )


async def _open(store: TranscriptStore) -> None:
    """Open a store; for PostgreSQL, turn connection failures into a clear test failure."""
    if not isinstance(store, PostgresStore):
        await store.open()
        return
    try:
        await asyncio.wait_for(store.open(), CONNECT_TIMEOUT)
        return
    except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as e:
        error: BaseException = e
    pytest.fail(_unreachable(error), pytrace=False)


@pytest.fixture(scope="session")
async def pg_schemas() -> AsyncIterator[PgSchemas]:
    schemas = PgSchemas()
    yield schemas
    if not schemas.names:
        return
    try:
        conn = await asyncio.wait_for(asyncpg.connect(PostgresStore(PG_URL).dsn), CONNECT_TIMEOUT)
    except (OSError, TimeoutError, asyncpg.PostgresError):
        return  # the tests that made these schemas have failed already
    try:
        for name in schemas.names:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
    finally:
        await conn.close()


StoreFactory = Callable[[], TranscriptStore]


@pytest.fixture(params=["sqlite", "postgres"])
def make_store(
    request: pytest.FixtureRequest, tmp_path: Path, pg_schemas: PgSchemas
) -> StoreFactory:
    """Builds (unopened) stores that all share one fresh database of the backend."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'transcript.db'}"  # four slashes: absolute path
    else:
        url = pg_schemas.new_url()
    return lambda: open_store(url)


@pytest.fixture
async def store(make_store: StoreFactory) -> AsyncIterator[TranscriptStore]:
    s = make_store()
    await _open(s)
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
async def pg_url(pg_schemas: PgSchemas) -> str:
    """A URL for a fresh schema that no store has opened yet."""
    return pg_schemas.new_url()


def msg(id: str, text: str, role: str = "user") -> Message:
    return Message.model_validate({"id": id, "role": role, "content": text})


def step(n: int, text: str = "", run: int = 0) -> StepRecord:
    return StepRecord(step=n, run=run, parts=[TextPart(text=text or f"step {n}")])


# --- messages --------------------------------------------------------------------------


async def test_messages_in_insertion_order_and_add_is_idempotent(store: TranscriptStore) -> None:
    await store.add_messages("c1", [msg("m3", "first"), msg("m1", "second")], turn_id="t1")
    await store.add_messages("c1", [msg("m2", "third")])
    # re-adding an id (a retried activity) keeps the stored message and its position
    await store.add_messages("c1", [msg("m1", "second, retried"), msg("m4", "fourth")])
    await store.add_messages("c1", [msg("m4", "fourth again"), msg("m4", "and again")])
    await store.add_messages("c1", [])

    got = await store.messages("c1")
    assert [m.id for m in got] == ["m3", "m1", "m2", "m4"]
    assert [m.text for m in got] == ["first", "second", "third", "fourth"]
    assert await store.messages("nobody") == []


async def test_message_bodies_round_trip(store: TranscriptStore) -> None:
    m = Message(
        id="m1",
        role="assistant",
        parts=[TextPart(text='nul \x00 here, emoji 🦆, quote " and \\ backslash')],
        metadata={"b": 1, "a": [1.5, None, {"z": True}], "big": 2**60},
    )
    await store.add_messages("c1", [m])
    assert await store.messages("c1") == [m]


def test_content_shorthand_is_read_as_parts_and_never_stored() -> None:
    text = Message.model_validate({"role": "user", "content": "hi"})
    assert text.parts == [TextPart(text="hi")] and text.content is None
    listed = Message.model_validate_json(
        '{"role": "user", "content": [{"type": "text", "text": "x"}]}'
    )
    assert listed.parts == [TextPart(text="x")]
    assert "content" not in text.model_dump() and "content" not in text.model_dump_json()
    with pytest.raises(ValueError, match="not both"):
        Message.model_validate({"role": "user", "content": "hi", "parts": []})
    with pytest.raises(ValueError, match="valid string"):
        Message.model_validate({"role": "user", "content": 5})
    # Stored bodies are parsed on every model step: no before-validator may sit in front of
    # pydantic's JSON parser (it would make each message a Python dict first, ~2x slower).
    modes = {d.info.mode for d in Message.__pydantic_decorators__.model_validators.values()}
    assert modes == {"after"}


def test_parsed_messages_parse_a_body_once_and_stay_bounded() -> None:
    parse = ParsedMessages(max_chars=400)
    a, b = (Message(id=i, role="user", parts=[TextPart(text=i * 50)]) for i in "ab")
    first = parse([a.model_dump_json(), b.model_dump_json()])
    again = parse([a.model_dump_json(), b.model_dump_json()])
    assert first == [a, b] and all(x is y for x, y in zip(first, again, strict=True))
    # a changed body (put_message, compaction) is what comes back, parsed anew
    changed = a.model_copy(update={"parts": [TextPart(text="new")]})
    [fresh] = parse([changed.model_dump_json()])
    assert fresh == changed and fresh is not first[0]
    # bounded: the least recently used bodies go first
    bodies = [
        Message(id=str(i), role="user", parts=[TextPart(text="x" * 100)]).model_dump_json()
        for i in range(5)
    ]
    kept = parse(bodies)
    assert len(parse) == 400 // len(bodies[0])  # the newest bodies that fit
    assert parse(bodies[-1:])[0] is kept[-1]  # still held
    assert parse(bodies[:1])[0] is not kept[0]  # let go: parsed anew
    # copies for user code are equal and independent
    [copy] = copied([a])
    copy.parts.append(TextPart(text="!"))
    assert copy != a and a == Message(id="a", role="user", parts=[TextPart(text="a" * 50)])


async def test_put_message_replaces_content_and_keeps_position(store: TranscriptStore) -> None:
    await store.add_messages("c1", [msg("m1", "one"), msg("m2", "two"), msg("m3", "three")])
    await store.put_message("c1", msg("m2", "two, edited", role="assistant"), turn_id="t1")
    await store.put_message("c1", msg("m4", "four"))  # a new id is appended

    got = await store.messages("c1")
    assert [m.id for m in got] == ["m1", "m2", "m3", "m4"]
    assert [m.text for m in got] == ["one", "two, edited", "three", "four"]
    assert got[1].role == "assistant"

    # add_messages still leaves a put message alone
    await store.add_messages("c1", [msg("m2", "stale")])
    assert (await store.messages("c1"))[1].text == "two, edited"


async def test_conversations_are_isolated(store: TranscriptStore) -> None:
    await store.add_messages("a", [msg("m1", "a1"), msg("m2", "a2")])
    await store.add_messages("b", [msg("m1", "b1")])  # same message id, other conversation
    await store.put_message("b", msg("m2", "b2"))

    assert [m.text for m in await store.messages("a")] == ["a1", "a2"]
    assert [m.text for m in await store.messages("b")] == ["b1", "b2"]

    await store.save_turn(
        TurnRecord(turn_id="ta", conversation_id="a", turn_number=3, request_id="r")
    )
    assert await store.last_turn_number("a") == 3
    assert await store.last_turn_number("b") == 0


# --- turns -----------------------------------------------------------------------------


async def test_turns_save_get_and_last_turn_number(store: TranscriptStore) -> None:
    assert await store.get_turn("t1") is None
    assert await store.last_turn_number("c1") == 0

    t1 = TurnRecord(turn_id="t1", conversation_id="c1", turn_number=1, request_id="r1")
    t2 = TurnRecord(
        turn_id="t2",
        conversation_id="c1",
        turn_number=2,
        request_id="r2",
        body={"messages": [{"role": "user", "content": "hi"}]},
        config={"model": "demo", "max_steps": 5},
    )
    await store.save_turn(t2)
    await store.save_turn(t1)
    assert await store.get_turn("t1") == t1
    assert await store.get_turn("t2") == t2
    assert await store.last_turn_number("c1") == 2

    # save_turn replaces the record
    done = t2.model_copy(update={"status": "completed", "run": 1, "error": None})
    await store.save_turn(done)
    assert await store.get_turn("t2") == done
    failed = t1.model_copy(update={"status": "failed", "error": {"type": "X", "message": "m"}})
    await store.save_turn(failed)
    assert await store.get_turn("t1") == failed
    assert await store.last_turn_number("c1") == 2


# --- steps -----------------------------------------------------------------------------


async def test_save_step_first_write_wins_and_returns_the_stored_one(
    store: TranscriptStore,
) -> None:
    first = StepRecord(
        step=0,
        parts=[TextPart(text="first")],
        finish_reason="tool-calls",
        usage=Usage(input_tokens=3, output_tokens=4, total_tokens=7),
        model="demo",
    )
    assert await store.save_step("t1", first) == first
    retried = await store.save_step("t1", step(0, "second"))
    assert retried == first
    assert await store.steps("t1", 0) == [first]


async def test_steps_ordered_per_run(store: TranscriptStore) -> None:
    for n in (2, 0, 1):
        await store.save_step("t1", step(n, f"run0 step {n}"))
    for n in (1, 0):
        await store.save_step("t1", step(n, f"run1 step {n}", run=1))
    await store.save_step("t2", step(0, "other turn"))

    run0 = await store.steps("t1", 0)
    assert run0 == [step(n, f"run0 step {n}") for n in (0, 1, 2)]
    assert [(s.run, s.step) for s in await store.steps("t1", 1)] == [(1, 0), (1, 1)]
    assert await store.steps("t1", 2) == []
    assert len(await store.steps("t2", 0)) == 1


# --- tool results ----------------------------------------------------------------------


async def test_tool_results_first_write_wins(store: TranscriptStore) -> None:
    first = ToolResultRecord(
        tool_call_id="call-1", tool_name="search", step=0, output={"hits": [1, 2]}, duration_ms=12.5
    )
    assert await store.save_tool_result("t1", first) == first
    again = ToolResultRecord(tool_call_id="call-1", tool_name="search", step=0, output="other")
    assert await store.save_tool_result("t1", again) == first

    error = ToolResultRecord(
        tool_call_id="call-2", tool_name="fetch", step=1, output="boom", is_error=True
    )
    await store.save_tool_result("t1", error)
    await store.save_tool_result("t2", again)  # same call id, other turn

    assert await store.tool_results("t1") == {"call-1": first, "call-2": error}
    assert await store.tool_results("t2") == {"call-1": again}
    assert await store.tool_results("t3") == {}


# --- a turn at once ----------------------------------------------------------------------


async def test_turn_state_reads_what_the_single_reads_do(store: TranscriptStore) -> None:
    """``turn_state``: one round trip for the record, the current run's steps, the tool
    results and (when asked) the transcript; each exactly as its own read returns it."""
    assert await store.turn_state("nope") is None
    assert await store.turn_state("nope", transcript=True) is None
    turn = TurnRecord(turn_id="c1/turn-1", conversation_id="c1", turn_number=1, request_id="r")
    turn.run = 1
    await store.save_turn(turn)
    await store.add_messages("c1", [msg("m1", "hello"), msg("m2", "there", "assistant")])
    await store.add_messages("c2", [msg("other", "not mine")])
    for run in (0, 1):
        for n in (1, 0):
            await store.save_step("c1/turn-1", step(n, f"run{run} step {n}", run=run))
    result = ToolResultRecord(tool_call_id="call-1", tool_name="search", step=0, output=[1])
    await store.save_tool_result("c1/turn-1", result)
    await store.save_tool_result("c1/turn-2", result.model_copy(update={"output": "other"}))

    bare = await store.turn_state("c1/turn-1")
    assert bare is not None and bare.transcript is None
    assert bare.turn == await store.get_turn("c1/turn-1")
    assert bare.steps == await store.steps("c1/turn-1", 1)
    assert [s.parts[0].text for s in bare.steps] == ["run1 step 0", "run1 step 1"]  # type: ignore[union-attr]
    assert bare.results == await store.tool_results("c1/turn-1") == {"call-1": result}

    full = await store.turn_state("c1/turn-1", transcript=True)
    assert full is not None
    assert full.transcript == await store.messages("c1")
    assert [m.id for m in full.transcript] == ["m1", "m2"]
    assert full.model_copy(update={"transcript": None}) == bare


# --- concurrency -----------------------------------------------------------------------


async def test_concurrent_add_messages_store_each_once(store: TranscriptStore) -> None:
    batch = [msg("m1", "one"), msg("m2", "two"), msg("m3", "three")]
    await asyncio.gather(*(store.add_messages("c1", batch, turn_id="t1") for _ in range(20)))
    got = await store.messages("c1")
    assert [m.id for m in got] == ["m1", "m2", "m3"]

    # the same keys in different orders at once (deadlock-prone on PostgreSQL) and with
    # different content: still one row per id, whichever write came first
    a, b = msg("x", "x"), msg("y", "y")
    await asyncio.gather(
        *(
            store.add_messages("c2", [a, b] if i % 2 else [b, a.model_copy(update={"parts": []})])
            for i in range(20)
        )
    )
    ids = [m.id for m in await store.messages("c2")]
    assert sorted(ids) == ["x", "y"]


async def test_concurrent_batches_are_not_interleaved(store: TranscriptStore) -> None:
    batches = [[msg(f"b{b}-m{i}", f"{b}.{i}") for i in range(5)] for b in range(10)]
    await asyncio.gather(*(store.add_messages("c1", batch) for batch in batches))
    got = [m.id for m in await store.messages("c1")]
    assert len(got) == 50
    for batch in batches:
        start = got.index(batch[0].id)
        assert got[start : start + 5] == [m.id for m in batch]


async def test_concurrent_save_step_and_tool_result_store_each_once(
    store: TranscriptStore,
) -> None:
    steps = await asyncio.gather(
        *(store.save_step("t1", step(0, f"writer {i}")) for i in range(20))
    )
    stored = await store.steps("t1", 0)
    assert len(stored) == 1
    assert all(s == stored[0] for s in steps)  # every writer got the one stored record

    results = await asyncio.gather(
        *(
            store.save_tool_result(
                "t1", ToolResultRecord(tool_call_id="call-1", tool_name="t", step=0, output=i)
            )
            for i in range(20)
        )
    )
    stored_results = await store.tool_results("t1")
    assert list(stored_results) == ["call-1"]
    assert all(r == stored_results["call-1"] for r in results)

    turns = [
        TurnRecord(turn_id="t1", conversation_id="c1", turn_number=1, request_id=f"r{i}")
        for i in range(20)
    ]
    await asyncio.gather(*(store.save_turn(t) for t in turns))
    assert await store.get_turn("t1") in turns
    assert await store.last_turn_number("c1") == 1


# --- schema ----------------------------------------------------------------------------


async def test_open_twice_keeps_schema_and_data(make_store: StoreFactory) -> None:
    first = make_store()
    await _open(first)
    await first.add_messages("c1", [msg("m1", "kept")])
    if isinstance(first, PostgresStore):
        await first.open()  # opening an open store is harmless
    await first.close()
    await first.close()

    for _ in range(2):  # re-opening runs the migration step again; it must find nothing to do
        again = make_store()
        await _open(again)
        try:
            assert [m.text for m in await again.messages("c1")][:1] == ["kept"]
            await again.add_messages("c1", [msg("m2", "added")])
            assert [m.text for m in await again.messages("c1")] == ["kept", "added"]
            if isinstance(again, PostgresStore):
                assert await again.schema_version() == SCHEMA_VERSION
                versions = await again.pool.fetch("SELECT version FROM schema_version")
                assert sorted(r["version"] for r in versions) == [v for v, _ in MIGRATIONS]
        finally:
            await again.close()


async def test_closed_store_refuses_to_work(make_store: StoreFactory) -> None:
    s = make_store()
    with pytest.raises(RuntimeError, match="not open"):
        await s.messages("c1")


async def test_postgres_stores_opening_concurrently(pg_url: str) -> None:
    stores = [PostgresStore(pg_url, max_size=3) for _ in range(6)]
    try:
        # a fresh schema: every instance races to create it and run every migration
        await asyncio.gather(*(_open(s) for s in stores))
        versions = await stores[0].pool.fetch("SELECT version FROM schema_version")
        assert sorted(r["version"] for r in versions) == [v for v, _ in MIGRATIONS]

        await asyncio.gather(
            *(s.add_messages("c1", [msg(f"m{i}", f"from {i}")]) for i, s in enumerate(stores))
        )
        for s in stores:
            assert len(await s.messages("c1")) == len(stores)
    finally:
        await asyncio.gather(*(s.close() for s in stores))


async def test_postgres_refuses_a_newer_schema(pg_url: str) -> None:
    store = PostgresStore(pg_url)
    await _open(store)
    try:
        await store.pool.execute("INSERT INTO schema_version (version) VALUES ($1)", 10_000)
    finally:
        await store.close()
    newer = PostgresStore(pg_url)
    with pytest.raises(RuntimeError, match="version 10000, newer"):
        await newer.open()
    with pytest.raises(RuntimeError, match="not open"):
        await newer.messages("c1")


async def test_postgres_tables_live_in_the_url_schema(pg_url: str) -> None:
    store = PostgresStore(pg_url)
    await _open(store)
    try:
        assert store.schema is not None
        tables = await store.pool.fetch(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = $1",
            store.schema,
        )
        assert {r["table_name"] for r in tables} == {
            "schema_version",
            "messages",
            "turns",
            "steps",
            "tool_results",
        }
    finally:
        await store.close()


# --- URLs ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("sqlite:///transcript.db", "transcript.db"),
        ("sqlite:///data/dir/transcript.db", "data/dir/transcript.db"),
        ("sqlite:////var/lib/turns/transcript.db", "/var/lib/turns/transcript.db"),
        ("sqlite://", ":memory:"),
    ],
)
def test_open_store_sqlite_urls(url: str, path: str) -> None:
    store = open_store(url)
    assert isinstance(store, SQLiteStore)
    assert store.path == path


@pytest.mark.parametrize(
    ("url", "dsn", "schema"),
    [
        (
            "postgresql://postgres@127.0.0.1:5432/test",
            "postgresql://postgres@127.0.0.1:5432/test",
            None,
        ),
        ("postgres://u:p%40ss@db.internal/turns", "postgres://u:p%40ss@db.internal/turns", None),
        (
            "postgresql://u@h:6543/db?sslmode=require&schema=tenant_a",
            "postgresql://u@h:6543/db?sslmode=require",
            "tenant_a",
        ),
    ],
)
def test_open_store_postgres_urls(url: str, dsn: str, schema: str | None) -> None:
    store = open_store(url)
    assert isinstance(store, PostgresStore)
    assert store.dsn == dsn
    assert store.schema == schema
    assert "p%40ss" not in repr(store)


@pytest.mark.parametrize(
    "url",
    ["mysql://u@h/db", "redis://localhost:6379", "transcript.db", "", "SQLITE:///x.db"],
)
def test_open_store_unknown_scheme(url: str) -> None:
    with pytest.raises(ValueError, match="unknown transcript store URL"):
        open_store(url)


def test_postgres_rejects_a_bad_schema_name() -> None:
    with pytest.raises(ValueError, match="invalid PostgreSQL schema name"):
        PostgresStore('postgresql://u@h/db?schema=x";drop table turns;--')
