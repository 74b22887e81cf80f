"""A NUL in an id is refused by every store at once: a typed, non-retryable InvalidRequest
(PostgreSQL cannot store it; retrying it only wasted a minute)."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator

import pytest
from temporalio.exceptions import ApplicationError

from durable_turns.messages import user_message
from durable_turns.store import TranscriptStore, TurnRecord, open_store
from tests.test_store import PG_URL, _url_with_schema


@pytest.fixture(params=["sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: object) -> AsyncIterator[TranscriptStore]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/ids.db"
    else:
        url = _url_with_schema(PG_URL, f"ids_{uuid.uuid4().hex[:8]}")
    s = open_store(url)
    await s.open()
    yield s
    await s.close()
    if request.param == "postgres":
        import asyncpg

        conn = await asyncpg.connect(PG_URL)
        await conn.execute(f'DROP SCHEMA IF EXISTS "{url.rsplit("=", 1)[1]}" CASCADE')
        await conn.close()


async def test_an_id_with_a_nul_is_a_typed_invalid_request(store: TranscriptStore) -> None:
    started = time.monotonic()
    for call in (
        lambda: store.add_messages("conv\x00", [user_message("hi")]),
        lambda: store.messages("conv\x00"),
        lambda: store.messages("conv\x00", superseded=True),
        lambda: store.supersede_messages("conv", "m\x00", "conv/turn-2"),
        lambda: store.get_turn("turn\x00"),
        lambda: store.turn_state("turn\x00", transcript=True),
        lambda: store.save_turn(
            TurnRecord(turn_id="t\x00", conversation_id="c", turn_number=1, request_id="r")
        ),
    ):
        with pytest.raises(ApplicationError) as refused:
            await call()
        assert refused.value.type == "InvalidRequest" and refused.value.non_retryable
        assert "NUL" in refused.value.message
    assert time.monotonic() - started < 2
