"""``startTurn``: a client learns its turn as soon as it starts, then streams and awaits it
without polling."""

from __future__ import annotations

import asyncio

import pytest
from temporalio.client import WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError

from durable_turns.client import TurnsClient
from durable_turns.contract import UPDATE_START
from durable_turns.streams import live_events
from tests.support.harness import Harness

SLOW = [{"text": "one two three four five six", "delay_ms": 200}]


def stream_client(harness: Harness) -> TurnsClient:
    """A client reading the chunk stream where the harness's workers write it."""
    url = f"sqlite:///{harness.tmp / 'data' / 'chunks.db'}"
    return TurnsClient(harness.client, harness.task_queue, stream_url=url)


async def test_start_returns_the_started_turn_then_streams_and_awaits_it(harness: Harness) -> None:
    harness.start_worker()
    client = stream_client(harness)
    conversation = harness.conv("start")
    model = harness.script(SLOW)
    started = await client.start(conversation, "count for me", model=model)
    assert started.turn_number == 1 and started.status == "running"
    assert started.workflow_id == f"{conversation}/turn-1"
    text = "".join(
        e.data["text"]
        for e in live_events([e async for e in client.chunks(conversation, 1)])
        if e.type == "chunk" and e.data["type"] == "text-delta"
    )
    result = await client.result(conversation, started)
    assert result.status == "completed" and result.text == "one two three four five six"
    assert text == result.text
    # a retry with the same request id answers for the same turn, never a second one (the
    # turn's own result was read above: the conversation may record it a moment later)
    again = await client.start(conversation, "count for me", request_id=started.request_id)
    assert (again.turn_number, again.workflow_id) == (1, started.workflow_id)
    assert again.status in ("running", "completed")
    assert (await client.state(conversation)).turn_count == 1
    await client.aclose()


async def test_a_queued_request_starts_when_its_turn_comes(harness: Harness) -> None:
    harness.start_worker()
    client = stream_client(harness)
    conversation = harness.conv("queued")
    slow = harness.script([{"text": "first reply", "delay_ms": 500}])
    first = await client.start(conversation, "first", model=slow)
    second = await client.start(conversation, "second", model="demo:echo")
    assert (first.turn_number, second.turn_number) == (1, 2)
    first_result = await client.result(conversation, first)
    assert first_result.status == "completed"
    assert (await client.result(conversation, second)).text == "You said: second"
    await client.aclose()


async def test_a_request_cancelled_while_queued_comes_back_without_a_turn(harness: Harness) -> None:
    harness.start_worker()
    client = stream_client(harness)
    conversation = harness.conv("cancelled")
    busy = harness.script([{"text": "ok", "delay_ms": 2000}])
    running = await client.start(conversation, "busy", model=busy)
    request = client.request("never runs", model="demo:echo")
    waiting = asyncio.create_task(
        client.start(conversation, "never runs", request_id=str(request["request_id"]))
    )
    await asyncio.sleep(0.5)
    await client.cancel(conversation, str(request["request_id"]))
    record = await asyncio.wait_for(waiting, 20)
    assert record.turn_number is None and record.status == "aborted"
    assert (await client.result(conversation, record)).status == "aborted"
    assert (await client.result(conversation, running)).status == "completed"
    await client.aclose()


async def test_bad_input_to_start_turn_is_rejected_to_the_caller(harness: Harness) -> None:
    harness.start_worker()
    conversation = harness.conv("bad-start")
    await harness.send(conversation, "hello", model="demo:echo")
    handle = harness.client.get_workflow_handle(conversation)
    with pytest.raises(WorkflowUpdateFailedError) as failed:
        await handle.execute_update(UPDATE_START, {"messages": "not a list"})
    assert isinstance(failed.value.cause, ApplicationError)
    assert failed.value.cause.type == "InvalidRequest"
