"""4 · Crash recovery: ``kill -9`` the worker during a model step, a standby finishes the turn.

Two engine worker processes serve the task queue (``TURNS_HEARTBEAT_TIMEOUT_S=2``). A turn
starts whose model step streams two chunks and then goes silent for a minute, on its first
attempt only (so the retried attempt streams at once and what we time is the recovery, not
a replay of the scripted slowness). The worker running the step (its identity, ``pid@host``,
is in the workflow's pending activity) is killed with SIGKILL; we time from the kill to the
turn's completion, and subtract the heartbeat timeout: what is left is what the recovery
costs beyond the configured detection time (the retry policy's first backoff, the SDK's
heartbeat throttling, the rest of the turn).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from temporalio.api.enums.v1 import EventType, PendingActivityState, TimeoutType
from temporalio.api.history.v1 import History

from bench.common import (
    Bench,
    Row,
    WorkerProcess,
    activity_spans,
    median,
    ms,
    script,
    start_engine_worker,
)
from durable_turns.client import TurnsClient
from durable_turns.contract import TurnResult, turn_workflow_id

HEARTBEAT_TIMEOUT_S = 2.0


async def running_step_pid(b: Bench, workflow_id: str) -> int:
    """The pid of the worker running the turn's model step, once two chunks are out."""
    handle = b.client.get_workflow_handle(workflow_id)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            desc = await handle.describe()
            for act in desc.raw_description.pending_activities:
                started = act.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
                if act.activity_type.name == "model_step" and started and act.last_worker_identity:
                    await asyncio.sleep(0.3)  # mid-stream: the stall has begun
                    return int(act.last_worker_identity.split("@", 1)[0])
        except Exception:
            pass  # the turn workflow is not there yet
        await asyncio.sleep(0.05)
    raise TimeoutError("the model step never started")


async def one_crash(
    b: Bench, turns: TurnsClient, workers: list[WorkerProcess], model: str
) -> dict[str, Any]:
    conversation = f"crash-{uuid.uuid4().hex[:8]}"
    await turns.submit(conversation, "tell me", model=model)
    workflow_id = turn_workflow_id(conversation, 1)
    pid = await running_step_pid(b, workflow_id)
    [victim] = [w for w in workers if w.pid == pid]
    victim.kill()
    killed_wall, killed = datetime.now(UTC), time.perf_counter()
    workers.remove(victim)
    result = await b.client.get_workflow_handle(workflow_id, result_type=TurnResult).result()
    done = time.perf_counter() - killed
    assert result.status == "completed", result
    history = await b.client.get_workflow_handle(workflow_id).fetch_history()
    # the workflow schedules each attempt itself: the last span is the retry that finished
    spans = activity_spans(history, "model_step")
    step = spans[-1]
    retried = (step["started"].replace(tzinfo=UTC) - killed_wall).total_seconds()
    return {
        "kill_to_done_s": done,
        "kill_to_retry_start_s": retried,
        "attempt": len(spans) if len(spans) > 1 else step["attempt"],
        "sticky_wait_s": sticky_wait(history),
    }


def sticky_setting() -> str:
    from durable_turns import runtime

    timeout = getattr(runtime, "STICKY_TIMEOUT", None)
    if timeout is None:
        return "the SDK's sticky_queue_schedule_to_start_timeout, 10 s by default"
    return f"the worker's sticky_queue_schedule_to_start_timeout is {timeout.total_seconds():g} s"


def sticky_wait(history: History) -> float:
    """Seconds workflow tasks waited on a dead worker's sticky queue before timing out."""
    scheduled: dict[int, datetime] = {}
    waited = 0.0
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
            scheduled[event.event_id] = event.event_time.ToDatetime()
        attrs = event.workflow_task_timed_out_event_attributes
        if (
            event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT
            and attrs.timeout_type == TimeoutType.TIMEOUT_TYPE_SCHEDULE_TO_START
        ):
            since = scheduled[attrs.scheduled_event_id]
            waited += (event.event_time.ToDatetime() - since).total_seconds()
    return waited


async def run(b: Bench) -> tuple[list[Row], dict[str, Any]]:
    repeats = b.n(3, 1)
    queue = f"crash-{uuid.uuid4().hex[:6]}"
    env = {"TURNS_HEARTBEAT_TIMEOUT_S": str(HEARTBEAT_TIMEOUT_S)}
    model = script(
        b.tmp,
        "crash",
        [{"text": "one two three four", "stall_s": 60, "stall_after_chunks": 2, "attempts": 1}],
    )
    turns = TurnsClient(b.client, queue)

    async def spawn() -> WorkerProcess:
        return await asyncio.to_thread(start_engine_worker, b.address, queue, b.tmp, **env)

    workers = [await spawn(), await spawn()]
    runs = []
    try:
        for _ in range(repeats):
            runs.append(await one_crash(b, turns, workers, model))
            workers.append(await spawn())  # back to one worker plus a standby
    finally:
        for w in workers:
            w.stop()
    done = median(r["kill_to_done_s"] for r in runs)
    retry = median(r["kill_to_retry_start_s"] for r in runs)
    sticky = median(r["sticky_wait_s"] for r in runs)
    stuck = sum(r["sticky_wait_s"] > 0 for r in runs)
    return [
        Row(
            "4",
            "… of which the turn waited on the dead worker's sticky queue",
            ms(sticky),
            f"{stuck} of {repeats} kill(s) hit it",
        ),
        Row(
            "4",
            "kill -9 mid model step → turn done, minus heartbeat timeout",
            ms(done - HEARTBEAT_TIMEOUT_S),
            f"kill → done {ms(done)}; heartbeat timeout {HEARTBEAT_TIMEOUT_S:g} s",
            note=f"median of {repeats} kill(s). Kill → retried model step started: {ms(retry)}"
            " (heartbeat timeout; the SDK throttles heartbeats to 0.8 × the timeout, and the"
            " retry policy's first backoff is 1 s). Then, in"
            f" {stuck} of {repeats} run(s), the turn's next workflow task waited on the dead"
            f" worker's sticky queue until it timed out (median wait {ms(sticky)}; {sticky_setting()})",
        ),
    ], {"runs": runs, "heartbeat_timeout_s": HEARTBEAT_TIMEOUT_S}
