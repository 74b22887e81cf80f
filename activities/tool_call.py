"""``tool_call``: before_tool_call → execute (or block / substitute) → after_tool_call → persist.

The decision and the result are stored under the tool call id, so a retried attempt never
runs the tool twice once it has finished; tools receive that id as an idempotency key. Each
attempt is recorded for liveness (``streams.liveness``): a SIGKILLed worker's call is failed
by another worker as its heartbeat timeout would have, about two seconds after the death.
"""

from __future__ import annotations

import functools
import json
import time
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from durable_turns.activities import context as ctx_build
from durable_turns.activities import heartbeats, isolation, recovery
from durable_turns.activities.deps import ActivityDeps
from durable_turns.activities.heartbeats import keep_alive
from durable_turns.activities.lifecycle import OnChunk
from durable_turns.activities.tool_calls import jsonable, run_tool_call
from durable_turns.contract import (
    MAX_TOOL_OUTPUT_BYTES,
    TOOL_CALL,
    TOOL_OUTPUT_TOO_LARGE,
    ToolCallInput,
    ToolOutcome,
    ToolResolution,
    TurnRef,
)
from durable_turns.hooks.types import ToolCallContext, ToolCallResultContext
from durable_turns.messages import StreamPart, ToolCallPart, ToolResultChunk, copied
from durable_turns.store import StepRecord, ToolResultRecord, TurnRecord
from durable_turns.streams import TOOL_RESULT, TOOL_WAIT, StreamUnavailable
from durable_turns.tools import ToolContext


class ToolCallActivities:
    def __init__(self, deps: ActivityDeps) -> None:
        self.deps = deps

    @activity.defn(name=TOOL_CALL)
    async def tool_call(self, inp: ToolCallInput) -> ToolOutcome:
        """before_tool_call → execute (or block / substitute) → after_tool_call → persist."""
        if (agent := self.deps.of(inp.turn)) is not self.deps:  # a sub-agent's turn
            return await ToolCallActivities(agent).tool_call(inp)
        heartbeats.count_attempt(inp.attempt, inp.failures)
        # recorded for liveness: a SIGKILLed worker's call runs again within about two
        # seconds, not after its heartbeat timeout, as a model step does
        async with self.deps.recorded_attempt(
            inp.turn, inp.step, (inp.tool_call_id, inp.tool_name)
        ):
            return await self._tool_call(inp)

    async def _tool_call(self, inp: ToolCallInput) -> ToolOutcome:
        ref = inp.turn
        state = await self.deps.turn_state(ref)  # TurnTakenOver when another run owns it
        turn, steps = state.turn, state.steps
        stored = state.results.get(inp.tool_call_id)
        if stored is not None:  # the decision and the result are recorded: never asked again
            if heartbeats.attempt() > 1:  # the attempt that saved it may not have published it
                await self._publish_result(ref, inp.step, stored)
            return _outcome(stored)
        step, call = _find_call(steps, inp)
        if inp.recovery is not None:  # the attempt before was lost: say so, ask
            decision, _ = await recovery.recover(
                self.deps, turn, inp.recovery, step=inp.step, call=call
            )
            if decision == "stop":  # nothing recorded: the turn ends aborted without it
                return ToolOutcome(
                    tool_call_id=call.tool_call_id,
                    tool_name=call.tool_name,
                    success=False,
                    stopped=True,
                )
        config = ctx_build.turn_config(turn)
        available = {
            s.name for s in self.deps.tool_specs(config, step.active_tools, model=step.model)
        }
        repair = step.repairs.get(call.tool_call_id)
        ctx = await self._tool_call_context(turn, steps, inp.step, call)
        ctx.repaired = repair is not None and repair.repaired
        on_chunk = _isolated(
            self.deps.lifecycle.chunk_handler(
                inp.step, ref.request_id, turn=ref, metadata=turn.metadata
            )
        )
        started = time.monotonic()
        async with keep_alive(self.deps.beat_every):
            run = await run_tool_call(
                self.deps.tools,
                self.deps.lifecycle,
                ctx,
                self._tool_context(turn, inp, step),
                available,
                _preliminaries(on_chunk, call),
                inp.resolution,
                repair,
            )
            if run.pending == "agent":  # the workflow runs the sub-agent, then asks again
                return ToolOutcome(
                    tool_call_id=call.tool_call_id,
                    tool_name=call.tool_name,
                    success=False,
                    pending="agent",
                    task=run.task,
                )
            # recorded nowhere: the turn waits for the client, then asks again (a sub-agent's
            # turn too: its parent's client answers, through the parent, workflows.subagent)
            if run.pending:
                try:
                    async with self.deps.publisher(
                        ref, inp.step, once=f"{TOOL_WAIT}:{call.tool_call_id}"
                    ) as publisher:
                        if publisher is not None:  # readers learn what the turn waits on
                            await publisher.tool_wait(
                                {
                                    "tool_call_id": call.tool_call_id,
                                    "tool_name": call.tool_name,
                                    "waiting_for": run.pending,
                                    "input": call.input,
                                }
                            )
                except StreamUnavailable as e:  # the turn waits all the same
                    activity.logger.warning("%s; no tool-wait event", e)
                return ToolOutcome(
                    tool_call_id=call.tool_call_id,
                    tool_name=call.tool_name,
                    success=False,
                    pending=run.pending,  # type: ignore[arg-type]
                )
            duration_ms = (time.monotonic() - started) * 1000
            run.output = jsonable(run.output)  # JSON-safe once, here: UTF-8, no NUL
            if (size := len(json.dumps(run.output).encode())) > MAX_TOOL_OUTPUT_BYTES:
                run.output = (
                    f"{TOOL_OUTPUT_TOO_LARGE}: tool {call.tool_name!r} returned {size} bytes,"
                    f" over the limit of {MAX_TOOL_OUTPUT_BYTES}; return less (a summary, or a"
                    " reference the model can ask another tool about)"
                )
                run.is_error = True
            if on_chunk is not None:
                await on_chunk(_result_chunk(call, run.output, run.is_error))
            await self.deps.lifecycle.after_tool_call(
                ToolCallResultContext(
                    tool_call_id=call.tool_call_id,
                    tool_name=call.tool_name,
                    input=call.input,
                    step_number=inp.step,
                    messages=ctx.messages,
                    duration_ms=duration_ms,
                    success=not run.is_error,
                    outcome=run.outcome,
                    output=None if run.is_error else run.output,
                    error=run.output if run.is_error else None,
                    request_id=turn.request_id,
                    conversation_id=turn.conversation_id,
                    turn_number=turn.turn_number,
                    body=turn.body,
                    repaired=ctx.repaired,
                    metadata=turn.metadata,
                )
            )
        record = ToolResultRecord(
            tool_call_id=call.tool_call_id,
            tool_name=call.tool_name,
            step=inp.step,
            output=jsonable(run.output),
            is_error=run.is_error,
            blocked=run.blocked,
            duration_ms=duration_ms,
            approval=_approval(inp.resolution),
            outcome=run.outcome,
        )
        saved = await self.deps.store.save_tool_result(ref.turn_id, record, owner=turn.owner)
        await self._publish_result(ref, inp.step, saved)
        return _outcome(saved)

    async def _publish_result(self, ref: TurnRef, step: int, saved: ToolResultRecord) -> None:
        """The call's ``tool-result`` event, once however many attempts publish it; a stream
        that stays unwritable for ``stream_write_timeout_s`` is logged and gone without."""
        try:
            async with self.deps.publisher(
                ref, step, once=f"{TOOL_RESULT}:{saved.tool_call_id}"
            ) as publisher:
                if publisher is not None:
                    data = ctx_build.tool_result_part(saved).model_dump(mode="json")
                    if saved.approval is not None:
                        data["approval"] = saved.approval
                    data["outcome"] = saved.outcome or "ran"
                    await publisher.tool_result(data)
        except StreamUnavailable as e:  # the store has the result: the turn goes on
            activity.logger.warning(
                "%s; tool call %s has no tool-result event", e, saved.tool_call_id
            )

    async def _tool_call_context(
        self, turn: TurnRecord, steps: list[StepRecord], step: int, call: ToolCallPart
    ) -> ToolCallContext:
        wanted = self.deps.lifecycle.overrides("before_tool_call") or self.deps.lifecycle.overrides(
            "after_tool_call"
        )
        # the hooks' own copies: what the store returned is shared
        messages = (
            copied(await ctx_build.step_messages(self.deps.store, turn, steps, {}))
            if wanted
            else []
        )
        return ToolCallContext(
            tool_call_id=call.tool_call_id,
            tool_name=call.tool_name,
            input=call.input,
            step_number=step,
            messages=messages,
            provider_metadata=call.provider_metadata,
            is_cancelled=activity.is_cancelled,
            request_id=turn.request_id,
            conversation_id=turn.conversation_id,
            turn_number=turn.turn_number,
            body=turn.body,
            metadata=turn.metadata,
        )

    def _tool_context(self, turn: TurnRecord, inp: ToolCallInput, step: StepRecord) -> ToolContext:
        return ToolContext(
            tool_call_id=inp.tool_call_id,
            tool_name=inp.tool_name,
            conversation_id=turn.conversation_id,
            turn_number=turn.turn_number,
            request_id=turn.request_id,
            step_number=inp.step,
            attempt=heartbeats.attempt(),
            heartbeat=activity.heartbeat,
            experimental_context=step.experimental_context,
        )


def _find_call(steps: list[StepRecord], inp: ToolCallInput) -> tuple[StepRecord, ToolCallPart]:
    for step in steps:
        if step.step == inp.step:
            for part in step.parts:
                if isinstance(part, ToolCallPart) and part.tool_call_id == inp.tool_call_id:
                    return step, part
    raise ApplicationError(
        f"tool call {inp.tool_call_id} is not in step {inp.step}", non_retryable=True
    )


def _result_chunk(
    call: ToolCallPart, output: Any, is_error: bool, preliminary: bool = False
) -> ToolResultChunk:
    return ToolResultChunk(
        tool_call_id=call.tool_call_id,
        tool_name=call.tool_name,
        output=jsonable(output),
        is_error=is_error,
        preliminary=preliminary,
    )


def _isolated(observe: OnChunk | None) -> OnChunk | None:
    """``on_chunk`` for the few chunks of a tool call: each call on a user loop."""
    if observe is None:
        return None

    async def on_chunk(chunk: StreamPart) -> None:
        await isolation.run("hook on_chunk", functools.partial(observe, chunk))

    return on_chunk


def _preliminaries(on_chunk: OnChunk | None, call: ToolCallPart) -> Any:
    """A streaming tool's intermediate values, as preliminary tool-result chunks."""
    if on_chunk is None:
        return None

    async def emit(value: Any) -> None:
        await on_chunk(_result_chunk(call, value, False, preliminary=True))

    return emit


def _approval(resolution: ToolResolution | None) -> dict[str, Any] | None:
    """The user's decision on a call that needed approval, as the result records it."""
    if resolution is None or resolution.approved is None:
        return None
    return {"approved": resolution.approved, "reason": resolution.reason}


def _outcome(record: ToolResultRecord) -> ToolOutcome:
    return ToolOutcome(
        tool_call_id=record.tool_call_id,
        tool_name=record.tool_name,
        success=not record.is_error,
        blocked=record.blocked,
        error=str(record.output)[:500] if record.is_error else None,
    )
