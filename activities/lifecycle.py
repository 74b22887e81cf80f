"""Calling the user's hooks, then the extensions, at each boundary of a turn.

One place decides, per hook: whether it is called at all (a hook the subclass does not
override and no extension subscribes to costs nothing, which matters for ``on_chunk``),
how its return is validated, and what its failure means:

* ``before_turn``/``before_step``/``on_step_finish`` raising fails the turn (``HookError``);
* ``before_tool_call`` and ``repair_tool_call`` raising become a tool error (the caller
  handles it);
* ``after_tool_call``/``on_chunk``/``on_chat_response`` raising is logged and ignored;
* ``on_chat_error``/``classify_chat_error``/``on_chat_recovery`` raising falls back to the
  default behaviour;
* an extension raising or timing out is logged and ignored (``hooks.extensions``).

A hook written as a plain ``def`` runs in a thread of a bounded pool (``HOOK_THREADS``), so
blocking code in it never stalls the other turns of the worker. An ``async def`` hook (and
an extension's) runs on a user loop of its own (``activities.isolation``): one that blocks
delays only its own turn, and is named in the worker's log (``activities.loopwatch``).
``on_chunk`` (sync or async) runs per chunk on one user loop kept for the step, in order, in
batches (``isolation.ChunkStage``), and the step ends after its last chunk was seen.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel
from temporalio import activity

from durable_turns.activities import heartbeats, isolation
from durable_turns.activities.errors import hook_failure
from durable_turns.contract import TurnRef
from durable_turns.entry import lazy_pool
from durable_turns.hooks.base import TurnHooks, overrides
from durable_turns.hooks.extensions import (
    Extensions,
    chunk_snapshot,
    step_snapshot,
    tool_call_snapshot,
    tool_result_snapshot,
    turn_snapshot,
)
from durable_turns.hooks.types import (
    ChatErrorClassification,
    ChatErrorContext,
    ChatRecoveryContext,
    ChatResponseResult,
    ChunkContext,
    PrepareStepContext,
    RecoveryDecision,
    RepairedToolCall,
    StepConfig,
    StepResult,
    ToolCallContext,
    ToolCallDecision,
    ToolCallRepairContext,
    ToolCallResultContext,
    TurnConfig,
    TurnContext,
)
from durable_turns.messages import StreamPart

M = TypeVar("M", bound=BaseModel)

HOOKS = (
    "before_turn",
    "before_step",
    "before_tool_call",
    "repair_tool_call",
    "after_tool_call",
    "on_step_finish",
    "on_chunk",
    "on_chat_response",
    "on_chat_error",
    "classify_chat_error",
    "on_chat_recovery",
)
CHUNK_TYPES = frozenset(
    {
        "text-delta",
        "reasoning-delta",
        "source",
        "tool-call",
        "tool-input-start",
        "tool-input-delta",
        "tool-result",
        "raw",
    }
)
"""What ``on_chunk`` sees (Think's list): not ``reasoning-end`` nor ``finish``."""

OnChunk = Callable[[StreamPart], Awaitable[None]]


async def call_hook(value: Any) -> Any:
    """Hooks may be sync or async: await what needs awaiting."""
    if inspect.isawaitable(value):
        return await value
    return value


HOOK_THREADS = 16
"""At most this many plain-``def`` hooks run at once on a worker; more wait for a thread."""
hook_executor = lazy_pool(HOOK_THREADS, "turns-hook")
"""The plain-``def`` hooks' pool, made on first use."""


async def run_hook(name: str, fn: Callable[..., Any], *args: Any) -> Any:
    """Call a user's hook: ``async def`` on a user loop, a plain ``def`` in a thread."""
    if inspect.iscoroutinefunction(fn):
        return await isolation.run(f"hook {name}", functools.partial(fn, *args))
    call = functools.partial(contextvars.copy_context().run, fn, *args)
    result = await asyncio.get_running_loop().run_in_executor(hook_executor(), call)
    if inspect.isawaitable(result):
        result = await isolation.run(f"hook {name}", functools.partial(call_hook, result))
    return result


def _validated(model: type[M], value: Any) -> M:
    return value if isinstance(value, model) else model.model_validate(value or {})


class Lifecycle:
    """The hooks of one worker and its extensions, called the way the contract says."""

    def __init__(self, hooks: TurnHooks, extensions: Sequence[Any] | None = None) -> None:
        self.hooks = hooks
        self.extensions = Extensions(
            hooks.extensions if extensions is None else extensions, run_async=isolation.run
        )
        self._overridden = frozenset(n for n in HOOKS if overrides(hooks, n))

    def overrides(self, hook: str) -> bool:
        return hook in self._overridden

    def runs_code(self, hook: str) -> bool:
        """Whether ``hook`` runs anything of the user's: the subclass's or an extension's."""
        return hook in self._overridden or self.extensions.subscribed(hook)

    async def _hook(self, name: str, *args: Any) -> Any:
        """The subclass's hook ``name``; the base class's no-op defaults run inline."""
        fn = getattr(self.hooks, name)
        if name not in self._overridden:
            return await call_hook(fn(*args))
        return await run_hook(name, fn, *args)

    # --- begin / steps -----------------------------------------------------------------------

    async def before_turn(self, ctx: TurnContext) -> TurnConfig:
        """The subclass's config, then each extension's scalar overrides."""
        try:
            config = _validated(TurnConfig, await self._hook("before_turn", ctx))
        except Exception as e:
            raise hook_failure("before_turn", e) from e
        if self.extensions.subscribed("before_turn"):
            config = await self.extensions.before_turn(turn_snapshot(ctx, config), config)
        return config

    async def before_step(self, ctx: PrepareStepContext) -> StepConfig:
        if not self.overrides("before_step"):
            return StepConfig()
        try:
            return _validated(StepConfig, await self._hook("before_step", ctx))
        except Exception as e:
            raise hook_failure("before_step", e) from e

    async def on_step_finish(self, step: StepResult) -> None:
        if self.overrides("on_step_finish"):
            try:
                await self._hook("on_step_finish", step)
            except Exception as e:
                raise hook_failure("on_step_finish", e) from e
        if self.extensions.subscribed("on_step_finish"):
            await self.extensions.notify("on_step_finish", step_snapshot(step))

    def chunk_handler(
        self,
        step: int,
        request_id: str,
        send_reasoning: bool = True,
        *,
        turn: TurnRef | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> OnChunk | None:
        """The per-chunk observer of a step, or None when nobody listens (the hot path).

        Its contexts carry the turn and the activity attempt: a retried step's chunks come
        with a higher ``attempt`` (the live stream's ``reset``)."""
        hook = self.overrides("on_chunk")
        extensions = self.extensions.subscribed("on_chunk")
        if not (hook or extensions):
            return None
        types = CHUNK_TYPES if send_reasoning else CHUNK_TYPES - {"reasoning-delta"}
        on_chunk = self.hooks.on_chunk
        conversation_id = turn.conversation_id if turn else ""
        turn_number = turn.turn_number if turn else 0
        attempt = heartbeats.attempt()
        shown = metadata if metadata is not None else {}

        async def observe(chunk: StreamPart) -> None:
            if chunk.type not in types:
                return
            if hook:
                ctx = ChunkContext(
                    chunk, step, request_id, conversation_id, turn_number, attempt, shown
                )
                try:
                    await call_hook(on_chunk(ctx))
                except Exception as e:
                    activity.logger.warning("on_chunk raised %r (ignored: it is observational)", e)
            if extensions:
                await self.extensions.notify("on_chunk", chunk_snapshot(chunk))

        return observe

    # --- tools -------------------------------------------------------------------------------

    async def before_tool_call(self, ctx: ToolCallContext) -> ToolCallDecision | None:
        """The subclass's decision (None: allow). Raises what the hook raises."""
        if not self.overrides("before_tool_call"):
            return None
        returned = await self._hook("before_tool_call", ctx)
        return None if returned is None else _validated(ToolCallDecision, returned)

    async def repair_tool_call(self, ctx: ToolCallRepairContext) -> RepairedToolCall | None:
        """The subclass's repaired call (None: no repair). Raises what the hook raises, or a
        ``ValidationError`` for a return that is not a ``RepairedToolCall``."""
        if not self.overrides("repair_tool_call"):
            return None
        returned = await self._hook("repair_tool_call", ctx)
        return None if returned is None else _validated(RepairedToolCall, returned)

    async def tool_call_decided(self, ctx: ToolCallContext, input: Any) -> None:
        """The extensions' ``before_tool_call``: after the decision, with the input used."""
        if self.extensions.subscribed("before_tool_call"):
            await self.extensions.notify("before_tool_call", tool_call_snapshot(ctx, input))

    async def after_tool_call(self, ctx: ToolCallResultContext) -> None:
        if self.overrides("after_tool_call"):
            try:
                await self._hook("after_tool_call", ctx)
            except Exception as e:
                activity.logger.warning("after_tool_call raised %r (the result is kept)", e)
        if self.extensions.subscribed("after_tool_call"):
            await self.extensions.notify("after_tool_call", tool_result_snapshot(ctx))

    # --- the end -----------------------------------------------------------------------------

    async def on_chat_response(self, result: ChatResponseResult) -> None:
        try:
            await self._hook("on_chat_response", result)
        except Exception as e:
            activity.logger.warning("on_chat_response raised %r (the turn stands)", e)

    async def on_chat_error(self, error: Exception, ctx: ChatErrorContext) -> str:
        """The error message the caller sees."""
        try:
            shown = await self._hook("on_chat_error", error, ctx)
        except Exception as e:
            activity.logger.warning("on_chat_error raised %r; the original error is shown", e)
            return str(error)
        return str(shown) if shown is not None else str(error)

    async def on_chat_recovery(self, ctx: ChatRecoveryContext) -> RecoveryDecision:
        """The hook's decision on a recovery: ``"continue"`` unless it says ``"stop"``."""
        if not self.overrides("on_chat_recovery"):
            return "continue"
        try:
            decision = await self._hook("on_chat_recovery", ctx)
        except Exception as e:
            activity.logger.warning("on_chat_recovery raised %r; the turn goes on", e)
            return "continue"
        if decision not in (None, "continue", "stop"):
            activity.logger.warning(
                "on_chat_recovery returned %r, not 'continue' or 'stop'; the turn goes on",
                decision,
            )
            return "continue"
        return "stop" if decision == "stop" else "continue"

    async def classify(
        self, error: Exception | str, ctx: ChatErrorContext
    ) -> ChatErrorClassification | None:
        try:
            return await self._hook("classify_chat_error", error, ctx)
        except Exception as e:  # a classifier that raises means "not an overflow"
            activity.logger.warning("classify_chat_error raised %r", e)
            return None
