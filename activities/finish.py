"""How a turn ends: ``finish_turn``, ``fail_turn`` and ``chat_response``.

finish_turn runs on_step_finish for the last step, checks structured output and persists
the assistant message (``finish_here``: the same, inside the last model step, when no user
code runs there); fail_turn persists what the turn produced, then asks on_chat_error what the
caller sees; chat_response calls on_chat_response after the turn lock is released.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from durable_turns import pricing
from durable_turns.activities import context as ctx_build
from durable_turns.activities import recovery
from durable_turns.activities.deps import ActivityDeps
from durable_turns.activities.heartbeats import keep_alive
from durable_turns.activities.structured_output import OUTPUT_ERROR, check_output, parse_output
from durable_turns.contract import (
    CHAT_RESPONSE,
    FAIL_TURN,
    FINISH_TURN,
    MAX_RESULT_TEXT_BYTES,
    TURN_TAKEN_OVER,
    ChatResponseInput,
    ErrorInfo,
    FailTurnInput,
    FinishTurnInput,
    TurnResult,
    turn_id,
    turn_workflow_id,
)
from durable_turns.errors import DurableTurnsError
from durable_turns.hooks.types import ChatErrorContext, ChatResponseResult
from durable_turns.messages import Message, ToolCallPart
from durable_turns.store import StepRecord, ToolResultRecord, TurnRecord, TurnState
from durable_turns.store.base import owns, started
from durable_turns.streams import TURN_FINISH, StreamUnavailable

FINISH_HERE_S = 10.0
"""How long the last model step may spend finishing its turn (``finish_here``) before it
leaves that to ``finish_turn``: a store that does not answer within it is waited for there."""


class FinishActivities:
    def __init__(self, deps: ActivityDeps) -> None:
        self.deps = deps

    @activity.defn(name=FINISH_TURN)
    async def finish_turn(self, inp: FinishTurnInput) -> TurnResult:
        """on_step_finish(last) → check structured output → persist the assistant message."""
        if (agent := self.deps.of(inp.turn)) is not self.deps:  # a sub-agent's turn
            return await FinishActivities(agent).finish_turn(inp)
        return await self._finish(await self.deps.turn_state(inp.turn), inp)

    async def finish_here(self, inp: FinishTurnInput) -> TurnResult | None:
        """``finish_turn`` inside the activity that asks (the last model step, ``last_step``)
        when it runs none of the user's code (no ``on_step_finish``, no structured output,
        whose failure asks ``on_chat_error``); None: left to ``finish_turn``, which also
        takes over whatever failed here (it writes idempotently, as its own retries do)."""
        if (agent := self.deps.of(inp.turn)) is not self.deps:  # a sub-agent's turn
            return await FinishActivities(agent).finish_here(inp)
        if inp.status != "completed" or self.deps.lifecycle.runs_code("on_step_finish"):
            return None
        try:
            async with (
                asyncio.timeout(FINISH_HERE_S),
                keep_alive(self.deps.beat_every, at_once=False),
            ):
                state = await self.deps.turn_state(inp.turn)
                if ctx_build.turn_config(state.turn).output is not None:
                    return None
                return await self._finish(state, inp)
        except Exception as e:  # finish_turn, a local activity, runs it again
            activity.logger.warning("turn %s: finished by finish_turn: %r", inp.turn.turn_id, e)
            return None

    async def _finish(self, state: TurnState, inp: FinishTurnInput) -> TurnResult:
        turn, steps, results = state.turn, state.steps, state.results
        after = turn.turn_number + 1 if inp.auto_continue else None
        if steps and inp.status == "completed":
            last = ctx_build.step_result(steps[-1], results, turn)
            if self.deps.lifecycle.runs_code("on_step_finish"):
                turn = await self._started(turn, "finish")
                self.deps.check_crashes(turn, "finish turn (on_step_finish)")
                await recovery.bookkeeping(self.deps, turn, "persist", "finish turn")
            async with keep_alive(self.deps.beat_every):
                await self.deps.lifecycle.on_step_finish(last)
            schema = ctx_build.turn_config(turn).output
            if schema is not None:
                problem = check_output(last.text, schema)
                if problem:
                    error = ErrorInfo(type=OUTPUT_ERROR, message=problem, stage="stream")
                    return await self._failed(turn, steps, results, error, messages_persisted=True)
                result = await self._close(turn, steps, results, inp.status, inp.error, after)
                return result.model_copy(update={"output": parse_output(last.text)})
        return await self._close(turn, steps, results, inp.status, inp.error, after)

    @activity.defn(name=FAIL_TURN)
    async def fail_turn(self, inp: FailTurnInput) -> TurnResult:
        """on_chat_error decides what the caller sees; the partial message is persisted first."""
        try:
            agent = self.deps.of(inp.turn)
        except ApplicationError:  # UnknownAgent: the worker's own hooks say how it failed
            agent = self.deps
        if agent is not self.deps:  # a sub-agent's turn
            return await FinishActivities(agent).fail_turn(inp)
        ref = inp.turn
        stored = await self.deps.store.get_turn(ref.turn_id)
        if stored is not None and not owns(stored.owner, ref.owner):
            # Another run owns the turn now (this one was taken over): write nothing of it.
            return _not_ours(inp)
        turn = stored or TurnRecord(
            turn_id=ref.turn_id,
            conversation_id=ref.conversation_id,
            turn_number=ref.turn_number,
            request_id=ref.request_id,
            continuation=inp.continuation,
            owner=ref.owner,
            by_conversation=ref.by_conversation,
        )
        if ref.owner:
            turn.owner = ref.owner
        results = await self.deps.store.tool_results(turn.turn_id)
        steps = _what_happened(await self.deps.store.steps(turn.turn_id, turn.run), inp, results)
        return await self._failed(
            turn, steps, results, inp.error, messages_persisted=stored is not None
        )

    async def _failed(
        self,
        turn: TurnRecord,
        steps: list[StepRecord],
        results: dict[str, ToolResultRecord],
        error: ErrorInfo,
        messages_persisted: bool,
    ) -> TurnResult:
        message = await self._persist(turn, steps, results, "error")
        ctx = ChatErrorContext(
            stage=error.stage or "turn",  # type: ignore[arg-type]
            request_id=turn.request_id,
            messages_persisted=messages_persisted,
            classification=error.classification,  # type: ignore[arg-type]
            conversation_id=turn.conversation_id,
            turn_number=turn.turn_number,
            metadata=copy.deepcopy(turn.metadata),
        )
        if self.deps.lifecycle.runs_code("on_chat_error"):
            turn = await self._started(turn, "fail")
            await recovery.bookkeeping(self.deps, turn, "persist", "fail turn")
            deaths = turn.crashes.get("fail", 0)
            if deaths > self.deps.settings.crash_retries:  # the turn's error is shown as it is
                activity.logger.warning(
                    "on_chat_error is not run again: its worker died %d times (%s)",
                    deaths,
                    error.message,
                )
                return await self._result(turn, steps, message, "error", error)
        async with keep_alive(self.deps.beat_every):
            shown = await self.deps.lifecycle.on_chat_error(_TurnError(error), ctx)
        return await self._result(
            turn, steps, message, "error", error.model_copy(update={"message": shown})
        )

    async def _started(self, turn: TurnRecord, key: str) -> TurnRecord:
        """The turn marked as running ``key`` (and stored so before any hook runs): an
        earlier attempt the mark shows never ended is counted (``TurnRecord.crashes``)."""
        marked = started(turn, turn, key)
        await self.deps.store.save_turn(marked)
        return marked

    async def _close(
        self,
        turn: TurnRecord,
        steps: list[StepRecord],
        results: dict[str, ToolResultRecord],
        status: str,
        error: ErrorInfo | None,
        continued_by: int | None = None,
    ) -> TurnResult:
        message = await self._persist(turn, steps, results, status)
        return await self._result(turn, steps, message, status, error, continued_by)

    async def _persist(
        self,
        turn: TurnRecord,
        steps: list[StepRecord],
        results: dict[str, ToolResultRecord],
        status: str,
    ) -> Message:
        sends_reasoning = ctx_build.turn_config(turn).send_reasoning is not False
        message = ctx_build.assistant_message(turn, steps, results, status, sends_reasoning)
        if message.parts:
            await self.deps.store.put_message(
                turn.conversation_id, message, turn.turn_id, owner=turn.owner
            )
        return message

    async def _result(
        self,
        turn: TurnRecord,
        steps: list[StepRecord],
        message: Message,
        status: str,
        error: ErrorInfo | None,
        continued_by: int | None = None,
    ) -> TurnResult:
        turn.status = status
        turn.error = error.model_dump() if error else None
        turn.running = None  # what was running has ended
        await self.deps.store.save_turn(turn)
        text, truncated = _preview(ctx_build.message_text(message))
        try:
            # once: a retried attempt (its predecessor's write applied, its answer lost)
            # does not end the stream twice
            async with self.deps.publisher(turn, None, once=TURN_FINISH) as publisher:
                if publisher is not None:
                    data: dict[str, Any] = {
                        "text": text,
                        "error": error.model_dump() if error else None,
                    }
                    if continued_by is not None:  # the reply goes on in that turn's stream
                        data["continued_by_turn"] = continued_by
                    await publisher.turn_finish(status, data)
        except StreamUnavailable as e:  # the transcript has the reply: the turn ends
            activity.logger.warning("%s; the turn ends without its turn-finish event", e)
        return TurnResult(
            request_id=turn.request_id,
            conversation_id=turn.conversation_id,
            turn_number=turn.turn_number,
            workflow_id=turn_workflow_id(turn.conversation_id, turn.turn_number),
            status=status,  # type: ignore[arg-type]
            text=text,
            text_truncated=truncated,
            message_id=message.id if message.parts else None,
            steps=len(steps),
            continuation=turn.continuation,
            error=error,
            respond=self.deps.lifecycle.overrides("on_chat_response"),
            metadata=turn.metadata,
            **pricing.turn_accounting([(s.model, s.usage) for s in steps]),
        )

    @activity.defn(name=CHAT_RESPONSE)
    async def chat_response(self, inp: ChatResponseInput) -> None:
        """on_chat_response, after the message is persisted and the turn lock released."""
        if (agent := self.deps.of(inp.agent)) is not self.deps:  # a sub-agent's turn
            return await FinishActivities(agent).chat_response(inp)
        result = inp.result
        if result.status == "skipped" or not self.deps.lifecycle.overrides("on_chat_response"):
            return
        messages = await self.deps.store.messages(result.conversation_id)
        message = next((m for m in messages if m.id == result.message_id), None)
        turn = await self.deps.store.get_turn(turn_id(result.conversation_id, result.turn_number))
        response = ChatResponseResult(
            message=message or Message(id="", role="assistant"),
            request_id=result.request_id,
            continuation=result.continuation,
            status=result.status,
            error=result.error.message if result.error else None,
            conversation_id=result.conversation_id,
            turn_number=result.turn_number,
            body=turn.body if turn else {},
            metadata=result.metadata,
        )
        # recorded: a dead worker's on_chat_response runs again about TURNS_LIVENESS_MS later
        async with self.deps.recorded_attempt(None), keep_alive(self.deps.beat_every):
            await self.deps.lifecycle.on_chat_response(response)


def _not_ours(inp: FailTurnInput) -> TurnResult:
    """A failed turn's result when its run no longer owns the turn: nothing was written."""
    ref = inp.turn
    return TurnResult(
        request_id=ref.request_id,
        conversation_id=ref.conversation_id,
        turn_number=ref.turn_number,
        workflow_id=activity.info().workflow_id or "",
        status="error",
        continuation=inp.continuation,
        error=inp.error
        if inp.error.type == TURN_TAKEN_OVER
        else ErrorInfo(
            type=TURN_TAKEN_OVER,
            message=f"turn {ref.turn_id} belongs to another workflow run ({inp.error.message})",
            stage=inp.error.stage,
        ),
        respond=False,
    )


def _preview(text: str) -> tuple[str, bool]:
    """A reply's text as TurnResult carries it: whole, or its first MAX_RESULT_TEXT_BYTES."""
    data = text.encode()
    if len(data) <= MAX_RESULT_TEXT_BYTES:
        return text, False
    return data[:MAX_RESULT_TEXT_BYTES].decode(errors="ignore"), True


def _what_happened(
    steps: list[StepRecord], inp: FailTurnInput, results: dict[str, ToolResultRecord]
) -> list[StepRecord]:
    """What the transcript may say of a failed turn: the steps the workflow saw complete, the
    failing step's partial reply (stored by its last attempt, marked "error"), and of their
    tool calls only those that have a result. A step stored by an attempt the history never
    saw complete, or a tool call that never ran, did not happen."""
    kept = [
        s
        for s in steps
        if s.step < inp.steps or (s.step == inp.steps and s.raw_finish_reason == "error")
    ]
    return [
        s.model_copy(
            update={
                "parts": [
                    p
                    for p in s.parts
                    if not (isinstance(p, ToolCallPart) and p.tool_call_id not in results)
                ]
            }
        )
        for s in kept
    ]


class _TurnError(DurableTurnsError):
    """The error ``on_chat_error`` receives: its message, type and stage."""

    def __init__(self, info: ErrorInfo) -> None:
        super().__init__(info.message)
        self.type = info.type
        self.stage = info.stage
