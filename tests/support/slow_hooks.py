"""Hooks that stall at a chosen boundary, so a test can kill the worker right there.

``TEST_SLOW_HOOK=before_turn:3`` makes before_turn sleep 3 s (likewise ``before_step`` for
steps after the first, and ``on_step_finish`` for the last step, inside finish_turn). The
worker started to take over gets no such variable and runs at full speed.
"""

from __future__ import annotations

import asyncio
import json
import os

from durable_turns.hooks import PrepareStepContext, StepContext, TurnConfig, TurnContext, TurnHooks


def _delay(hook: str) -> float:
    name, _, seconds = os.environ.get("TEST_SLOW_HOOK", "").partition(":")
    return float(seconds) if name == hook else 0.0


def _mark(hook: str, **fields: object) -> None:
    path = os.environ.get("TEST_HOOK_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"hook": hook, "pid": os.getpid(), **fields}) + "\n")


class SlowHooks(TurnHooks):
    async def before_turn(self, ctx: TurnContext) -> TurnConfig | None:
        _mark("before_turn", request_id=ctx.request_id)
        await asyncio.sleep(_delay("before_turn"))
        return None

    async def before_step(self, ctx: PrepareStepContext) -> None:
        _mark("before_step", step=ctx.step_number)
        if ctx.step_number > 0:
            await asyncio.sleep(_delay("before_step"))

    async def on_step_finish(self, ctx: StepContext) -> None:
        _mark("on_step_finish", step=ctx.step_number, finish_reason=ctx.finish_reason)
        if ctx.finish_reason == "stop":
            await asyncio.sleep(_delay("on_step_finish"))
