"""The live chunk stream of a turn: complete, ordered, resumable, reset on retries."""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from pathlib import Path

from durable_turns.streams import live_events
from durable_turns.streams.base import StreamEvent
from tests.support.harness import Harness
from tests.support.history import model_step_bytes
from tests.support.probes import chunk_backend, turn_status, wait_until

WEATHER = [
    {"text": "Let me look.", "tool_calls": [{"name": "get_weather", "input": {"city": "Kyiv"}}]},
    {"text": "Forecast: {tool_result}."},
]


def text_of(events: list[StreamEvent]) -> str:
    """What a reader shows: text deltas of the live events, steps separated by a blank line."""
    out: list[str] = []
    for event in live_events(events):
        if event.type == "step-start" and out:
            out.append("\n\n")
        if event.type == "chunk" and event.data["type"] == "text-delta":
            out.append(event.data["text"])
    return "".join(out)


async def test_reader_sees_every_chunk_of_a_multi_step_turn_in_order(harness: Harness) -> None:
    harness.start_worker()
    conversation = harness.conv("live")
    result = await harness.send(conversation, "weather?", model=harness.script(WEATHER))
    streams = await chunk_backend(harness)
    events = await streams.read(result.workflow_id)
    assert [e.offset for e in events] == list(range(len(events)))
    kinds = [e.type if e.type != "chunk" else e.data["type"] for e in events]
    first_tool = kinds.index("tool-call")
    assert kinds[0] == "step-start" and kinds[-1] == "turn-finish"
    assert kinds[1:first_tool].count("text-delta") == 3  # "Let ", "me ", "look."
    assert kinds[first_tool - 2 : first_tool + 5] == [
        "tool-input-start",
        "tool-input-delta",
        "tool-call",
        "step-finish",
        "tool-result",
        "step-start",
        "text-delta",
    ]
    assert events[-1].data["status"] == "completed"
    [_, assistant] = await (await harness.store()).messages(conversation)
    assert text_of(events) == result.text
    assert events[-1].data["text"] == result.text
    assert assistant.metadata["status"] == "completed"
    await streams.close()


async def test_reader_resumes_from_its_offset_exactly_once(harness: Harness) -> None:
    harness.start_worker()
    conversation = harness.conv("resume")
    text = " ".join(f"w{i}" for i in range(40))
    request = await harness.turns.submit(
        conversation, "go", model=harness.script([{"text": text, "delay_ms": 30}])
    )
    number = await harness.turns.turn_number(conversation, request)
    streams = await chunk_backend(harness)
    stream_id = f"{conversation}/turn-{number}"
    seen: list[StreamEvent] = []
    async for event in streams.follow(stream_id):
        seen.append(event)
        if len(seen) == 10:
            break  # the reader disconnects mid-turn
    async for event in streams.follow(stream_id, after=seen[-1].offset):
        seen.append(event)
    assert [e.offset for e in seen] == list(range(len(seen))), "no gaps, no duplicates"
    assert seen[-1].type == "turn-finish"
    assert text_of(seen) == text
    await streams.close()


async def test_two_readers_see_the_same_sequence(harness: Harness) -> None:
    harness.start_worker()
    conversation = harness.conv("two-readers")
    request = await harness.turns.submit(
        conversation, "go", model=harness.script([{"text": "a b c d e f", "delay_ms": 50}])
    )
    number = await harness.turns.turn_number(conversation, request)
    streams = await chunk_backend(harness)

    async def read_all() -> list[StreamEvent]:
        return [e async for e in streams.follow(f"{conversation}/turn-{number}")]

    one, two = await asyncio.gather(read_all(), read_all())
    assert one == two and one[-1].type == "turn-finish"
    await streams.close()


async def test_killed_worker_produces_a_reset_then_the_new_attempt(harness: Harness) -> None:
    first = harness.start_worker()
    conversation = harness.conv("live-crash")
    text = " ".join(f"word{i}" for i in range(30))
    request = await harness.turns.submit(
        conversation, "go", model=harness.script([{"text": text, "delay_ms": 100}])
    )
    await wait_until(lambda: _is_streaming(harness, conversation))
    await asyncio.sleep(0.8)
    first.kill()
    harness.start_worker()
    result = await asyncio.wait_for(harness.turns.wait(conversation, request), 60)
    assert result.status == "completed"
    streams = await chunk_backend(harness)
    events = await streams.read(result.workflow_id)
    resets = [e for e in events if e.type == "reset"]
    assert len(resets) == 1 and resets[0].attempt == 2
    before = [e for e in events if e.offset < resets[0].offset and e.type == "chunk"]
    assert before, "the first attempt had streamed part of the reply"
    assert text_of(events) == result.text == text, "the reader's text equals the persisted reply"
    [_, assistant] = await (await harness.store()).messages(conversation)
    assert assistant.text == text
    await streams.close()


async def _is_streaming(harness: Harness, conversation: str) -> bool:
    return await turn_status(harness, conversation) == "model step 0"


async def test_redis_backend_streams_a_turn(harness: Harness) -> None:
    url = f"redis://127.0.0.1:6379/0?prefix=test-{uuid.uuid4().hex[:8]}:"
    harness.start_worker(TURNS_CHUNK_STREAM_URL=url)
    conversation = harness.conv("redis")
    result = await harness.send(conversation, "weather?", model=harness.script(WEATHER))
    streams = await chunk_backend(harness, url)
    events = await streams.read(result.workflow_id)
    assert events[-1].type == "turn-finish"
    assert text_of(events) == result.text
    await streams.close()


async def test_streaming_does_not_change_history_size(harness: Harness) -> None:
    on = harness.start_worker()
    model = harness.script([{"text": "same reply every time"}])
    r_on = await harness.send(harness.conv("hist-on"), "hi", model=model)
    on.stop()
    harness.start_worker(TURNS_CHUNK_STREAM_URL="none")
    r_off = await harness.send(harness.conv("hist-of"), "hi", model=model)
    (step_on, turn_on), (step_off, turn_off) = [
        await model_step_bytes(harness.client, r.workflow_id) for r in (r_on, r_off)
    ]
    assert abs(step_on - step_off) <= 16 and abs(turn_on - turn_off) <= 64, (turn_on, turn_off)
    streams = await chunk_backend(harness)
    assert await streams.read(r_off.workflow_id) == [], "streaming really was off"
    assert await streams.read(r_on.workflow_id) != []
    await streams.close()


class _WriteLock:
    """Holds the SQLite chunk stream's write lock, as another writer would: appends wait."""

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None, timeout=10)

    def __enter__(self) -> _WriteLock:
        self.conn.execute("BEGIN IMMEDIATE")
        return self

    def __exit__(self, *_: object) -> None:
        self.conn.execute("ROLLBACK")
        self.conn.close()


async def _step_saved(harness: Harness, conversation: str, step: int) -> bool:
    state = await (await harness.store()).turn_state(f"{conversation}/turn-1")
    return state is not None and any(s.step == step for s in state.steps)


async def test_a_step_saved_but_never_streamed_is_streamed_by_its_retry(harness: Harness) -> None:
    """The worker saves the step, cannot write its end to the stream (the file is locked)
    and dies there. The retry finds the step saved and does not ask the model again: it
    writes the saved step to the stream, after a reset, so a reader sees the whole reply
    once (not the first attempt's partial followed by nothing)."""
    first = harness.start_worker()
    conversation = harness.conv("saved-not-streamed")
    text = " ".join(f"word{i}" for i in range(20))
    request = await harness.turns.submit(
        conversation, "go", model=harness.script([{"text": text, "delay_ms": 50}])
    )
    await wait_until(lambda: _is_streaming(harness, conversation))
    await asyncio.sleep(0.3)  # a few chunks are in the stream
    with _WriteLock(harness.tmp / "data" / "chunks.db"):
        await wait_until(lambda: _step_saved(harness, conversation, 0), 30)
        await asyncio.sleep(0.5)  # blocked on its step's end
        first.kill()
    harness.start_worker()
    result = await asyncio.wait_for(harness.turns.wait(conversation, request), 60)
    assert result.status == "completed" and result.text == text
    streams = await chunk_backend(harness)
    events = await streams.read(result.workflow_id)
    await streams.close()
    assert [e.offset for e in events] == list(range(len(events)))
    resets = [e for e in events if e.type == "reset"]
    assert [(e.step, e.attempt) for e in resets] == [(0, 2)]
    assert any(e.type == "chunk" and e.attempt == 1 for e in events), "attempt 1 streamed"
    assert text_of(events) == text, [(e.type, e.step, e.attempt) for e in events]
    live = live_events(events)
    assert [e.type for e in live].count("step-finish") == 1
    assert [e.type for e in events].count("turn-finish") == 1


async def test_a_step_whose_end_cannot_be_streamed_in_time_is_retried(harness: Harness) -> None:
    """The stream stays unwritable past TURNS_STREAM_WRITE_TIMEOUT_S after the step is
    saved: the attempt fails with a retryable ChunkStreamUnavailable (it heartbeated while
    it waited), and the next one streams the saved step, after a reset, without asking the
    model again."""
    harness.start_worker(TURNS_STREAM_WRITE_TIMEOUT_S="3")
    conversation = harness.conv("stream-write-bound")
    text = " ".join(f"word{i}" for i in range(20))
    request = await harness.turns.submit(
        conversation, "go", model=harness.script([{"text": text, "delay_ms": 50}])
    )
    await wait_until(lambda: _is_streaming(harness, conversation))
    await asyncio.sleep(0.3)
    with _WriteLock(harness.tmp / "data" / "chunks.db"):
        await wait_until(lambda: _step_saved(harness, conversation, 0), 30)
        await asyncio.sleep(5)  # past attempt 1's bound; attempt 2 is waiting
    result = await asyncio.wait_for(harness.turns.wait(conversation, request), 60)
    assert result.status == "completed" and result.text == text
    history = await harness.client.get_workflow_handle(result.workflow_id).fetch_history()
    failures = [
        e.activity_task_failed_event_attributes.failure.application_failure_info.type
        for e in history.events
        if e.HasField("activity_task_failed_event_attributes")
    ]
    # the workflow retries a model step (its own schedule per attempt, worker deaths counted
    # apart): the first attempt failed retryably, the second completed
    assert failures == ["ChunkStreamUnavailable"], failures
    steps = [
        e
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
        and e.activity_task_scheduled_event_attributes.activity_type.name == "model_step"
    ]
    assert len(steps) == 2
    streams = await chunk_backend(harness)
    events = await streams.read(result.workflow_id)
    await streams.close()
    assert [e.offset for e in events] == list(range(len(events)))
    assert [(e.step, e.attempt) for e in events if e.type == "reset"] == [(0, 2)]
    assert text_of(events) == text, [(e.type, e.step, e.attempt) for e in events]
    assert [e.type for e in events].count("turn-finish") == 1
