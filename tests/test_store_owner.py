"""Issue 12, item 2 at the store: a turn's data belongs to the workflow run that made it.

Run against SQLite and PostgreSQL (the fixtures of ``test_store``): ``claim_turn`` and the
owner-checked writes. The end-to-end squatter is in ``test_turn_owner.py``.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from durable_turns.store import (
    StoreUnavailable,
    ToolResultRecord,
    TranscriptStore,
    TurnNotOwned,
    TurnRecord,
)
from durable_turns.store.sqlite import SQLiteStore
from tests.test_store import (  # noqa: F401 - fixtures
    StoreFactory,
    _open,
    make_store,
    msg,
    pg_schemas,
    step,
)

TURN = "victim/turn-2"


@pytest.fixture
async def db(make_store: StoreFactory) -> AsyncIterator[TranscriptStore]:  # noqa: F811
    s = make_store()
    await _open(s)
    try:
        yield s
    finally:
        await s.close()


def record(owner: str, by_conversation: bool = False, **kw: object) -> TurnRecord:
    return TurnRecord(
        turn_id=TURN,
        conversation_id="victim",
        turn_number=2,
        request_id=f"req-{owner}",
        owner=owner,
        by_conversation=by_conversation,
        **kw,  # type: ignore[arg-type]
    )


async def _fill(db: TranscriptStore, owner: str) -> None:
    await db.add_messages("victim", [msg(f"{owner}-user", "hi")], TURN, owner=owner)
    await db.save_step(TURN, step(0, f"{owner}'s answer"), owner=owner)
    await db.save_tool_result(
        TURN, ToolResultRecord(tool_call_id="call-1", tool_name="t", step=0), owner=owner
    )
    await db.put_message(
        "victim", msg(f"{TURN}/assistant", f"{owner}'s reply", "assistant"), TURN, owner=owner
    )


async def test_a_conversation_takes_its_turn_over_and_nothing_of_the_squatter_remains(
    db: TranscriptStore,
) -> None:
    await db.add_messages("victim", [msg("turn-1", "earlier")], "victim/turn-1")
    assert await db.claim_turn(record("squatter"))
    await _fill(db, "squatter")

    assert await db.claim_turn(record("victim", by_conversation=True))
    assert await db.steps(TURN, 0) == []
    assert await db.tool_results(TURN) == {}
    assert [m.id for m in await db.messages("victim")] == ["turn-1"]
    turn = await db.get_turn(TURN)
    assert turn is not None and turn.owner == "victim" and turn.by_conversation

    # the squatter, still running, can write nothing more into the turn
    with pytest.raises(TurnNotOwned):
        await db.save_step(TURN, step(0, "late"), owner="squatter")
    with pytest.raises(TurnNotOwned):
        await db.save_tool_result(
            TURN, ToolResultRecord(tool_call_id="c", tool_name="t", step=0), owner="squatter"
        )
    with pytest.raises(TurnNotOwned):
        await db.put_message("victim", msg("x", "late", "assistant"), TURN, owner="squatter")
    with pytest.raises(TurnNotOwned):
        await db.add_messages("victim", [msg("y", "late")], TURN, owner="squatter")
    with pytest.raises(TurnNotOwned):
        await db.save_turn(record("squatter", status="completed"))
    assert [m.id for m in await db.messages("victim")] == ["turn-1"]

    # the owner writes as before; its own retries keep its data
    await _fill(db, "victim")
    assert await db.claim_turn(record("victim", by_conversation=True, run=1))
    [kept] = await db.steps(TURN, 0)
    assert kept.parts[0].text == "victim's answer"  # type: ignore[union-attr]


async def test_a_run_started_elsewhere_never_takes_a_conversations_turn(
    db: TranscriptStore,
) -> None:
    assert await db.claim_turn(record("victim", by_conversation=True))
    await _fill(db, "victim")
    assert not await db.claim_turn(record("squatter"))
    turn = await db.get_turn(TURN)
    assert turn is not None and turn.owner == "victim"
    assert len(await db.steps(TURN, 0)) == 1
    assert [m.text for m in await db.messages("victim")] == ["hi", "victim's reply"]


async def test_records_from_before_owners_are_adopted_by_their_conversation_only(
    db: TranscriptStore,
) -> None:
    legacy = record("")
    await db.save_turn(legacy)
    await db.save_step(TURN, step(0, "old"))
    assert not await db.claim_turn(record("squatter"))
    # an old in-flight turn's activities, after the deploy, write into it
    await db.save_step(TURN, step(1, "new"), owner="victim")
    assert await db.claim_turn(record("victim", by_conversation=True, run=0))
    assert [s.step for s in await db.steps(TURN, 0)] == [0, 1]
    # writes without an owner (activity inputs from before the deploy) are not checked
    await db.save_step(TURN, step(2), owner=None)


async def test_concurrent_claims_and_writes_never_mix_runs(db: TranscriptStore) -> None:
    """A squatter writing while the conversation takes over: whatever the interleaving, the
    turn ends with no squatter row."""
    assert await db.claim_turn(record("squatter"))

    async def squat() -> None:
        for n in range(30):
            try:
                await db.save_step(TURN, step(n, "squatted"), owner="squatter")
            except TurnNotOwned:
                return

    writer = asyncio.create_task(squat())
    await asyncio.sleep(0)
    assert await db.claim_turn(record("victim", by_conversation=True))
    await writer
    assert await db.steps(TURN, 0) == []


async def test_an_old_sqlite_file_gets_the_owner_column(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    conn.executescript(
        "CREATE TABLE turns (turn_id TEXT PRIMARY KEY, conversation_id TEXT NOT NULL,"
        " turn_number INTEGER NOT NULL, body TEXT NOT NULL);"
    )
    conn.execute(
        "INSERT INTO turns VALUES (?, 'victim', 2, ?)", (TURN, record("").model_dump_json())
    )
    conn.commit()
    conn.close()
    db = SQLiteStore(path)
    await db.open()
    try:
        assert await db.claim_turn(record("victim", by_conversation=True))
        assert (await db.get_turn(TURN)).owner == "victim"  # type: ignore[union-attr]
    finally:
        await db.close()


async def test_a_locked_sqlite_database_is_store_unavailable(tmp_path: Path) -> None:
    path = tmp_path / "locked.db"
    db = SQLiteStore(path)
    await db.open()
    blocker = sqlite3.connect(path, isolation_level=None)
    try:
        db.busy_timeout_ms = 50
        blocker.execute("BEGIN EXCLUSIVE")
        with pytest.raises(StoreUnavailable, match="locked"):
            await db.save_turn(record("a"))
    finally:
        blocker.close()
        await db.close()


async def test_a_claim_counts_the_attempts_of_its_own_run_that_never_ended(
    db: TranscriptStore,
) -> None:
    """``begin_turn`` claims its turn marked ``running``; a claim by the same run that finds
    the mark set counts one attempt that never ended (its worker died). A finished begin
    clears the mark; another run's claim starts from nothing."""
    first = await db.claim_turn(record("victim", by_conversation=True, running="begin:0"))
    assert first is not None and first.crashes == {}
    for deaths in (1, 2):
        again = await db.claim_turn(record("victim", by_conversation=True, running="begin:0"))
        assert again is not None and again.crashes == {"begin:0": deaths}
    stored = await db.get_turn(TURN)
    assert stored is not None and stored.running == "begin:0"
    # the attempt that ends clears the mark and keeps the count
    await db.save_turn(stored.model_copy(update={"running": None}))
    rerun = await db.claim_turn(record("victim", by_conversation=True, running="begin:1"))
    assert rerun is not None and rerun.crashes == {"begin:0": 2}
    # a run that takes the turn over owns none of it
    other = await db.claim_turn(record("other", by_conversation=True, running="begin:0"))
    assert other is not None and other.crashes == {}
    assert await db.claim_turn(record("squatter", running="begin:0")) is None
