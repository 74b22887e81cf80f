"""``bench.actions``: Temporal Cloud's action rules over a small synthetic history, and the
metrics parser the cross-check reads."""

from __future__ import annotations

from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent

from bench.actions import action_metric, billable_actions, parse_metrics, requests

E = EventType


def event(event_id: int, kind: int, **attrs: Any) -> HistoryEvent:
    e = HistoryEvent(event_id=event_id, event_type=kind)  # type: ignore[arg-type]
    for field, values in attrs.items():
        getattr(e, field).SetInParent()
        for key, value in values.items():
            target = getattr(e, field)
            *path, last = key.split(".")
            for part in path:
                target = getattr(target, part)
            setattr(target, last, value)
    return e


def test_rules_count_a_conversation_turn_and_a_signal_with_start() -> None:
    conversation = [
        event(1, E.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED),
        event(2, E.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED),  # signal-with-start: 1 with event 1
        event(3, E.EVENT_TYPE_WORKFLOW_TASK_COMPLETED),
        event(4, E.EVENT_TYPE_MARKER_RECORDED, marker_recorded_event_attributes={
            "workflow_task_completed_event_id": 3}),
        event(5, E.EVENT_TYPE_MARKER_RECORDED, marker_recorded_event_attributes={
            "workflow_task_completed_event_id": 3}),  # same task: one action for both
        event(6, E.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED),
        event(7, E.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED),
        event(8, E.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED),  # a later signal: 1
        event(9, E.EVENT_TYPE_WORKFLOW_TASK_COMPLETED, workflow_task_completed_event_attributes={
            "metering_metadata.nonfirst_local_activity_execution_attempts": 2}),
        event(10, E.EVENT_TYPE_MARKER_RECORDED, marker_recorded_event_attributes={
            "workflow_task_completed_event_id": 9}),
        event(11, E.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES),
        event(12, E.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED),  # memo: free
    ]  # fmt: skip
    assert billable_actions(conversation) == {
        "workflow started": 1,
        "signal": 1,
        "local activities": 2 + 2,
        "update": 1,
        "child workflow": 2,
        "search attributes": 1,
    }
    child = [
        event(1, E.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED, workflow_execution_started_event_attributes={
            "parent_workflow_execution.workflow_id": "conv"}),  # counted by its parent
        event(2, E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED),
        event(3, E.EVENT_TYPE_ACTIVITY_TASK_STARTED, activity_task_started_event_attributes={
            "attempt": 3}),  # two retries
        event(4, E.EVENT_TYPE_TIMER_STARTED),
    ]  # fmt: skip
    assert billable_actions(child) == {"activity": 1 + 2, "timer": 1}


def test_metrics_counters_between_two_scrapes() -> None:
    def scrape(heartbeats: int, actions: int) -> str:
        return "\n".join(
            [
                "# TYPE service_requests counter",
                'service_requests{namespace="default",operation="RecordActivityTaskHeartbeat",'
                f'service_name="frontend"}} {heartbeats}',
                'service_requests{namespace="default",operation="RecordActivityTaskHeartbeat",'
                f'service_name="history"}} {heartbeats}',  # the same requests, one hop on
                f'action{{action_type="command_ScheduleActivityTask",namespace="default"}} {actions}',
                f'action{{action_type="grpc_StartWorkflowExecution",namespace="temporal_system"}} {actions}',
            ]
        )

    before, after = parse_metrics(scrape(5, 1)), parse_metrics(scrape(9, 4))
    assert requests(before, after, "RecordActivityTaskHeartbeat") == 4
    assert action_metric(before, after) == {"command_ScheduleActivityTask": 3}
