"""Regeneration at the store: ``supersede_messages`` marks, ``messages`` leaves them out.

Run against SQLite and PostgreSQL (the fixtures of ``test_store``). The end-to-end
regeneration is in ``test_regenerate.py``.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from durable_turns.store import TranscriptStore, TurnNotOwned, TurnRecord
from durable_turns.store.postgres import MIGRATIONS, SCHEMA_VERSION, PostgresStore
from durable_turns.store.sqlite import SQLiteStore
from tests.test_store import (  # noqa: F401 - fixtures
    StoreFactory,
    _open,
    make_store,
    msg,
    pg_schemas,
    pg_url,
)

CONV = "c1"
REGEN = "c1/turn-3"


@pytest.fixture
async def db(make_store: StoreFactory) -> AsyncIterator[TranscriptStore]:  # noqa: F811
    s = make_store()
    await _open(s)
    try:
        yield s
    finally:
        await s.close()


async def _two_turns(db: TranscriptStore) -> None:
    await db.add_messages(CONV, [msg("r1/0", "hi")], "c1/turn-1")
    await db.put_message(CONV, msg("c1/turn-1/assistant", "hello", "assistant"), "c1/turn-1")
    await db.add_messages(CONV, [msg("r2/0", "weather?")], "c1/turn-2")
    await db.put_message(CONV, msg("c1/turn-2/assistant", "sunny", "assistant"), "c1/turn-2")


def _ids(messages: list) -> list[str]:  # type: ignore[type-arg]
    return [m.id for m in messages]


async def test_superseded_messages_stay_stored_and_leave_the_transcript(
    db: TranscriptStore,
) -> None:
    await _two_turns(db)
    marked = await db.supersede_messages(CONV, "c1/turn-1/assistant", REGEN)
    assert marked == ["c1/turn-1/assistant", "r2/0", "c1/turn-2/assistant"]

    assert _ids(await db.messages(CONV)) == ["r1/0"]
    everything = await db.messages(CONV, superseded=True)
    assert _ids(everything) == ["r1/0", *marked]
    assert [m.metadata.get("superseded_by") for m in everything] == [None, REGEN, REGEN, REGEN]
    assert [m.text for m in everything] == ["hi", "hello", "weather?", "sunny"]
    # the shared parsed messages are not changed by the report
    assert "superseded_by" not in (await db.messages(CONV))[0].metadata

    await db.save_turn(
        TurnRecord(turn_id=REGEN, conversation_id=CONV, turn_number=3, request_id="r")
    )
    state = await db.turn_state(REGEN, transcript=True)
    assert state is not None and _ids(state.transcript or []) == ["r1/0"]


async def test_marking_is_keyed_by_the_turn_and_happens_once(db: TranscriptStore) -> None:
    await _two_turns(db)
    first = await db.supersede_messages(CONV, "c1/turn-2/assistant", REGEN)
    assert first == ["c1/turn-2/assistant"]
    # the turn's own reply, stored after the mark, is never marked by a retry
    await db.put_message(CONV, msg("c1/turn-3/assistant", "rainy", "assistant"), REGEN)
    for target in ("c1/turn-2/assistant", "c1/turn-1/assistant", None):
        assert await db.supersede_messages(CONV, target, REGEN) == first
    assert _ids(await db.messages(CONV)) == [
        "r1/0",
        "c1/turn-1/assistant",
        "r2/0",
        REGEN + "/assistant",
    ]


async def test_nothing_is_marked_for_an_unknown_or_superseded_message(db: TranscriptStore) -> None:
    await _two_turns(db)
    before = await db.messages(CONV)
    assert await db.supersede_messages(CONV, "c1/turn-9/assistant", REGEN) == []
    assert await db.supersede_messages(CONV, None, REGEN) == []
    assert await db.supersede_messages("other", "c1/turn-1/assistant", REGEN) == []
    assert await db.messages(CONV) == before

    # a later regeneration keeps the earlier marks and cannot name a superseded message
    assert await db.supersede_messages(CONV, "c1/turn-2/assistant", REGEN) == [
        "c1/turn-2/assistant"
    ]
    await db.put_message(CONV, msg("c1/turn-3/assistant", "rainy", "assistant"), REGEN)
    assert await db.supersede_messages(CONV, "c1/turn-2/assistant", "c1/turn-4") == []
    assert await db.supersede_messages(CONV, "c1/turn-1/assistant", "c1/turn-4") == [
        "c1/turn-1/assistant",
        "r2/0",
        "c1/turn-3/assistant",
    ]
    marks = {
        m.id: m.metadata.get("superseded_by") for m in await db.messages(CONV, superseded=True)
    }
    assert marks == {
        "r1/0": None,
        "c1/turn-1/assistant": "c1/turn-4",
        "r2/0": "c1/turn-4",
        "c1/turn-2/assistant": REGEN,
        "c1/turn-3/assistant": "c1/turn-4",
    }


async def test_concurrent_attempts_mark_once(db: TranscriptStore) -> None:
    await _two_turns(db)
    results = await asyncio.gather(
        *(db.supersede_messages(CONV, "c1/turn-1/assistant", REGEN) for _ in range(6))
    )
    assert all(r == ["c1/turn-1/assistant", "r2/0", "c1/turn-2/assistant"] for r in results)


def _turn(owner: str, by_conversation: bool = True) -> TurnRecord:
    return TurnRecord(
        turn_id=REGEN,
        conversation_id=CONV,
        turn_number=3,
        request_id="r",
        owner=owner,
        by_conversation=by_conversation,
    )


async def test_only_the_owner_marks_and_a_take_over_clears_its_marks(db: TranscriptStore) -> None:
    await _two_turns(db)
    assert await db.claim_turn(_turn("run-a", by_conversation=False))
    with pytest.raises(TurnNotOwned):
        await db.supersede_messages(CONV, "c1/turn-2/assistant", REGEN, owner="run-b")
    assert len(await db.messages(CONV)) == 4
    assert await db.supersede_messages(CONV, "c1/turn-2/assistant", REGEN, owner="run-a") == [
        "c1/turn-2/assistant"
    ]
    # the conversation takes the turn over: what run-a marked is visible again
    assert await db.claim_turn(_turn("run-b"))
    assert len(await db.messages(CONV)) == 4
    assert await db.supersede_messages(CONV, "c1/turn-1/assistant", REGEN, owner="run-b") == [
        "c1/turn-1/assistant",
        "r2/0",
        "c1/turn-2/assistant",
    ]


async def test_an_old_sqlite_file_gets_the_superseded_column(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    conn.executescript(
        "CREATE TABLE messages (seq INTEGER PRIMARY KEY AUTOINCREMENT,"
        " conversation_id TEXT NOT NULL, id TEXT NOT NULL, role TEXT NOT NULL, turn_id TEXT,"
        " body TEXT NOT NULL, UNIQUE (conversation_id, id));"
    )
    conn.execute(
        "INSERT INTO messages (conversation_id, id, role, body) VALUES (?, ?, 'user', ?)",
        (CONV, "r1/0", msg("r1/0", "kept").model_dump_json()),
    )
    conn.commit()
    conn.close()
    for _ in range(2):  # the second open finds the column there
        db = SQLiteStore(path)
        await db.open()
        try:
            assert [m.text for m in await db.messages(CONV)] == ["kept"]
        finally:
            await db.close()
    db = SQLiteStore(path)
    await db.open()
    try:
        assert await db.supersede_messages(CONV, "r1/0", REGEN) == ["r1/0"]
        assert await db.messages(CONV) == []
    finally:
        await db.close()


async def test_a_postgres_schema_of_version_2_is_migrated(pg_url: str) -> None:  # noqa: F811
    store = PostgresStore(pg_url)
    conn = await asyncpg.connect(store.dsn)
    try:
        await conn.execute(f'CREATE SCHEMA "{store.schema}"')
        await conn.execute(f'SET search_path TO "{store.schema}"')
        await conn.execute(
            "CREATE TABLE schema_version (version integer PRIMARY KEY,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for version, sql in MIGRATIONS[:2]:
            await conn.execute(sql)
            await conn.execute("INSERT INTO schema_version (version) VALUES ($1)", version)
        await conn.execute(
            "INSERT INTO messages (conversation_id, id, role, body) VALUES ($1, $2, 'user', $3)",
            CONV,
            "r1/0",
            msg("r1/0", "kept").model_dump_json(),
        )
    finally:
        await conn.close()
    await _open(store)
    try:
        assert await store.schema_version() == SCHEMA_VERSION == 3
        assert [m.text for m in await store.messages(CONV)] == ["kept"]
        assert await store.supersede_messages(CONV, "r1/0", REGEN) == ["r1/0"]
        assert await store.messages(CONV) == []
    finally:
        await store.close()
