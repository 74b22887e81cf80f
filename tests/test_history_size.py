"""History grows with the turn, not with the conversation (DESIGN.md principle 1)."""

from __future__ import annotations

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from durable_turns.messages import Message, TextPart
from tests.support.harness import Harness

ACTIVITY_EVENTS = {
    EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED,
    EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED,
    EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED,
}


async def model_step_bytes(client: Client, workflow_id: str) -> tuple[int, int]:
    """(bytes of the model_step events, bytes of the whole turn history)."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    scheduled: set[int] = set()
    step_bytes = 0
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            if event.activity_task_scheduled_event_attributes.activity_type.name == "model_step":
                scheduled.add(event.event_id)
                step_bytes += event.ByteSize()
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            if event.activity_task_started_event_attributes.scheduled_event_id in scheduled:
                step_bytes += event.ByteSize()
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            if event.activity_task_completed_event_attributes.scheduled_event_id in scheduled:
                step_bytes += event.ByteSize()
    return step_bytes, sum(e.ByteSize() for e in history.events)


def prior_transcript(tokens: int) -> list[Message]:
    """About ``tokens`` tokens (4 characters each) of earlier turns."""
    messages = []
    per_message = 2000  # characters
    for i in range(max(1, tokens * 4 // per_message)):
        role = "user" if i % 2 == 0 else "assistant"
        messages.append(
            Message(id=f"prior-{i}", role=role, parts=[TextPart(text=f"{i} " + "w" * per_message)])
        )
    return messages


async def test_model_step_history_is_flat_in_conversation_size(harness: Harness) -> None:
    harness.start_worker()
    store = await harness.store()
    sizes = {}
    for tokens in (1_000, 100_000):
        conversation = harness.conv(f"hist-{tokens}")
        await store.add_messages(conversation, prior_transcript(tokens))
        result = await harness.send(conversation, "hello", model="demo:echo")
        assert result.status == "completed"
        assert result.usage.input_tokens >= tokens * 0.9  # the model really saw the context
        sizes[tokens] = await model_step_bytes(harness.client, result.workflow_id)
    (small_step, small_turn), (big_step, big_turn) = sizes[1_000], sizes[100_000]
    assert small_step > 0
    assert big_step <= small_step * 1.2, sizes
    assert big_turn <= small_turn * 1.2, sizes
    assert big_turn < 20_000, "a one-step turn's whole history stays a few KB"
