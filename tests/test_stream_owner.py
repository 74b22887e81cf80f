"""Issue 25, item 10: a turn's live stream belongs to the run that owns the turn.

A ``TurnWorkflow`` started by hand under another conversation's turn id gets nothing into
that turn's stream: not before the conversation's turn ran (the stream it streamed into is
hidden from the conversation's readers, then taken over) and not while it runs (its appends
are refused, and it stops with TurnTakenOver). Readers, the Python client's ``chunks`` and
the front door's SSE, see the conversation's turn only. On SQLite and on Redis.

Old code: the squatter's chunks and its ``turn-finish`` were in ``<victim>/turn-2``'s
stream; the front door answered the victim's second message with the squatter's reply and
``chunks`` ended at the squatter's ``turn-finish``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from durable_turns.contract import TurnInput, TurnResult
from durable_turns.messages import user_message
from durable_turns.streams import ChunkStreamBackend, StreamEvent, live_events
from tests.support.harness import Harness
from tests.support.probes import chunk_backend, wait_until
from tests.support.web import chat_body, post_chat
from tests.support.web import user_message as ui_message
from tests.test_streams import REDIS_URL, _redis_prefix

SQUAT = "SQUATTED"


@pytest.fixture(params=["sqlite", "redis"])
async def stream_url(request: pytest.FixtureRequest, harness: Harness) -> AsyncIterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{harness.tmp / 'data' / 'chunks.db'}"
    else:
        async for prefix in _redis_prefix():
            yield f"{REDIS_URL}?prefix={prefix}&ttl=600"


def _squat(model: str, conversation: str, turn_number: int) -> TurnInput:
    return TurnInput(
        conversation_id=conversation,
        turn_number=turn_number,
        request_id=f"squat-{uuid.uuid4().hex[:6]}",
        new_messages=[user_message("planted question")],
        model=model,
    )


def _text(events: list[StreamEvent]) -> str:
    return "".join(
        e.data["text"]
        for e in live_events(events)
        if e.type == "chunk" and e.data.get("type") == "text-delta"
    )


def _sse_text(chunks: list[Any]) -> str:
    return "".join(c["delta"] for c in chunks if isinstance(c, dict) and c["type"] == "text-delta")


async def _chunks(harness: Harness, url: str, conversation: str, turn: int) -> list[StreamEvent]:
    harness.turns.stream_url = url
    it = harness.turns.chunks(conversation, turn)
    return await asyncio.wait_for(_collect(it), 30)


async def _collect(it: AsyncIterator[StreamEvent]) -> list[StreamEvent]:
    return [e async for e in it]


async def test_a_squatter_that_ran_first_is_never_read(
    harness: Harness, door: Any, stream_url: str
) -> None:
    harness.start_worker(TURNS_CHUNK_STREAM_URL=stream_url, TURNS_MODEL="demo:echo")
    fd = door(TURNS_CHUNK_STREAM_URL=stream_url)
    victim = harness.conv("victim")
    assert (await harness.send(victim, "one")).text == "You said: one"
    squatter = harness.script([{"text": f"{SQUAT} reply"}])
    done = await harness.client.execute_workflow(
        "TurnWorkflow",
        _squat(squatter, victim, 2),
        id=f"{victim}/turn-2",  # the victim's next turn id
        task_queue=harness.task_queue,
        result_type=TurnResult,
    )
    assert done.status == "completed"  # it ran and streamed, into a stream nobody reads
    streams = await chunk_backend(harness, stream_url)
    try:
        assert SQUAT in _text(await streams.read(f"{victim}/turn-2", by_conversation=False))
        assert await streams.read(f"{victim}/turn-2", by_conversation=True) == []

        # the victim's second message, through the front door: its SSE is the victim's reply
        response, sse = await post_chat(fd.url, chat_body(victim, [ui_message("two", "u2")]))
        assert response.status_code == 200
        assert _sse_text(sse) == "You said: two", sse
        assert sse[-1] == "[DONE]"
        events = await _chunks(harness, stream_url, victim, 2)
        assert _text(events) == "You said: two" and events[-1].type == "turn-finish"
        raw = await streams.read(f"{victim}/turn-2")
        assert SQUAT not in str([e.data for e in raw]), "the squatter's events are gone"
    finally:
        await streams.close()


async def test_a_running_squatter_cannot_write_into_the_turns_stream(
    harness: Harness, stream_url: str
) -> None:
    harness.start_worker(TURNS_CHUNK_STREAM_URL=stream_url)
    victim = harness.conv("victim-live")
    assert (await harness.send(victim, "one", model="demo:echo")).status == "completed"
    slow = harness.script([{"text": " ".join([SQUAT] * 200), "delay_ms": 40}])
    squatter = await harness.client.start_workflow(
        "TurnWorkflow",
        _squat(slow, victim, 2),
        id=f"squat-{uuid.uuid4().hex[:8]}",
        task_queue=harness.task_queue,
        result_type=TurnResult,
    )
    streams: ChunkStreamBackend = await chunk_backend(harness, stream_url)
    try:

        async def squatter_streams() -> bool:
            return len(await streams.read(f"{victim}/turn-2")) > 3

        await wait_until(squatter_streams, 30)
        reader = asyncio.create_task(_chunks(harness, stream_url, victim, 2))
        result = await asyncio.wait_for(harness.send(victim, "two", model="demo:echo"), 30)
        assert result.text == "You said: two"
        squatted = await asyncio.wait_for(squatter.result(), 30)
        assert squatted.status == "error" and squatted.error is not None
        assert squatted.error.type == "TurnTakenOver", squatted.error
        events = await reader
        assert _text(events) == "You said: two", [e.data for e in events]
        assert SQUAT not in str([e.data for e in await streams.read(f"{victim}/turn-2")])
        claim = await streams.claim(f"{victim}/turn-2")
        assert claim is not None and claim.by_conversation
    finally:
        await streams.close()
