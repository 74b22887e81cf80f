"""Reading workflow histories: what was scheduled, retried, and how many bytes it took."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client

from durable_turns.contract import MODEL_STEP, TOOL_CALL
from durable_turns.messages import Message, Role, TextPart
from tests.support.harness import Harness


def _timeless_bytes(event: HistoryEvent) -> int:
    """An event's encoded size without its timestamp and the server's task id: both are
    varints, so the same event takes a byte or two more or less depending on the clock and
    on how far the server's counter has gone."""
    timeless = HistoryEvent()
    timeless.CopyFrom(event)
    timeless.ClearField("event_time")
    timeless.ClearField("task_id")
    return timeless.ByteSize()


async def model_step_bytes(client: Client, workflow_id: str) -> tuple[int, int]:
    """(bytes of the model_step events, bytes of the whole turn history), timestamps and task ids
    left out."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    scheduled: set[int] = set()
    step_bytes = 0
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            if event.activity_task_scheduled_event_attributes.activity_type.name == "model_step":
                scheduled.add(event.event_id)
                step_bytes += _timeless_bytes(event)
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            if event.activity_task_started_event_attributes.scheduled_event_id in scheduled:
                step_bytes += _timeless_bytes(event)
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            if event.activity_task_completed_event_attributes.scheduled_event_id in scheduled:
                step_bytes += _timeless_bytes(event)
    return step_bytes, sum(_timeless_bytes(e) for e in history.events)


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


def local_activity_marker(event: Any) -> dict[str, Any] | None:
    """A local activity's marker (begin/finish/fail turn run as local activities): its
    ``activity_type`` and ``attempt``; None for any other event."""
    if event.event_type != EventType.EVENT_TYPE_MARKER_RECORDED:
        return None
    attrs = event.marker_recorded_event_attributes
    if attrs.marker_name != "core_local_activity":
        return None
    data: dict[str, Any] = json.loads(attrs.details["data"].payloads[0].data)
    return data


async def activity_attempts(harness: Harness, workflow_id: str, activity: str) -> list[int]:
    """The attempt number recorded for each scheduled ``activity`` in a turn's history
    (for a local activity, the attempt its marker records)."""
    history = await harness.client.get_workflow_handle(workflow_id).fetch_history()
    scheduled = {
        e.event_id
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == activity
    }
    counted = {  # the attempt the workflow counted, in the activity's input (0: Temporal's)
        e.event_id: _input_attempt(e.activity_task_scheduled_event_attributes.input)
        if activity in (MODEL_STEP, TOOL_CALL)
        else 0
        for e in history.events
        if e.event_id in scheduled
    }
    attempts = []
    for e in history.events:
        if (
            e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
            and e.activity_task_started_event_attributes.scheduled_event_id in scheduled
        ):
            started = e.activity_task_started_event_attributes
            attempts.append(counted[started.scheduled_event_id] or started.attempt)
        elif (marker := local_activity_marker(e)) is not None and marker[
            "activity_type"
        ] == activity:
            attempts.append(int(marker["attempt"]))
    return attempts


def _input_attempt(payloads: Any) -> int:
    try:
        value = json.loads(payloads.payloads[0].data)
    except (IndexError, ValueError):
        return 0
    return int(value.get("attempt") or 0) if isinstance(value, dict) else 0


async def scheduled(harness: Harness, workflow_id: str) -> list[str]:
    """The activities a turn ran, in order: scheduled ones and local ones (by their markers)."""
    history = await harness.client.get_workflow_handle(workflow_id).fetch_history()
    names = []
    for e in history.events:
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            names.append(e.activity_task_scheduled_event_attributes.activity_type.name)
        elif (marker := local_activity_marker(e)) is not None:
            names.append(str(marker["activity_type"]))
    return names


async def activity_spans(
    harness: Harness, workflow_id: str, activity: str
) -> list[tuple[datetime, datetime | None]]:
    """When each attempt of a scheduled ``activity`` in a workflow's history started, and
    when it completed (None: it did not)."""
    history = await harness.client.get_workflow_handle(workflow_id).fetch_history()
    spans: dict[int, tuple[datetime, datetime | None]] = {}
    names: dict[int, str] = {}
    for e in history.events:
        at = e.event_time.ToDatetime()
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            names[e.event_id] = e.activity_task_scheduled_event_attributes.activity_type.name
        elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            spans[e.activity_task_started_event_attributes.scheduled_event_id] = (at, None)
        elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            key = e.activity_task_completed_event_attributes.scheduled_event_id
            spans[key] = (spans[key][0], at)
    return [span for key, span in spans.items() if names.get(key) == activity]
