"""Hooks that record which turn each hook call is in, and the full step record.

Every call is one JSON line in ``TEST_HOOK_LOG`` (``harness.hook_calls()``), with the
context's ``conversation_id``, ``turn_number`` and ``request_id``.
"""

from __future__ import annotations

import json
import os
from typing import Any

from durable_turns.hooks import (
    ChatErrorClassification,
    ChatErrorContext,
    ChatResponseResult,
    ChunkContext,
    ContextOverflowConfig,
    PrepareStepContext,
    StepConfig,
    StepContext,
    ToolCallContext,
    ToolCallDecision,
    ToolCallResultContext,
    TurnConfig,
    TurnContext,
    TurnHooks,
)


def record(hook: str, ctx: Any, **fields: Any) -> None:
    path = os.environ.get("TEST_HOOK_LOG")
    if not path:
        return
    ids = {
        "conversation_id": getattr(ctx, "conversation_id", None),
        "turn_number": getattr(ctx, "turn_number", None),
        "request_id": getattr(ctx, "request_id", None),
    }
    with open(path, "a") as f:
        f.write(json.dumps({"hook": hook, **ids, **fields}, default=str) + "\n")


class ContractHooks(TurnHooks):
    context_overflow = ContextOverflowConfig(reactive=True)

    async def before_turn(self, ctx: TurnContext) -> TurnConfig | None:
        record("before_turn", ctx)
        return None

    async def before_step(self, ctx: PrepareStepContext) -> StepConfig | None:
        record("before_step", ctx, steps=[[s.conversation_id, s.turn_number] for s in ctx.steps])
        return None

    async def before_tool_call(self, ctx: ToolCallContext) -> ToolCallDecision | None:
        record("before_tool_call", ctx)
        return None

    async def after_tool_call(self, ctx: ToolCallResultContext) -> None:
        record("after_tool_call", ctx)

    async def on_step_finish(self, ctx: StepContext) -> None:
        record(
            "on_step_finish",
            ctx,
            step=ctx.step_number,
            request=ctx.request,
            sources=[s.model_dump(mode="json") for s in ctx.sources],
            files=[f.model_dump(mode="json") for f in ctx.files],
        )

    async def on_chunk(self, ctx: ChunkContext) -> None:
        record(
            "on_chunk",
            ctx,
            step=ctx.step_number,
            attempt=ctx.attempt,
            type=ctx.chunk.type,
            text=getattr(ctx.chunk, "text", None),
        )

    async def on_chat_response(self, result: ChatResponseResult) -> None:
        record("on_chat_response", result, status=result.status)

    def on_chat_error(self, error: Exception, ctx: ChatErrorContext) -> Exception:
        record("on_chat_error", ctx, stage=ctx.stage)
        return error

    def classify_chat_error(
        self, error: Exception | str, ctx: ChatErrorContext
    ) -> ChatErrorClassification | None:
        record("classify_chat_error", ctx)
        return None
