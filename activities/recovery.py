"""Recovery, as an activity sees it: the ``recovering`` event and ``on_chat_recovery``.

An attempt whose input carries a ``contract.Recovery`` (``workflows.recovery``: the one
before it was lost) first says so on the live stream, then asks ``on_chat_recovery``
whether to go on (Think's ``onChatRecovery``), with what the lost attempt streamed, read
back from the stream. Its answer is the attempt's result, so it is recorded in history
once and never asked again on replay. A local activity re-run after its worker died (begin
or finish turn, noticed by the store's running marks: ``bookkeeping``) only says so on the
stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from typing import Any, Literal

from pydantic import TypeAdapter
from temporalio import activity

from durable_turns.activities import heartbeats
from durable_turns.activities.deps import ActivityDeps
from durable_turns.activities.heartbeats import keep_alive
from durable_turns.activities.streaming import StepSnapshot, accumulate
from durable_turns.contract import Recovery, RecoveryReason
from durable_turns.hooks.types import ChatRecoveryContext, RecoveryDecision
from durable_turns.messages import StreamPart, ToolCallPart
from durable_turns.store import TurnRecord
from durable_turns.streams import CHUNK, RECOVERING, StreamUnavailable

READ_PARTIAL_S = 10.0
"""How long an attempt waits for the live stream to read back what the lost one streamed
(past it, or with no stream, ``partial_text`` is empty)."""

_PART: TypeAdapter[StreamPart] = TypeAdapter(StreamPart)


async def recover(
    deps: ActivityDeps,
    turn: TurnRecord,
    recovery: Recovery,
    *,
    step: int,
    call: ToolCallPart | None = None,
    ask: bool = True,
) -> tuple[RecoveryDecision, StepSnapshot]:
    """Publish the ``recovering`` event of this attempt, then (with ``ask``) the hook's
    decision; with what a lost model-step attempt streamed (empty for a tool call)."""
    attempt = heartbeats.attempt()
    stage: Literal["stream", "tool"] = "stream" if call is None else "tool"
    await announce(
        deps, turn, stage, recovery.reason, recovery.message, step, recovery.deaths, call
    )
    partial = StepSnapshot()
    if not (ask and deps.lifecycle.overrides("on_chat_recovery")):
        return "continue", partial
    if call is None:
        partial = await discarded(deps, turn, step, attempt)
    ctx = ChatRecoveryContext(
        stage=stage,
        step_number=step,
        attempt=attempt,
        reason=recovery.reason,
        error=recovery.message,
        deaths=recovery.deaths,
        partial_text=partial.text,
        partial_parts=copy.deepcopy(partial.parts),
        tool_call_id=call.tool_call_id if call else None,
        tool_name=call.tool_name if call else None,
        tool_input=copy.deepcopy(call.input) if call else None,
        request_id=turn.request_id,
        conversation_id=turn.conversation_id,
        turn_number=turn.turn_number,
        continuation=turn.continuation,
        body=turn.body,
        metadata=copy.deepcopy(turn.metadata),
    )
    async with keep_alive(deps.beat_every):
        decision = await deps.lifecycle.on_chat_recovery(ctx)
    activity.logger.info(
        "turn %s: %s of step %d recovers (attempt %d, %s): %s",
        turn.turn_id,
        "model step" if call is None else f"tool {call.tool_name}",
        step,
        attempt,
        recovery.reason,
        decision,
    )
    return decision, partial


async def announce(
    deps: ActivityDeps,
    turn: TurnRecord,
    stage: str,
    reason: RecoveryReason,
    message: str,
    step: int | None,
    deaths: int,
    call: ToolCallPart | None = None,
) -> None:
    """The ``recovering`` event, once per attempt whatever retries it (a stream that stays
    unwritable is logged: the turn goes on without it)."""
    attempt = heartbeats.attempt()
    data: dict[str, Any] = {
        "stage": stage,
        "reason": reason,
        "message": message,
        "attempt": attempt,
        "deaths": deaths,
    }
    if call is not None:
        data["tool_call_id"] = call.tool_call_id
        data["tool_name"] = call.tool_name
    once = f"{RECOVERING}:{stage}:{step}:{call.tool_call_id if call else ''}:{attempt}:{deaths}"
    try:
        async with deps.publisher(turn, step, once=once) as publisher:
            if publisher is not None:
                await publisher.boundary(RECOVERING, data)
    except StreamUnavailable as e:
        activity.logger.warning("%s; no recovering event", e)


async def bookkeeping(deps: ActivityDeps, turn: TurnRecord, stage: str, what: str) -> None:
    """A local activity (begin, finish or fail turn) runs again because an earlier run of
    it never ended (``TurnRecord.crashes`` of its running mark): the ``recovering`` event."""
    deaths = turn.crashes.get(turn.running or "", 0)
    if deaths:
        message = f"{what}: its earlier run never ended (the worker died {deaths} time(s))"
        await announce(deps, turn, stage, "worker_lost", message, None, deaths)


async def discarded(deps: ActivityDeps, turn: TurnRecord, step: int, attempt: int) -> StepSnapshot:
    """What the latest earlier attempt of model step ``step`` streamed, read back from the
    live stream (empty without one, or when it cannot be read within ``READ_PARTIAL_S``)."""
    snapshot = StepSnapshot()
    if deps.streams is None:
        return snapshot
    try:
        async with asyncio.timeout(READ_PARTIAL_S):
            events = await deps.streams.read(turn.turn_id, by_conversation=turn.by_conversation)
    except Exception as e:  # best effort: a timeout, an outage, another run's stream
        activity.logger.warning("turn %s: the lost attempt's chunks unread: %r", turn.turn_id, e)
        return snapshot
    chunks = [
        e
        for e in events
        if e.type == CHUNK and e.step == step and e.attempt is not None and e.attempt < attempt
    ]
    latest = max((e.attempt or 0 for e in chunks), default=0)
    for event in chunks:
        if event.attempt == latest:
            with contextlib.suppress(ValueError):  # a chunk this version cannot read
                accumulate(snapshot, _PART.validate_python(event.data))
    return snapshot
