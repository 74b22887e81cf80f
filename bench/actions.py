"""Temporal Cloud's billable actions, counted from workflow histories and from the dev
server's own metrics (``bench.cost``).

The rules are Temporal Cloud's list of actions (docs.temporal.io/cloud/actions; the
pricing page, docs.temporal.io/cloud/pricing, lists the same operations), applied to the
events of a history. Two kinds of action leave no event: heartbeats that reach the server
and queries; ``bench.cost`` counts them from the server's request metrics
(:func:`scrape`, :func:`requests`) and adds them.
"""

from __future__ import annotations

import re
import urllib.request
from collections import Counter
from collections.abc import Iterable
from typing import Any

from temporalio.api.enums.v1 import EventType

E = EventType
RULES: dict[str, str] = {
    "workflow started": "WorkflowExecutionStarted of a client start or a continue-as-new: 1;"
    " of a child workflow: 0 (its parent's StartChildWorkflowExecutionInitiated counts 2:"
    " the intent and the start); a start de-duplicated by update-with-start on a running"
    " workflow leaves no event and costs nothing",
    "child workflow": "StartChildWorkflowExecutionInitiated: 2",
    "signal": "WorkflowExecutionSignaled: 1, except the signal of a signal-with-start that"
    " started the workflow (event 2 right after the start: 1 in all with the start)",
    "update": "WorkflowExecutionUpdateAccepted: 1 (a rejected update leaves no event)",
    "activity": "ActivityTaskScheduled: 1, and ActivityTaskStarted's attempt − 1 (retries)",
    "local activities": "MarkerRecorded: all markers of one workflow task together 1 (Cloud"
    " counts a workflow task's RecordMarker commands as one action); plus"
    " WorkflowTaskCompleted's metering_metadata.nonfirst_local_activity_execution_attempts",
    "timer": "TimerStarted: 1",
    "search attributes": "UpsertWorkflowSearchAttributes: 1 (a start's own search attributes"
    " cost nothing)",
    "workflow options": "WorkflowExecutionOptionsUpdated: 1",
    "nexus": "NexusOperationScheduled and NexusOperationCancelRequested: 1",
    "heartbeats": "not in histories: RecordActivityTaskHeartbeat requests the server"
    " answered (its service_requests metric), each 1",
    "queries": "not in histories: QueryWorkflow requests (service_requests), each 1",
    "free": "signals a workflow sends (counted on the signaled side), workflow tasks, memo"
    " upserts (WorkflowPropertiesModified), completions, cancellations, describes, history"
    " reads",
}
"""Per kind of action: which events count and how many (written into the results)."""


def billable_actions(events: Iterable[Any]) -> Counter[str]:
    """Actions per kind (``RULES``' keys) in one workflow history's events."""
    counts: Counter[str] = Counter()
    marker_tasks: set[int] = set()
    previous = None
    for event in events:
        kind = event.event_type
        if kind == E.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            attrs = event.workflow_execution_started_event_attributes
            if not attrs.HasField("parent_workflow_execution"):
                counts["workflow started"] += 1
        elif kind == E.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
            counts["child workflow"] += 2
        elif kind == E.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            with_start = (
                previous is not None
                and previous.event_type == E.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED
                and event.event_id == 2
                and not previous.workflow_execution_started_event_attributes.HasField(
                    "parent_workflow_execution"
                )
            )
            if not with_start:
                counts["signal"] += 1
        elif kind == E.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            counts["update"] += 1
        elif kind == E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            counts["activity"] += 1
        elif kind == E.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            counts["activity"] += max(0, event.activity_task_started_event_attributes.attempt - 1)
        elif kind == E.EVENT_TYPE_MARKER_RECORDED:
            task = event.marker_recorded_event_attributes.workflow_task_completed_event_id
            if task not in marker_tasks:
                marker_tasks.add(task)
                counts["local activities"] += 1
        elif kind == E.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            meta = event.workflow_task_completed_event_attributes.metering_metadata
            counts["local activities"] += meta.nonfirst_local_activity_execution_attempts
        elif kind == E.EVENT_TYPE_TIMER_STARTED:
            counts["timer"] += 1
        elif kind == E.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
            counts["search attributes"] += 1
        elif kind == E.EVENT_TYPE_WORKFLOW_EXECUTION_OPTIONS_UPDATED:
            counts["workflow options"] += 1
        elif kind in (
            E.EVENT_TYPE_NEXUS_OPERATION_SCHEDULED,
            E.EVENT_TYPE_NEXUS_OPERATION_CANCEL_REQUESTED,
        ):
            counts["nexus"] += 1
        previous = event
    return +counts


# --- the dev server's metrics ------------------------------------------------------------------

LINE = re.compile(r"^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')

Metrics = dict[tuple[str, tuple[tuple[str, str], ...]], float]
"""Prometheus samples: (name, sorted labels) → value."""


def parse_metrics(text: str) -> Metrics:
    out: Metrics = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = LINE.match(line)
        if not match:
            continue
        labels = tuple(sorted(LABEL.findall(match.group(2) or "")))
        try:
            out[(match.group(1), labels)] = float(match.group(3))
        except ValueError:
            continue
    return out


def scrape(port: int) -> Metrics:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        return parse_metrics(answer.read().decode())


def delta(before: Metrics, after: Metrics, name: str, **labels: str) -> float:
    """The growth of the counter ``name`` (summed over the samples whose labels include
    ``labels``) from ``before`` to ``after``."""

    def total(metrics: Metrics) -> float:
        return sum(
            v
            for (n, ls), v in metrics.items()
            if n == name and all((k, want) in ls for k, want in labels.items())
        )

    return total(after) - total(before)


def requests(before: Metrics, after: Metrics, operation: str) -> int:
    """The frontend's ``operation`` requests in the ``default`` namespace between two scrapes."""
    return round(
        delta(
            before,
            after,
            "service_requests",
            operation=operation,
            namespace="default",
            service_name="frontend",
        )
    )


def action_metric(before: Metrics, after: Metrics) -> dict[str, float]:
    """The server's own ``action`` counter in the ``default`` namespace between two scrapes,
    per ``action_type`` label (empty when the server exposes none)."""
    out: dict[str, float] = {}
    for (name, labels), value in after.items():
        if name != "action" or ("namespace", "default") not in labels:
            continue
        kind = dict(labels).get("action_type") or dict(labels).get("operation") or "?"
        out[kind] = out.get(kind, 0.0) + value - before.get((name, labels), 0.0)
    return {k: v for k, v in out.items() if v}
