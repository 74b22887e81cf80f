"""Hooks, extensions, tools and a transform for the worker processes of the hook tests and
the benchmarks (``bench/cache.py``).

Every hook call is appended as one JSON line to the file named by ``TEST_HOOK_LOG`` (the
harness sets it; ``harness.hook_calls()`` reads it). What the hooks *decide* comes from the
request's body, so one class serves every test:

* ``turn_config``: what ``before_turn`` returns; ``big_override``: N characters of
  ``messages`` override; ``raise_in``: ``"before_turn"`` raises there;
* ``step_configs``: ``{"<step>": StepConfig as JSON}`` for ``before_step``;
* ``mutate_messages``: ``before_step`` appends a text part to each of its messages in place;
* ``tool_decisions``: ``{"<tool>": ToolCallDecision as JSON, or "raise"}``;
* ``repairs``: ``{"<tool the model called>": RepairedToolCall as JSON, or "raise"}`` for
  ``repair_tool_call`` (a name not listed: no repair);
* ``follow_up``: ``{"text": ..., "model": ...}``: ``on_chat_response`` submits it as a new
  request to the same conversation (through a Temporal client, as an app would);
* ``on_recovery``: what ``on_chat_recovery`` returns (``"raise"``: it raises).

Load it as hooks (``TURNS_HOOKS=testkit.hooks:RecordingHooks``) and as tools
(``TURNS_TOOLS=testkit.tools,testkit.hooks``) for the ``note``/``secret`` tools. The tests
load it under their own name too (``tests/support/hooks.py`` re-exports it, beside the hook
tests' helpers).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from typing import Any

from pydantic import BaseModel

from durable_turns.hooks import (
    ChatErrorContext,
    ChatRecoveryContext,
    ChatResponseResult,
    ChunkContext,
    ContextOverflowConfig,
    Extension,
    PrepareStepContext,
    Session,
    StepContext,
    ToolCallContext,
    ToolCallRepairContext,
    ToolCallResultContext,
    TurnContext,
    TurnHooks,
    default_context_overflow_classifier,
)
from durable_turns.messages import Message, StreamPart, TextDelta, TextPart
from durable_turns.tools import ToolContext, tool
from durable_turns.transforms import stream_transform


def record(hook: str, **fields: Any) -> None:
    path = os.environ.get("TEST_HOOK_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"hook": hook, **fields}, default=str) + "\n")


class RecordingHooks(TurnHooks):
    """Records every hook; decides what the request's body says."""

    context_overflow = ContextOverflowConfig(reactive=True)

    def configure_session(self, session: Session) -> Session:
        record("configure_session", pid=os.getpid())
        if os.environ.get("TEST_SESSION") == "blocks":
            session.with_context("soul", "You are a test agent.")
            session.with_context("memory", _memory, description="learned facts")
            session.with_cached_prompt()
        return session

    async def before_turn(self, ctx: TurnContext) -> Any:
        record(
            "before_turn",
            metadata=ctx.metadata,
            request_id=ctx.request_id,
            continuation=ctx.continuation,
            turn_number=ctx.turn_number,
            model=ctx.model,
            system=ctx.system,
            tools=[t.name for t in ctx.tools],
            message_count=len(ctx.messages),
            cancelled=ctx.is_cancelled(),
        )
        if ctx.body.get("raise_in") == "before_turn":
            raise RuntimeError("before_turn exploded")
        config = dict(ctx.body.get("turn_config") or {})
        if ctx.body.get("big_override"):
            text = "x" * int(ctx.body["big_override"])
            config["messages"] = [Message(role="user", parts=[TextPart(text=text)])]
        return config or None

    def before_step(self, ctx: PrepareStepContext) -> Any:  # sync on purpose
        record(
            "before_step",
            metadata=ctx.metadata,
            step=ctx.step_number,
            model=ctx.model,
            steps=[s.step_number for s in ctx.steps],
            message_count=len(ctx.messages),
            first_text=ctx.messages[0].text if ctx.messages else "",
            experimental_context=ctx.experimental_context,
            request_id=ctx.request_id,
        )
        if ctx.body.get("mutate_messages"):  # in place, as a careless hook would
            for message in ctx.messages:
                message.parts.append(TextPart(text=" MUTATED"))
        return (ctx.body.get("step_configs") or {}).get(str(ctx.step_number))

    async def before_tool_call(self, ctx: ToolCallContext) -> Any:
        record(
            "before_tool_call",
            metadata=ctx.metadata,
            id=ctx.tool_call_id,
            tool=ctx.tool_name,
            input=ctx.input,
            step=ctx.step_number,
            message_count=len(ctx.messages),
            repaired=ctx.repaired,
        )
        decision = (ctx.body.get("tool_decisions") or {}).get(ctx.tool_name)
        if decision == "raise":
            raise PermissionError("no tools today")
        return decision

    async def repair_tool_call(self, ctx: ToolCallRepairContext) -> Any:
        record(
            "repair_tool_call",
            metadata=ctx.metadata,
            id=ctx.tool_call_id,
            tool=ctx.tool_name,
            input=ctx.input,
            problem=ctx.problem,
            error=ctx.error,
            tools=sorted(t.name for t in ctx.tools),
            step=ctx.step_number,
            message_count=len(ctx.messages),
            system=ctx.system,
            request_id=ctx.request_id,
        )
        repair = (ctx.body.get("repairs") or {}).get(ctx.tool_name)
        if repair == "raise":
            raise LookupError("no repairs today")
        return repair

    async def after_tool_call(self, ctx: ToolCallResultContext) -> None:
        record(
            "after_tool_call",
            metadata=ctx.metadata,
            repaired=ctx.repaired,
            id=ctx.tool_call_id,
            tool=ctx.tool_name,
            input=ctx.input,
            step=ctx.step_number,
            success=ctx.success,
            output=ctx.output,
            error=ctx.error,
            duration_ms=ctx.duration_ms,
            outcome=ctx.outcome,
        )

    async def on_step_finish(self, ctx: StepContext) -> None:
        record(
            "on_step_finish",
            metadata=ctx.metadata,
            step=ctx.step_number,
            text=ctx.text,
            reasoning=ctx.reasoning_text,
            tool_calls=[c.tool_name for c in ctx.tool_calls],
            tool_results=[r.output for r in ctx.tool_results],
            finish_reason=ctx.finish_reason,
            usage=ctx.usage.model_dump(),
            provider_metadata=ctx.provider_metadata,
            warnings=ctx.warnings,
            response=ctx.response,
        )

    async def on_chunk(self, ctx: ChunkContext) -> None:
        chunk = ctx.chunk
        record(
            "on_chunk",
            metadata=ctx.metadata,
            type=chunk.type,
            step=ctx.step_number,
            id=getattr(chunk, "tool_call_id", None),
            text=getattr(chunk, "text", None),
            preliminary=getattr(chunk, "preliminary", None),
            output=getattr(chunk, "output", None),
        )

    async def on_chat_response(self, result: ChatResponseResult) -> None:
        record(
            "on_chat_response",
            metadata=result.metadata,
            request_id=result.request_id,
            continuation=result.continuation,
            status=result.status,
            error=result.error,
            turn_number=result.turn_number,
            message_id=result.message.id,
            message_text=result.message.text,
        )
        follow_up = result.body.get("follow_up")
        if follow_up and result.status == "completed":
            await _submit(result.conversation_id, follow_up["text"], follow_up.get("model"))

    async def on_chat_error(self, error: Exception, ctx: ChatErrorContext) -> Exception:
        record(
            "on_chat_error",
            metadata=ctx.metadata,
            error=str(error),
            type=getattr(error, "type", None),
            stage=ctx.stage,
            messages_persisted=ctx.messages_persisted,
            classification=ctx.classification,
            request_id=ctx.request_id,
        )
        return RuntimeError(f"Sorry, that failed ({ctx.stage}): {error}")

    async def on_chat_recovery(self, ctx: ChatRecoveryContext) -> Any:
        record(
            "on_chat_recovery",
            pid=os.getpid(),
            stage=ctx.stage,
            step=ctx.step_number,
            attempt=ctx.attempt,
            reason=ctx.reason,
            error=ctx.error,
            deaths=ctx.deaths,
            partial_text=ctx.partial_text,
            partial_parts=[p.type for p in ctx.partial_parts],
            tool_call_id=ctx.tool_call_id,
            tool_name=ctx.tool_name,
            tool_input=ctx.tool_input,
            request_id=ctx.request_id,
        )
        answer = ctx.body.get("on_recovery")
        if answer == "raise":
            raise RuntimeError("on_chat_recovery exploded")
        return answer

    async def classify_chat_error(self, error: Exception | str, ctx: ChatErrorContext) -> Any:
        record("classify_chat_error", error=str(error), stage=ctx.stage, metadata=ctx.metadata)
        return default_context_overflow_classifier(error)


async def _memory() -> str:
    return "The user likes tea."


async def _submit(conversation_id: str, text: str, model: str | None) -> None:
    from durable_turns.client import TurnsClient

    turns = await TurnsClient.connect()
    try:
        await turns.submit(conversation_id, text, model=model)
    finally:
        await turns.aclose()


# --- extensions ------------------------------------------------------------------------------


class RecordingExtension(Extension):
    """Records the snapshots it is given."""

    def __init__(self, name: str) -> None:
        self.name = name

    async def before_turn(self, snapshot: dict[str, Any]) -> None:
        record("ext", ext=self.name, on="before_turn", snapshot=snapshot)

    async def before_tool_call(self, snapshot: dict[str, Any]) -> None:
        record("ext", ext=self.name, on="before_tool_call", snapshot=snapshot)

    async def after_tool_call(self, snapshot: dict[str, Any]) -> None:
        record("ext", ext=self.name, on="after_tool_call", snapshot=snapshot)

    def on_step_finish(self, snapshot: dict[str, Any]) -> None:  # sync on purpose
        record("ext", ext=self.name, on="on_step_finish", snapshot=snapshot)

    async def on_chunk(self, snapshot: dict[str, Any]) -> None:
        record("ext", ext=self.name, on="on_chunk", snapshot=snapshot)


class BrokenExtension(Extension):
    name = "broken"

    async def before_turn(self, snapshot: dict[str, Any]) -> None:
        raise RuntimeError("broken extension")

    def after_tool_call(self, snapshot: dict[str, Any]) -> None:
        raise RuntimeError("broken extension")

    async def on_chunk(self, snapshot: dict[str, Any]) -> None:
        raise RuntimeError("broken extension")


class SlowExtension(Extension):
    name = "slow"
    timeout_s = 0.5

    async def before_turn(self, snapshot: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(30)
        return {"temperature": 1.9}


class TuningExtension(Extension):
    """Returns overrides: scalars replace, headers merge, the model is ignored."""

    name = "tuning"

    async def before_turn(self, snapshot: dict[str, Any]) -> dict[str, Any]:
        record("ext", ext=self.name, on="before_turn", snapshot=snapshot)
        return {
            "temperature": 0.25,
            "system": snapshot["system"] + " [tuned]",
            "headers": {"x-ext": "1"},
            "model": "demo:echo",
        }


class ExtendedHooks(RecordingHooks):
    extensions = (
        RecordingExtension("first"),
        BrokenExtension(),
        SlowExtension(),
        TuningExtension(),
        RecordingExtension("last"),
    )


# --- tools and a transform ---------------------------------------------------------------------


class NoteArgs(BaseModel):
    text: str = ""
    limit: int = 10


@tool
async def note(args: NoteArgs, ctx: ToolContext) -> str:
    """Record a note (in the hook log, so its place among the hooks is visible)."""
    record(
        "tool",
        id=ctx.tool_call_id,
        text=args.text,
        limit=args.limit,
        experimental_context=ctx.experimental_context,
    )
    return f"noted {args.text} (limit {args.limit})"


@tool(default=False)
async def secret(args: NoteArgs, ctx: ToolContext) -> str:
    """Only offered when a turn's config names it."""
    record("tool", id=ctx.tool_call_id, tool="secret")
    return "the secret is 42"


@tool
async def ticker(args: NoteArgs, ctx: ToolContext) -> AsyncIterator[str]:
    """A streaming tool: three preliminary values, the last is the output."""
    for i in range(1, 4):
        yield f"tick {i}"


@stream_transform("test-double")
def double(part: StreamPart) -> StreamPart | list[StreamPart]:
    """Each text delta twice (a transform may return a list)."""
    if isinstance(part, TextDelta):
        return [part, part]
    return part
