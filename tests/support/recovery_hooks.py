"""Hooks for the recovery tests (``TURNS_HOOKS=tests.support.recovery_hooks:RecoveryHooks``).

``on_chat_recovery`` logs what it is told to ``TEST_HOOK_LOG`` (``harness.hook_calls()``) and
answers what the request's body says in ``on_recovery``: ``"stop"``, ``"continue"``,
``"raise"`` or anything else (returned as it is); no ``on_recovery``: None (the default).
``raise_in: "before_turn"`` makes ``before_turn`` raise (a turn that fails before replying).
"""

from __future__ import annotations

import os
from typing import Any

from durable_turns.hooks import ChatRecoveryContext, TurnContext, TurnHooks
from tests.support.hooks import record


class RecoveryHooks(TurnHooks):
    async def before_turn(self, ctx: TurnContext) -> None:
        record("before_turn", continuation=ctx.continuation, message_count=len(ctx.messages))
        if ctx.body.get("raise_in") == "before_turn":
            raise RuntimeError("before_turn exploded")

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
            turn_number=ctx.turn_number,
        )
        answer = ctx.body.get("on_recovery")
        if answer == "raise":
            raise RuntimeError("on_chat_recovery exploded")
        return answer
