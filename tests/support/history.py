"""Reading workflow histories: what was scheduled, retried, and how many bytes it took."""

from __future__ import annotations

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from durable_turns.messages import Message, Role, TextPart
from tests.support.harness import Harness


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
        role: Role = "user" if i % 2 == 0 else "assistant"
        messages.append(
            Message(id=f"prior-{i}", role=role, parts=[TextPart(text=f"{i} " + "w" * per_message)])
        )
    return messages


async def activity_attempts(harness: Harness, workflow_id: str, activity: str) -> list[int]:
    """The attempt number recorded for each scheduled ``activity`` in a turn's history."""
    history = await harness.client.get_workflow_handle(workflow_id).fetch_history()
    scheduled = {
        e.event_id
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == activity
    }
    return [
        e.activity_task_started_event_attributes.attempt
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
        and e.activity_task_started_event_attributes.scheduled_event_id in scheduled
    ]


async def scheduled(harness: Harness, workflow_id: str) -> list[str]:
    history = await harness.client.get_workflow_handle(workflow_id).fetch_history()
    return [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
