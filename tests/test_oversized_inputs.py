"""Issue 25, item 2: no input a client can size wedges a conversation.

Each test runs against the real dev server and a real worker process, at the default limits,
and fails on the code before the fix (named in its docstring).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.bridge.proto.workflow_activation import WorkflowActivation
from temporalio.client import WithStartWorkflowOperation, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.exceptions import ApplicationError

from durable_turns.contract import CONVERSATION_WORKFLOW, TurnResult
from durable_turns.update_guard import answerable_bytes, drop_unanswerable_updates
from tests.support.harness import Harness
from tests.support.load import busy_cores


def _request(size: int) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": "y" * size}], "model": "demo:echo"}


async def _failed_tasks(handle: WorkflowHandle[Any, Any]) -> list[str]:
    """The failure messages of the workflow's failed workflow tasks (none, when healthy)."""
    failures = []
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
            failures.append(event.workflow_task_failed_event_attributes.failure.message)
    return failures


async def _timed(coro: Any) -> tuple[Any, float]:
    started = time.monotonic()
    try:
        result = await coro
    except Exception as e:  # the caller's refusal is the result here
        result = e
    return result, time.monotonic() - started


async def _huge_update_then_a_normal_one(harness: Harness, name: str) -> None:
    conversation = harness.conv(name)
    assert (await harness.send(conversation, "first", model="demo:echo")).status == "completed"
    handle = harness.client.get_workflow_handle(conversation)

    async def normal_a_second_later() -> tuple[Any, float]:
        await asyncio.sleep(1)
        return await _timed(harness.send(conversation, "second", model="demo:echo"))

    (huge, huge_s), (normal, normal_s) = await asyncio.gather(
        _timed(handle.execute_update("sendMessage", _request(3_400_000))),
        normal_a_second_later(),
    )
    assert isinstance(huge, WorkflowUpdateFailedError), huge
    assert isinstance(huge.cause, ApplicationError)
    assert huge.cause.type == "UnprocessedUpdate" and huge.cause.non_retryable
    assert huge_s < 5, f"the oversized update was refused after {huge_s:.1f}s"
    assert isinstance(normal, TurnResult), normal
    assert normal.status == "completed" and normal.turn_number == 2
    assert normal_s < 5, f"the normal update took {normal_s:.1f}s"
    assert await _failed_tasks(handle) == []


async def test_an_update_far_over_the_limit_is_refused_and_nothing_waits(harness: Harness) -> None:
    """Old code: the validator rejected the 3.4 MB update, but the rejection echoes the whole
    request (Temporal's update protocol) and was over the 2 MiB blob limit: the workflow task
    failed (PayloadsTooLarge) on every retry, and both this update and a normal one sent a
    second later were refused after ~20 s ("Workflow Task in failed state")."""
    harness.start_worker()
    await _huge_update_then_a_normal_one(harness, "huge-update")
    log = harness.workers[0].log_tail(20_000)
    assert "refused update 'sendMessage'" in log and "TMPRL1103" not in log


async def test_an_update_far_over_the_limit_with_the_cores_loaded(harness: Harness) -> None:
    """The same, while two other processes keep both cores busy."""
    harness.start_worker()
    with busy_cores():
        await _huge_update_then_a_normal_one(harness, "huge-update-loaded")


async def test_a_huge_update_with_start_leaves_a_working_conversation(harness: Harness) -> None:
    """Old code: the new conversation's first workflow task failed the same way."""
    harness.start_worker()
    conversation = harness.conv("huge-uws")
    start = WithStartWorkflowOperation(
        CONVERSATION_WORKFLOW,
        id=conversation,
        task_queue=harness.task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
    )
    refused, refused_s = await _timed(
        harness.client.execute_update_with_start_workflow(
            "sendMessage", _request(3_400_000), start_workflow_operation=start
        )
    )
    assert isinstance(refused, WorkflowUpdateFailedError) and refused_s < 5
    result = await asyncio.wait_for(harness.send(conversation, "hi", model="demo:echo"), 10)
    assert result.status == "completed" and result.turn_number == 1
    assert await _failed_tasks(harness.client.get_workflow_handle(conversation)) == []


@pytest.mark.parametrize("size", [300_000, 1_900_000])
async def test_an_oversized_update_that_can_be_answered_gets_its_type(
    harness: Harness, size: int
) -> None:
    """Under what an answer can carry, the validator's typed RequestTooLarge still answers."""
    harness.start_worker()
    conversation = harness.conv("big-update")
    await harness.send(conversation, "first", model="demo:echo")
    handle = harness.client.get_workflow_handle(conversation)
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update("sendMessage", _request(size))
    cause = refused.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "RequestTooLarge"
    assert len(str(cause)) < 500, "the rejection does not echo the request"
    assert (await harness.send(conversation, "again", model="demo:echo")).turn_number == 2
    assert await _failed_tasks(handle) == []


def test_the_guard_takes_out_only_new_updates_too_large_to_answer() -> None:
    """Replayed updates (accepted in history, so answerable) and small ones stay."""
    act = WorkflowActivation(run_id="r")
    for size, new in ((10, True), (5_000, True), (5_000, False)):
        job = act.jobs.add()
        job.do_update.name = "sendMessage"
        job.do_update.run_validator = new
        job.do_update.input.add().data = b"x" * size
    act.jobs.add().signal_workflow.signal_name = "submitMessages"
    assert drop_unanswerable_updates(act, 1_000) == 1
    kinds = [(j.WhichOneof("variant"), j.do_update.run_validator) for j in act.jobs]
    assert kinds == [("do_update", True), ("do_update", False), ("signal_workflow", False)]
    assert answerable_bytes(None) == answerable_bytes(2 * 1024 * 1024) == 2_031_616
    assert answerable_bytes(512 * 1024) == 458_752
