"""Whether a worker is there to run a conversation: asked of the Temporal server, never of
a worker (a workflow query needs a worker to answer it, and without one it waits for its
timeout).

Two public APIs of the server answer it, each with a short RPC timeout
(:data:`PROBE_TIMEOUT_S`):

* ``DescribeTaskQueue`` lists the task queue's pollers with the time each last asked for a
  task. The server records a poll when it starts, and an idle worker's long poll lasts about
  a minute, so a live worker's last access can be ~60 s old: a poller counts for
  :data:`POLLER_FRESH_S`. No poller of the workflow or the activity task queue within it:
  no worker.
* ``DescribeWorkflowExecution`` shows a workflow's pending workflow task and activities: one
  scheduled :data:`TASK_WAIT_S` ago that no worker has taken (a worker died less than
  ``POLLER_FRESH_S`` ago, so its poller is still listed) waits for a worker too.

Workers that poll but do not take an activity have every activity slot busy
(``TURNS_MAX_CONCURRENT_ACTIVITIES``: a worker with no free slot stops polling for
activities, so the task waits in the queue): an activity scheduled :data:`QUEUED_S` ago and
not started while a worker polls is *queued* (``queued: …``), not waiting for a worker. The
one exception is the worker that lost the activity's last attempt (a timeout, or a
``WorkerLost``/``WorkerShutdown`` failure, from the worker its pending info names): listed
alone, it is the dead worker whose poller the server still shows, and the activity waits
for a worker. The server cannot tell a worker that died before starting the activity
from a busy one: until its poller ages out (``POLLER_FRESH_S``) such an activity reads as
queued.

What it costs: two ``DescribeTaskQueue`` RPCs (workflow and activity pollers), plus one
``DescribeWorkflowExecution`` per workflow looked at; no history event, no billable action.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import (
    PendingActivityState,
    PendingWorkflowTaskState,
    TaskQueueKind,
    TaskQueueType,
)
from temporalio.api.failure.v1 import Failure
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflow.v1 import PendingActivityInfo
from temporalio.api.workflowservice.v1 import (
    DescribeTaskQueueRequest,
    DescribeWorkflowExecutionRequest,
    DescribeWorkflowExecutionResponse,
)
from temporalio.client import Client

from durable_turns.contract import WORKER_LOST, WORKER_SHUTDOWN

POLLER_FRESH_S = 80.0
"""A poller counts as a live worker's for this long after its last poll started (an idle
worker polls again about every 60 s: Temporal's long-poll expiry)."""

PROBE_TIMEOUT_S = 2.0
"""The RPC timeout of each probe: a server that does not answer in time says nothing."""

TASK_WAIT_S = 2.0
"""A workflow task or an activity scheduled this long ago and not started waits for a worker."""

QUEUED_S = 1.0
"""An activity scheduled this long ago and not started while workers poll is queued: their
activity slots are busy (a worker with a free slot takes a task in milliseconds)."""

WAITING = "waiting for a worker"
"""How every answer that no worker runs the conversation begins."""

QUEUED = "queued"
"""How every answer that workers poll but a task of the conversation waits for one of their
activity slots begins."""


@dataclass(frozen=True)
class Workers:
    """The workers polling a task queue now (their identities), by task type."""

    task_queue: str
    workflow: tuple[str, ...]
    activity: tuple[str, ...]

    @property
    def polling(self) -> bool:
        """Some worker polls both the workflow and the activity tasks."""
        return bool(self.workflow) and bool(self.activity)

    def problem(self) -> str | None:
        """``waiting for a worker: …`` when none polls, else None."""
        if self.polling:
            return None
        what = (
            "no worker polls"
            if not (self.workflow or self.activity)
            else "no worker polls the workflow tasks of"
            if not self.workflow
            else "no worker polls the activity tasks of"
        )
        return (
            f"{WAITING}: {what} task queue {self.task_queue!r} (within the last"
            f" {POLLER_FRESH_S:.0f} s); start one with `turns worker`"
        )


def _timeout() -> timedelta:
    return timedelta(seconds=PROBE_TIMEOUT_S)


async def pollers(client: Client, task_queue: str, kind: TaskQueueType.ValueType) -> list[str]:
    """The identities that polled ``task_queue`` for ``kind`` tasks within
    :data:`POLLER_FRESH_S` (the server lists a gone worker's poller for minutes)."""
    response = await client.workflow_service.describe_task_queue(
        DescribeTaskQueueRequest(
            namespace=client.namespace,
            task_queue=TaskQueue(name=task_queue, kind=TaskQueueKind.TASK_QUEUE_KIND_NORMAL),
            task_queue_type=kind,
        ),
        timeout=_timeout(),
    )
    now = time.time()
    return sorted(
        {
            p.identity
            for p in response.pollers
            if not p.HasField("last_access_time")
            or now - p.last_access_time.ToNanoseconds() / 1e9 <= POLLER_FRESH_S
        }
    )


async def workers(client: Client, task_queue: str) -> Workers:
    """Who polls ``task_queue`` now (two RPCs, concurrently)."""
    wf, act = await asyncio.gather(
        pollers(client, task_queue, TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW),
        pollers(client, task_queue, TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY),
    )
    return Workers(task_queue, tuple(wf), tuple(act))


async def describe(client: Client, workflow_id: str) -> DescribeWorkflowExecutionResponse:
    """The workflow's latest run, described (one RPC, short timeout)."""
    return await client.workflow_service.describe_workflow_execution(
        DescribeWorkflowExecutionRequest(
            namespace=client.namespace, execution=WorkflowExecution(workflow_id=workflow_id)
        ),
        timeout=_timeout(),
    )


def waiting_task(
    described: DescribeWorkflowExecutionResponse,
    what: str,
    wait_s: float = TASK_WAIT_S,
    known: Workers | None = None,
) -> str | None:
    """``waiting for a worker: …`` when the described workflow's pending workflow task, or
    one of its activities, was ready ``wait_s`` ago and no worker took it; ``queued: …``
    when ``known`` (the task queue's workers) poll and one of its activities was ready
    :data:`QUEUED_S` ago: their activity slots are busy."""
    now = time.time()
    task = described.pending_workflow_task
    if (
        described.HasField("pending_workflow_task")
        and task.state == PendingWorkflowTaskState.PENDING_WORKFLOW_TASK_STATE_SCHEDULED
    ):
        waited = now - _seconds(task.scheduled_time)
        if waited >= wait_s:
            return f"{WAITING}: {what}'s workflow task has waited {waited:.0f} s for one"
    for activity in described.pending_activities:
        if activity.state != PendingActivityState.PENDING_ACTIVITY_STATE_SCHEDULED:
            continue
        ready = max(
            _seconds(activity.scheduled_time),
            _seconds(activity.next_attempt_schedule_time),
            _seconds(activity.last_attempt_complete_time),
        )
        if not ready:
            continue
        waited, name = now - ready, activity.activity_type.name or "activity"
        busy = _busy(activity, known)
        if busy and waited >= QUEUED_S:
            return (
                f"{QUEUED}: every worker's activity slots are busy ({busy}): {what}'s {name}"
                f" has waited {waited:.1f} s for one (TURNS_MAX_CONCURRENT_ACTIVITIES sets a"
                " worker's slots)"
            )
        if not busy and waited >= wait_s:
            return f"{WAITING}: {what}'s {name} has waited {waited:.0f} s for one"
    return None


def _busy(activity: PendingActivityInfo, known: Workers | None) -> str | None:
    """Who is too busy to take ``activity``: the workers that poll its task queue, but for
    the one that lost its last attempt (a dead worker's poller stays listed); None when no
    other worker polls."""
    if known is None:
        return None
    lost = activity.last_worker_identity if _worker_lost(activity.last_failure) else None
    others = [w for w in known.activity if w != lost]
    if not others:
        return None
    count = f"{len(others)} worker{'s' if len(others) > 1 else ''}"
    return f"{count} polling task queue {known.task_queue!r}"


def _worker_lost(failure: Failure) -> bool:
    """The failure (or a cause of it) says the attempt's worker went away: a timeout (a
    heartbeat's, a start-to-close's), or a ``WorkerLost``/``WorkerShutdown`` failure
    (liveness, a hand-over at shutdown)."""
    while failure.ByteSize():
        if failure.HasField("timeout_failure_info") or (
            failure.HasField("application_failure_info")
            and failure.application_failure_info.type in (WORKER_LOST, WORKER_SHUTDOWN)
        ):
            return True
        failure = failure.cause
    return False


def _seconds(stamp: Any) -> float:
    return float(stamp.ToNanoseconds()) / 1e9 if stamp.ByteSize() else 0.0


def running_turns(described: DescribeWorkflowExecutionResponse) -> list[str]:
    """The workflow ids of a conversation's running turns (its pending child workflows)."""
    return [c.workflow_id for c in described.pending_children]


async def conversation_problem(
    client: Client,
    conversation_id: str,
    *,
    turn_ids: Iterable[str] = (),
    known: Workers | None = None,
    wait_s: float = TASK_WAIT_S,
) -> str | None:
    """``waiting for a worker: …`` when nothing runs the conversation now (no worker polls
    its task queue, or its workflow task or a running turn's task has waited ``wait_s``
    unstarted), ``queued: …`` when workers poll but its or a running turn's activity waits
    for one of their activity slots (:func:`waiting_task`), else None. ``known``: the task
    queue's workers, if asked for already. Raises ``RPCError`` (``NOT_FOUND``: no such
    conversation)."""
    described = await describe(client, conversation_id)
    queue = described.execution_config.task_queue.name
    found = known if known is not None and known.task_queue == queue else None
    polling = found or await workers(client, queue)
    problem = polling.problem()
    if problem:
        return problem
    problem = waiting_task(described, f"conversation {conversation_id!r}", wait_s, polling)
    if problem:
        return problem
    for workflow_id in list(dict.fromkeys([*turn_ids, *running_turns(described)]))[:4]:
        turn = await describe(client, workflow_id)
        problem = waiting_task(turn, f"turn {workflow_id!r}", wait_s, polling)
        if problem:
            return problem
    return None
