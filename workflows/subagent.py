"""Sub-agents: the child turn an agent tool's call runs (docs/tools.md, "Agent tools").

Deterministic code, called from ``TurnWorkflow`` and passed through the sandbox (as
``options`` is). For a call the ``tool_call`` activity answered with ``pending="agent"``,
``run_agent`` starts a child ``TurnWorkflow`` of the parent turn: turn 1 of the child
conversation ``contract.agent_conversation_id`` (the parent's conversation, turn number and
tool call id), with the agent's name in ``TurnInput.agent`` so its activities run with the
agent's hooks, model and tools. Beside it runs ``relay_agent``, which copies the child's
live stream onto the parent's. The child's reply becomes the call's resolution, which the
parent's ``tool_call`` then records as the tool's result.

The child is started once: its start is an event of the parent's history, so a parent that
replays on another worker (its worker died) waits on the child it started, running or not,
and starts no second one. Cancelling the parent turn cancels the child (the wait is
cancelled with ``TRY_CANCEL``; ``ParentClosePolicy.REQUEST_CANCEL`` as well, should the
parent end first), and the child ends ``aborted`` with what it had streamed.

A child's call that waits for the client (a client tool, an approval) reaches the parent's
client: the child's turn tells the parent turn (``agentWait``), which lists it among its own
pending calls under ``contract.agent_call_id`` (the relay announces it on the parent's
stream), forwards the answer the parent's conversation hands it to the child (a
``toolResult`` signal), and goes on waiting on the child, which goes on in the same turn.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributePair, TypedSearchAttributes
from temporalio.exceptions import ChildWorkflowError, WorkflowAlreadyStartedError
from temporalio.workflow import ChildWorkflowCancellationType, ParentClosePolicy

from durable_turns.contract import (
    AGENT_FAILED,
    CONVERSATION_ID,
    MAX_RESULT_TEXT_BYTES,
    RELAY_AGENT,
    TURN_STATUS,
    TURN_TASK_TIMEOUT_S,
    TURN_WORKFLOW,
    RelayAgentInput,
    ToolOutcome,
    ToolResolution,
    TurnInput,
    TurnPlan,
    TurnRef,
    TurnResult,
    agent_conversation_id,
    turn_workflow_id,
)
from durable_turns.messages import user_message
from durable_turns.workflows import options

RELAY_TIMEOUT = timedelta(hours=6)
"""The longest a relay may follow one child (its child's turn is bounded by its own limits)."""

RELAY_GRACE = timedelta(seconds=30)
"""How long the parent waits, once the child ended, for the relay to copy the child's last
events (its ``turn-finish``); then the relay is cancelled and the call goes on."""

RELAY_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=10),
    maximum_attempts=10,
)
"""A relay whose worker died starts again where the parent's stream says it stopped."""


async def run_agent(
    ref: TurnRef,
    plan: TurnPlan,
    step: int,
    outcome: ToolOutcome,
    body: dict[str, Any],
    metadata: dict[str, Any],
) -> ToolResolution:
    """Run the sub-agent of one call to its end: the call's resolution (the child's reply,
    or an ``AgentFailed`` error result). Raises ``asyncio.CancelledError`` when the parent
    is cancelled meanwhile (the child is cancelled with it)."""
    call_id, name = outcome.tool_call_id, outcome.tool_name
    conversation = agent_conversation_id(ref.conversation_id, ref.turn_number, call_id)
    child_id = child_turn_id(ref, call_id)
    child = TurnInput(
        conversation_id=conversation,
        turn_number=1,
        request_id=child_id,
        new_messages=[user_message(outcome.task or "", id=f"{child_id}/task")],
        body=body,
        metadata=metadata,
        agent=name,
    )
    try:
        handle = await workflow.start_child_workflow(
            TURN_WORKFLOW,
            child,
            id=child_id,
            result_type=TurnResult,
            task_timeout=timedelta(seconds=TURN_TASK_TIMEOUT_S),
            cancellation_type=ChildWorkflowCancellationType.TRY_CANCEL,
            parent_close_policy=ParentClosePolicy.REQUEST_CANCEL,
            static_summary=f"agent {name} · call {call_id} of {ref.turn_id}"[:400],
            search_attributes=TypedSearchAttributes(
                [
                    SearchAttributePair(CONVERSATION_ID, conversation),
                    SearchAttributePair(TURN_STATUS, "running"),
                ]
            ),
        )
    except WorkflowAlreadyStartedError:
        return _failed(
            call_id,
            f"{AGENT_FAILED}: agent {name!r}: its turn {child_id} is already running,"
            " started by another run of this turn",
        )
    relay = workflow.start_activity(
        RELAY_AGENT,
        RelayAgentInput(
            turn=ref, step=step, tool_call_id=call_id, tool_name=name, child_turn_id=child_id
        ),
        result_type=int,
        start_to_close_timeout=RELAY_TIMEOUT,
        heartbeat_timeout=options.heartbeat(plan),
        retry_policy=RELAY_RETRY,
        summary=f"relay agent {name} · call {call_id}"[:400],
    )
    relay.add_done_callback(_retrieved)
    try:
        result: TurnResult = await handle
    except ChildWorkflowError as err:
        relay.cancel()
        cause = err.cause
        why = f"{type(cause).__name__}: {cause}" if cause is not None else str(err)
        return _failed(call_id, f"{AGENT_FAILED}: agent {name!r}: its turn failed ({why})")
    except asyncio.CancelledError:
        relay.cancel()
        raise
    if not relay.done():
        try:
            await workflow.wait_condition(
                relay.done, timeout=RELAY_GRACE, timeout_summary="the sub-agent's last chunks"
            )
        except TimeoutError:
            relay.cancel()
    return _resolution(call_id, name, conversation, result)


def child_turn_id(ref: TurnRef, call_id: str) -> str:
    """The workflow id of the sub-agent's turn that the agent call ``call_id`` runs."""
    return turn_workflow_id(agent_conversation_id(ref.conversation_id, ref.turn_number, call_id), 1)


def _resolution(call_id: str, name: str, conversation: str, result: TurnResult) -> ToolResolution:
    """The child's reply as the call's result: its structured output when it has one, else
    its text (the first MAX_RESULT_TEXT_BYTES, with a note naming the whole reply)."""
    if result.status != "completed":
        why = f": {result.error.type}: {result.error.message}" if result.error else ""
        return _failed(call_id, f"{AGENT_FAILED}: agent {name!r} ended {result.status}{why}")
    output: Any = result.output if result.output is not None else result.text
    if result.output is None and result.text_truncated:
        output += (
            f"\n[cut at {MAX_RESULT_TEXT_BYTES} bytes: the whole reply is message"
            f" {result.message_id} of conversation {conversation}]"
        )
    return ToolResolution(tool_call_id=call_id, output=output)


def _failed(call_id: str, text: str) -> ToolResolution:
    return ToolResolution(tool_call_id=call_id, output=text, is_error=True)


def _retrieved(task: asyncio.Future[Any]) -> None:
    """A relay's end is never waited on: its failure (or cancel) is not the call's."""
    if not task.cancelled() and task.exception() is not None:
        workflow.logger.warning("sub-agent relay ended: %s", task.exception())
