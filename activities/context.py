"""Assembling what a model step sees, and the assistant message a turn leaves behind.

Both are rebuilt from the transcript store on demand, which is what keeps workflow history
independent of conversation size: activities receive ids, never the context.
"""

from __future__ import annotations

from typing import Any

from durable_turns.activities.compaction import apply_compaction, is_compaction
from durable_turns.activities.truncation import truncate_older
from durable_turns.contract import CONTINUE_PROMPT
from durable_turns.hooks.types import SAMPLING, StepResult, TurnConfig
from durable_turns.messages import (
    FilePart,
    Message,
    Part,
    ReasoningPart,
    StepStartPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)
from durable_turns.models import ModelRequest
from durable_turns.store import StepRecord, ToolResultRecord, TranscriptStore, TurnRecord


def assistant_message_id(turn_id: str) -> str:
    return f"{turn_id}/assistant"


def continue_prompt(turn_id: str) -> Message:
    """The ephemeral user message of a continuation (never persisted)."""
    return Message(id=f"{turn_id}/continue", role="user", parts=[TextPart(text=CONTINUE_PROMPT)])


def tool_result_part(record: ToolResultRecord) -> ToolResultPart:
    return ToolResultPart(
        tool_call_id=record.tool_call_id,
        tool_name=record.tool_name,
        output=record.output,
        is_error=record.is_error,
    )


def assistant_parts(steps: list[StepRecord], results: dict[str, ToolResultRecord]) -> list[Part]:
    """One turn's parts: per step, a step-start, its output, then its tool results."""
    parts: list[Part] = []
    for step in steps:
        parts.append(StepStartPart())
        parts.extend(step.parts)
        for part in step.parts:
            if isinstance(part, ToolCallPart) and part.tool_call_id in results:
                parts.append(tool_result_part(results[part.tool_call_id]))
    return parts


def turn_config(turn: TurnRecord) -> TurnConfig:
    """The config ``before_turn`` (and the extensions) decided, as recorded with the turn.

    Read tolerantly: a key a newer worker version recorded (a TurnConfig field this version
    does not have) is left out, not an error; ``before_turn``'s own return stays strict."""
    known = TurnConfig.model_fields
    return TurnConfig.model_validate({k: v for k, v in turn.config.items() if k in known})


def assistant_message(
    turn: TurnRecord,
    steps: list[StepRecord],
    results: dict[str, ToolResultRecord],
    status: str = "completed",
    send_reasoning: bool = True,
) -> Message:
    """The turn's assistant message; without reasoning parts when ``send_reasoning`` is off
    (the stored message is what clients see; the model gets its reasoning within the turn)."""
    parts = assistant_parts(steps, results)
    if not send_reasoning:
        parts = [p for p in parts if not isinstance(p, ReasoningPart)]
    metadata: dict[str, Any] = {
        "turn_number": turn.turn_number,
        "request_id": turn.request_id,
        "continuation": turn.continuation,
        "status": status,
    }
    # What the parts do not hold, for clients that show it (the browser front door):
    # each step's sources (citations), the user's decision on calls needing approval, and
    # what became of calls that did not simply run (blocked, substituted, denied...).
    sources = {
        str(i): [s.model_dump(mode="json", exclude={"type"}) for s in step.sources]
        for i, step in enumerate(steps)
        if step.sources
    }
    if sources:
        metadata["sources"] = sources
    approvals = {k: r.approval for k, r in results.items() if r.approval is not None}
    if approvals:
        metadata["approvals"] = approvals
    outcomes = {k: r.outcome for k, r in results.items() if r.outcome not in (None, "ran")}
    if outcomes:
        metadata["tool_outcomes"] = outcomes
    if turn.regenerates is not None:
        metadata["regenerates"] = turn.regenerates
    return Message(
        id=assistant_message_id(turn.turn_id), role="assistant", parts=parts, metadata=metadata
    )


def message_text(message: Message) -> str:
    """The text of a turn's message, its steps separated by a blank line."""
    chunks: list[str] = []
    current = ""
    for part in message.parts:
        if isinstance(part, StepStartPart):
            if current:
                chunks.append(current)
            current = ""
        elif isinstance(part, TextPart):
            current += part.text
    if current:
        chunks.append(current)
    return "\n\n".join(c.strip() for c in chunks if c.strip())


def request_metadata(model_id: str, request: ModelRequest) -> dict[str, Any]:
    """A model request as ``StepContext.request`` shows it: what was asked, small and free
    of secrets (no messages, no header values)."""
    meta: dict[str, Any] = {
        "model": model_id,
        "message_count": len(request.messages),
        "system_chars": len(request.system),
        "tools": [t.name for t in request.tools],
        "tool_choice": request.tool_choice,
        "provider_options": request.provider_options,
        "headers": sorted(request.headers),
        "attempt": request.attempt,
    }
    for name in (*SAMPLING, "output_schema"):
        value = getattr(request, name)
        if value is not None:
            meta[name] = value
    return meta


def step_result(
    step: StepRecord, results: dict[str, ToolResultRecord], turn: TurnRecord | None = None
) -> StepResult:
    calls = [p for p in step.parts if isinstance(p, ToolCallPart)]
    return StepResult(
        conversation_id=turn.conversation_id if turn else "",
        turn_number=turn.turn_number if turn else 0,
        request_id=turn.request_id if turn else "",
        metadata=turn.metadata if turn else {},
        step_number=step.step,
        text="".join(p.text for p in step.parts if isinstance(p, TextPart)),
        reasoning=[p for p in step.parts if isinstance(p, ReasoningPart)],
        tool_calls=calls,
        tool_results=[
            tool_result_part(results[c.tool_call_id]) for c in calls if c.tool_call_id in results
        ],
        finish_reason=step.finish_reason,
        raw_finish_reason=step.raw_finish_reason,
        usage=step.usage,
        provider_metadata=step.provider_metadata,
        warnings=step.warnings,
        response=step.response,
        request=step.request,
        sources=list(step.sources),
        files=[p for p in step.parts if isinstance(p, FilePart)],
    )


async def base_messages(
    store: TranscriptStore,
    turn: TurnRecord,
    *,
    truncate: bool = False,
    transcript: list[Message] | None = None,
) -> list[Message]:
    """The context before this turn's own output: the transcript, or before_turn's override.
    ``truncate``: older messages truncated as the turn's ``truncation`` says (what the model
    sees; compaction reads them whole). ``transcript``: the conversation's messages as just
    read from ``store`` by the caller (read here when not given)."""
    config = turn_config(turn)
    if config.messages is not None:
        messages = list(config.messages)
    else:
        own = assistant_message_id(turn.turn_id)
        if transcript is None:
            transcript = await store.messages(turn.conversation_id)
        stored = [m for m in transcript if m.id != own]
        messages = apply_compaction(stored)
        messages = failed_turn_messages(messages, turn, config.failed_turn_messages)
        if truncate:
            messages = truncate_older(messages, config.truncation)
    if turn.continuation and messages and _needs_continue_prompt(messages[-1]):
        messages.append(continue_prompt(turn.turn_id))
    return messages


FOLD_NOTE = "(Earlier messages that got no reply, because their turns did not finish:)"


def failed_turn_messages(
    messages: list[Message], turn: TurnRecord, policy: str | None
) -> list[Message]:
    """``messages`` with earlier user messages that got no reply kept, dropped or folded
    (``TurnConfig.failed_turn_messages``). A user message got no reply when another
    request's user message follows it before any assistant message, or nothing does; the
    turn's own messages (ids under its request id) never count."""
    if policy in (None, "keep"):
        return messages
    own = f"{turn.request_id}/"
    out: list[Message] = []
    run: list[Message] = []
    for i, m in enumerate(messages):
        if m.role == "user" and not m.id.startswith(own) and _unanswered(messages, i):
            run.append(m)
            continue
        if run and policy == "fold":
            out.append(_folded(run))
        run = []
        out.append(m)
    if run and policy == "fold":
        out.append(_folded(run))
    return out


def _request_of(message: Message) -> str:
    """The request a message came with: engine ids are ``<request id>/<message id>``."""
    return message.id.split("/", 1)[0]


def _unanswered(messages: list[Message], i: int) -> bool:
    if is_compaction(messages[i]):
        return False
    request = _request_of(messages[i])
    for m in messages[i + 1 :]:
        if m.role == "assistant":
            return False
        if m.role == "user" and not is_compaction(m) and _request_of(m) != request:
            return True
    return True


def _folded(run: list[Message]) -> Message:
    texts = [m.text for m in run if m.text]
    parts: list[Part] = [TextPart(text="\n\n".join([FOLD_NOTE, *texts]))]
    parts += [p for m in run for p in m.parts if not isinstance(p, TextPart)]
    return Message(id=f"{run[0].id}/folded", role="user", parts=parts)


def _needs_continue_prompt(last: Message) -> bool:
    """An assistant message that ends in text needs the prompt; one ending with tool
    results (client tools, approvals) is answered by the model without it."""
    content = [p for p in last.parts if not isinstance(p, StepStartPart)]
    return last.role == "assistant" and not (content and isinstance(content[-1], ToolResultPart))


async def step_messages(
    store: TranscriptStore,
    turn: TurnRecord,
    steps: list[StepRecord],
    results: dict[str, ToolResultRecord],
    *,
    transcript: list[Message] | None = None,
) -> list[Message]:
    """The messages a model step sends: the base context plus this turn's steps so far
    (``transcript``: the conversation's messages if the caller has just read them)."""
    messages = await base_messages(store, turn, truncate=True, transcript=transcript)
    if steps:
        messages.append(assistant_message(turn, steps, results, status="running"))
    return messages
