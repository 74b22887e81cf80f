"""cancelChat through the chunk stream's cancel mark: a long streaming step stops without the
heartbeats that used to carry the cancel (``streams.cancel``).

Real dev server, real worker process, the real Anthropic SDK against the local wire server
streaming a long paced reply, at the default 30 s heartbeat timeout. What proves the mark
(not Temporal's cancellation at a heartbeat) stopped the step: the step's activity
*completed* (``outcome="stopped"``) rather than being cancelled, and the step's heartbeats
(each heartbeat's detail counts them; the server's ``describe`` shows the last one) stay a
handful where one each quarter second used to go.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from bench.scale import sse_body
from durable_turns.client import TurnsClient
from durable_turns.contract import MARK_CANCEL, SHARE_KEY, SIGNAL_CANCEL, turn_workflow_id
from durable_turns.streams import MemoryBackend
from durable_turns.streams.cancel import CancelWatch, mark_key
from durable_turns.streams.sqlite import SQLiteStreamBackend
from testkit.llm_server import LLMServer, Reply
from tests.support.harness import Harness
from tests.support.probes import wait_until

KEY = "sk-ant-api03-TESTSECRETKEY0123456789abcdef"
MODEL = "anthropic:claude-test-model"
TOKENS = 3000
"""At 40 tokens a second the reply would stream for 75 s: the cancel always cuts it short."""


def start(harness: Harness, server: LLMServer) -> TurnsClient:
    chunks = f"sqlite:///{harness.tmp / 'chunks.db'}"
    harness.start_worker(
        ANTHROPIC_BASE_URL=server.base_url,
        ANTHROPIC_API_KEY=KEY,
        TURNS_HEARTBEAT_TIMEOUT_S="30",  # the default: a heartbeat each 7.5 s at most
        TURNS_CHUNK_STREAM_URL=chunks,
    )
    server.push(Reply(body=sse_body(TOKENS), first_token_s=0.2, tokens_per_s=40))
    return TurnsClient(harness.client, harness.task_queue, chunks)


async def beats_so_far(client: Client, workflow_id: str) -> int:
    """How many heartbeats the turn's running activity has sent, by its last heartbeat's
    detail as the server keeps it (0: none yet)."""
    description = await client.get_workflow_handle(workflow_id).describe()
    [pending] = description.raw_description.pending_activities
    if not pending.heartbeat_details.payloads:
        return 0
    details = await client.data_converter.decode(pending.heartbeat_details.payloads)
    share = details[-1]
    assert isinstance(share, dict) and SHARE_KEY in share
    return int(share["beats"])


async def streamed_then_stopped(
    turns: TurnsClient, conversation: str, turn_number: int, streamed: list[str]
) -> str:
    """Follow the turn's chunk stream to its end; its final status."""
    async for event in turns.chunks(conversation, turn_number):
        if event.type == "chunk" and event.data.get("type") == "text-delta":
            streamed.append(event.data["text"])
        if event.type == "turn-finish":
            return str(event.data["status"])
    raise AssertionError("the stream ended without turn-finish")


async def step_events(client: Client, workflow_id: str) -> list[Any]:
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    return [e.event_type for e in history.events]


async def cancelled_mid_stream(
    harness: Harness, server: LLMServer, name: str, cancel: Any
) -> tuple[TurnsClient, str, str, int]:
    """Start a long streaming turn, let it stream a few seconds, cancel it with ``cancel``;
    (the client, the conversation, the turn's workflow id, its heartbeats by then)."""
    turns = start(harness, server)
    conversation = harness.conv(name)
    request = await turns.submit(conversation, "Talk for a while", model=MODEL)
    number = await turns.turn_number(conversation, request)
    workflow_id = turn_workflow_id(conversation, number)
    streamed: list[str] = []
    follower = asyncio.create_task(streamed_then_stopped(turns, conversation, number, streamed))
    await wait_until(lambda: len(streamed) >= 400, within=60)  # ten seconds of tokens
    beats = await beats_so_far(harness.client, workflow_id)
    await cancel(turns, conversation, request)
    assert await asyncio.wait_for(follower, 60) == "aborted"
    result = await asyncio.wait_for(turns.wait(conversation, request), 60)
    assert result.status == "aborted"
    assert len(streamed) < TOKENS, "the stream stopped before the reply's end"
    [_, partial] = await (await harness.store()).messages(conversation)
    assert partial.metadata["status"] == "aborted"
    assert partial.text.startswith("w0 w1 w2 "), "what had streamed is kept"
    await turns.aclose()
    return turns, conversation, workflow_id, beats


async def test_cancel_chat_lands_through_the_mark_without_frequent_heartbeats(
    server: LLMServer, harness: Harness
) -> None:
    async def cancel(turns: TurnsClient, conversation: str, request: str) -> None:
        await turns.cancel(conversation, request)  # the client writes the mark, then signals

    _, _, workflow_id, beats = await cancelled_mid_stream(harness, server, "mark", cancel)
    # ten seconds in: a heartbeat each 7.5 s (a quarter of the timeout), where one each
    # 0.25 s (forty) carried the cancel before
    assert 1 <= beats <= 3, f"{beats} heartbeats in the first ten seconds of the step"
    events = await step_events(harness.client, workflow_id)
    assert EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED in events, "the step stopped itself"
    assert EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED not in events


async def test_a_raw_signal_cancel_writes_the_mark_from_the_workflow(
    server: LLMServer, harness: Harness
) -> None:
    async def cancel(turns: TurnsClient, conversation: str, request: str) -> None:
        # what any Temporal client sends: no mark written beforehand
        await harness.client.get_workflow_handle(conversation).signal(SIGNAL_CANCEL, {})

    _, conversation, workflow_id, beats = await cancelled_mid_stream(harness, server, "raw", cancel)
    assert 1 <= beats <= 3, f"{beats} heartbeats in the first ten seconds of the step"
    events = await step_events(harness.client, workflow_id)
    assert EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED in events, "the mark stopped the step"
    assert EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED not in events
    history = await harness.client.get_workflow_handle(conversation).fetch_history()
    markers = [
        e.marker_recorded_event_attributes
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
    ]
    names = [str(m.details) for m in markers]
    assert any(MARK_CANCEL in n for n in names), "the conversation wrote the mark"


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_marks_are_read_for_every_watched_step_at_once(kind: str, tmp_path: Any) -> None:
    backend = (
        MemoryBackend(f"marks-{tmp_path.name}")
        if kind == "memory"
        else SQLiteStreamBackend(tmp_path / "chunks.db")
    )
    async with backend:
        watch = CancelWatch(backend, 0.02)
        found: list[str] = []
        keys = [mark_key("conv", f"req-{i}") for i in range(5)]
        with contextlib.ExitStack() as scopes:
            for key in keys:
                scopes.enter_context(watch.watch(key, functools.partial(found.append, key)))
            assert await backend.cancel_marks(keys) == set()
            assert await backend.mark_cancel(keys[3])
            await wait_until(lambda: found)
            reads = watch.reads
            await wait_until(lambda: watch.reads >= reads + 3)
        assert found == [keys[3]], "a mark is reported once, for its own step only"
        assert watch.watched == 0
        assert await backend.cancel_marks([*keys, mark_key("other", "req-3")]) == {keys[3]}
