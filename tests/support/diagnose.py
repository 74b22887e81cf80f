"""What a failed test's world looked like: its open workflows and the tail of its workers' logs.

The ``harness`` fixture prints this after a test fails, so a failure seen only on CI (a turn
that never finished under load) says where it stood: each open workflow's pending workflow
task (a nondeterminism error fails it in a loop), its pending activities with their attempts
and last failures, the last events of its history, and what each worker process logged last.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client

from tests.support.harness import Harness

MAX_WORKFLOWS = 8
LAST_EVENTS = 25
LOG_TAIL = 3000
FAILURES = (
    "workflow_task_failed_event_attributes",
    "activity_task_timed_out_event_attributes",
    "activity_task_failed_event_attributes",
)
"""The events whose failure message is shown beside them."""


async def explain(harness: Harness, timeout_s: float = 20.0) -> str:
    """A report of the harness' task queue and workers; never raises (it is a diagnosis)."""
    parts: list[str] = []
    try:
        parts += await asyncio.wait_for(_workflows(harness.client, harness.task_queue), timeout_s)
    except Exception as e:  # the server may be what failed
        parts.append(f"(workflows not read: {type(e).__name__}: {e})")
    for i, worker in enumerate(harness.workers):
        state = "running" if worker.proc.poll() is None else f"exited {worker.proc.returncode}"
        parts.append(f"--- worker {i} (pid {worker.proc.pid}, {state}), its log's tail:")
        parts.append(worker.log_tail(LOG_TAIL))
    return "\n".join(parts)


async def _workflows(client: Client, queue: str) -> list[str]:
    lines: list[str] = []
    query = f'TaskQueue="{queue}" AND ExecutionStatus="Running"'
    count = 0
    async for ex in client.list_workflows(query):
        count += 1
        if count > MAX_WORKFLOWS:
            lines.append("… more open workflows")
            break
        handle = client.get_workflow_handle(ex.id, run_id=ex.run_id)
        desc = await handle.describe()
        raw = desc.raw_description
        lines.append(f"=== open {ex.workflow_type} {ex.id} (run {ex.run_id})")
        if raw.HasField("pending_workflow_task"):
            task = raw.pending_workflow_task
            lines.append(f"pending workflow task: state {task.state}, attempt {task.attempt}")
        for act in raw.pending_activities:
            failure = act.last_failure.message if act.HasField("last_failure") else ""
            lines.append(
                f"pending activity {act.activity_type.name} (id {act.activity_id}): state"
                f" {act.state}, attempt {act.attempt}, last failure: {failure[:300]!r}"
            )
        events = [e async for e in handle.fetch_history_events()]
        lines.append(f"history: {len(events)} events; the last {LAST_EVENTS}:")
        lines.extend(_describe_events(events[-LAST_EVENTS:]))
    if not count:
        lines.append(f"(no open workflow on {queue})")
    return lines


def _describe_events(events: Iterable[HistoryEvent]) -> list[str]:
    lines = []
    for event in events:
        kind = EventType.Name(event.event_type)
        detail = ""
        attributes = event.WhichOneof("attributes")
        if attributes in FAILURES:
            detail = f": {getattr(event, attributes).failure.message[:400]}"
        lines.append(f"  {event.event_id} {kind.removeprefix('EVENT_TYPE_')}{detail}")
    return lines
