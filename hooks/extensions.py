"""Extensions: observers registered on the worker that see JSON-safe snapshots of a turn.

An extension is any object with some of these methods (sync or async), each taking one
snapshot ``dict``::

    before_turn(snapshot)       -> dict | TurnConfig | None   (only this return is used)
    before_tool_call(snapshot)  -> None
    after_tool_call(snapshot)   -> None
    on_step_finish(snapshot)    -> None
    on_chunk(snapshot)          -> None                        (per chunk: keep it cheap)

Defining a method subscribes to it. Register extensions on the hooks class::

    class MyHooks(TurnHooks):
        extensions = (AuditLog(), Metrics())

They run after the subclass hook of the same name, in list order, each with a timeout
(``timeout_s``, default 5 s). A plain ``def`` method runs in a thread (``on_chunk`` excepted:
it runs per chunk, on the loop), so blocking code in it delays no other turn; one that
overruns its timeout is skipped, though its thread runs on until it returns. An extension that raises or times out is logged and skipped: it never aborts the
turn. Only ``before_turn``'s return is honoured, and only its scalar fields: ``system``,
``messages``, ``active_tools``, ``tool_choice``, ``max_steps``, ``send_reasoning``,
sampling settings, ``max_retries`` and ``timeout`` replace the turn's; ``headers`` and
``provider_options`` are merged key by key; ``model``, ``tools`` and the rest are ignored.
The next extension's snapshot shows the change.

Snapshots (Think's shapes, snake_case)::

    before_turn       {system, tool_names, message_count, continuation, body, model_id}
    before_tool_call  {tool_name, tool_call_id, input, step_number, dynamic}
    after_tool_call   {... as before_tool_call, duration_ms, success, outcome, output | error}
    on_step_finish    {step_number, finish_reason, text, reasoning_text, tool_call_count,
                       tool_result_count, usage, provider_metadata}
    on_chunk          {type, text?, tool_name?, tool_call_id?}

``before_tool_call``'s snapshot shows the input the tool will run with (a substituted one
if ``before_tool_call`` replaced it); ``after_tool_call``'s shows what the model emitted.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

from durable_turns.entry import lazy_pool
from durable_turns.hooks.types import (
    SAMPLING,
    StepResult,
    ToolCallContext,
    ToolCallResultContext,
    TurnConfig,
    TurnContext,
)
from durable_turns.messages import StreamPart

log = logging.getLogger("durable_turns.extensions")

EXTENSION_HOOKS = (
    "before_turn",
    "before_tool_call",
    "after_tool_call",
    "on_step_finish",
    "on_chunk",
)
DEFAULT_TIMEOUT_S = 5.0
MAX_DEPTH = 6

REPLACED_FIELDS = (
    "system",
    "messages",
    "active_tools",
    "tool_choice",
    "max_steps",
    "send_reasoning",
    *SAMPLING,
    "max_retries",
    "timeout",
)
MERGED_FIELDS = ("headers", "provider_options")


EXTENSION_THREADS = 8
_threads = lazy_pool(EXTENSION_THREADS, "turns-ext")
"""The plain-``def`` extensions' pool, made on first use."""


class Extension:
    """Optional base class: a name for the logs and the per-call timeout."""

    name: str = ""
    timeout_s: float = DEFAULT_TIMEOUT_S


# --- snapshots -------------------------------------------------------------------------------


def json_safe(value: Any, depth: int = MAX_DEPTH) -> Any:
    """A JSON-clonable copy: models dumped, errors as {name, message}, deeper than 6 cut."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if depth <= 0:
        return "[truncated]"
    if isinstance(value, BaseModel):
        return json_safe(value.model_dump(mode="json"), depth)
    if isinstance(value, BaseException):
        return {"name": type(value).__name__, "message": str(value)}
    if isinstance(value, dict):
        return {str(k): json_safe(v, depth - 1) for k, v in value.items() if not callable(v)}
    if isinstance(value, list | tuple | set | frozenset):
        return [json_safe(v, depth - 1) for v in value if not callable(v)]
    if callable(value):
        return None
    return str(value)


def turn_snapshot(ctx: TurnContext, config: TurnConfig) -> dict[str, Any]:
    """``before_turn``: the context as the subclass's config leaves it."""
    names = [t.name for t in ctx.tools]
    for extra in config.tools or []:
        name = extra if isinstance(extra, str) else extra.name
        if name not in names:
            names.append(name)
    if config.active_tools is not None:
        names = [n for n in names if n in config.active_tools]
    messages = config.messages if config.messages is not None else ctx.messages
    return {
        "system": config.system if config.system is not None else ctx.system,
        "tool_names": names,
        "message_count": len(messages),
        "continuation": ctx.continuation,
        "body": json_safe(ctx.body),
        "model_id": config.model or ctx.model,
    }


def tool_call_snapshot(ctx: ToolCallContext, input: Any) -> dict[str, Any]:
    return {
        "tool_name": ctx.tool_name,
        "tool_call_id": ctx.tool_call_id,
        "input": json_safe(input),
        "step_number": ctx.step_number,
        "dynamic": ctx.dynamic,
    }


def tool_result_snapshot(ctx: ToolCallResultContext) -> dict[str, Any]:
    snap: dict[str, Any] = {
        "tool_name": ctx.tool_name,
        "tool_call_id": ctx.tool_call_id,
        "input": json_safe(ctx.input),
        "step_number": ctx.step_number,
        "dynamic": ctx.dynamic,
        "duration_ms": ctx.duration_ms,
        "success": ctx.success,
        "outcome": ctx.outcome,
    }
    if ctx.success:
        snap["output"] = json_safe(ctx.output)
    else:
        snap["error"] = json_safe(ctx.error)
    return snap


def step_snapshot(step: StepResult) -> dict[str, Any]:
    usage = step.usage
    return {
        "step_number": step.step_number,
        "finish_reason": step.finish_reason,
        "text": step.text,
        "reasoning_text": step.reasoning_text,
        "tool_call_count": len(step.tool_calls),
        "tool_result_count": len(step.tool_results),
        "usage": {
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "total_tokens": usage.total_tokens,
            "reasoning_tokens": usage.reasoning_tokens,
            "cached_input_tokens": usage.cached_input_tokens,
        },
        "provider_metadata": json_safe(step.provider_metadata),
    }


def chunk_snapshot(chunk: StreamPart) -> dict[str, Any]:
    """Minimal, because it is built per token."""
    snap: dict[str, Any] = {"type": chunk.type}
    text = getattr(chunk, "text", None)
    if text is not None:
        snap["text"] = text
    name = getattr(chunk, "tool_name", None)
    if name is not None:
        snap["tool_name"] = name
    call_id = getattr(chunk, "tool_call_id", None)
    if call_id is not None:
        snap["tool_call_id"] = call_id
    return snap


# --- dispatch --------------------------------------------------------------------------------


def _name(ext: Any) -> str:
    return getattr(ext, "name", "") or type(ext).__name__


class Extensions:
    """Calls the registered extensions, in order, each bounded and isolated."""

    def __init__(
        self,
        extensions: Sequence[Any] = (),
        run_async: Callable[[str, Callable[[], Awaitable[Any]]], Awaitable[Any]] | None = None,
    ) -> None:
        self.extensions = list(extensions)
        self.run_async = run_async
        """How an ``async def`` method is awaited (the engine passes its user loops)."""
        self._subscribers = {
            hook: [e for e in self.extensions if callable(getattr(e, hook, None))]
            for hook in EXTENSION_HOOKS
        }

    def subscribed(self, hook: str) -> bool:
        return bool(self._subscribers.get(hook))

    async def notify(self, hook: str, snapshot: dict[str, Any]) -> None:
        """Observation hooks: every subscriber sees its own copy; returns are discarded."""
        for ext in self._subscribers[hook]:
            await self._call(ext, hook, dict(snapshot))

    async def before_turn(self, snapshot: dict[str, Any], config: TurnConfig) -> TurnConfig:
        """Each subscriber may return scalar overrides; later ones see earlier changes."""
        for ext in self._subscribers["before_turn"]:
            returned = await self._call(ext, "before_turn", dict(snapshot))
            if returned is None:
                continue
            try:
                config = merge_extension_config(config, returned)
            except (ValidationError, TypeError, ValueError) as e:
                log.warning(
                    "extension %s: before_turn returned an invalid config: %s", _name(ext), e
                )
                continue
            snapshot = _updated(snapshot, config)
        return config

    async def _call(self, ext: Any, hook: str, snapshot: dict[str, Any]) -> Any:
        timeout = getattr(ext, "timeout_s", DEFAULT_TIMEOUT_S)
        method = getattr(ext, hook)
        try:
            if hook != "on_chunk" and not inspect.iscoroutinefunction(method):
                # a plain def runs in a thread: blocking code in it stalls no other turn
                call = functools.partial(contextvars.copy_context().run, method, snapshot)
                loop = asyncio.get_running_loop()
                result = await asyncio.wait_for(loop.run_in_executor(_threads(), call), timeout)
            elif self.run_async is not None and inspect.iscoroutinefunction(method):
                label = f"extension {_name(ext)} {hook}"
                call_async = functools.partial(method, snapshot)
                result = await asyncio.wait_for(self.run_async(label, call_async), timeout)
            else:
                result = method(snapshot)
            if inspect.isawaitable(result):
                result = await asyncio.wait_for(result, timeout)
            return result
        except TimeoutError:
            log.warning("extension %s: %s timed out after %ss (skipped)", _name(ext), hook, timeout)
        except Exception:
            log.warning("extension %s: %s raised (ignored)", _name(ext), hook, exc_info=True)
        return None


def merge_extension_config(config: TurnConfig, returned: Any) -> TurnConfig:
    """Apply an extension's ``before_turn`` return: replace scalars, merge two dicts."""
    if isinstance(returned, BaseModel):
        data = returned.model_dump(exclude_unset=True)
    elif isinstance(returned, dict):
        data = returned
    else:
        raise TypeError(f"expected a dict or TurnConfig, got {type(returned).__name__}")
    update = {k: data[k] for k in REPLACED_FIELDS if k in data}
    for key in MERGED_FIELDS:
        if isinstance(data.get(key), dict):
            update[key] = {**(getattr(config, key) or {}), **data[key]}
    ignored = set(data) - set(update)
    if ignored:
        log.debug("extension before_turn fields ignored: %s", sorted(ignored))
    merged = {**config.model_dump(exclude_unset=True), **update}
    return TurnConfig.model_validate(merged)


def _updated(snapshot: dict[str, Any], config: TurnConfig) -> dict[str, Any]:
    snapshot = dict(snapshot)
    if config.system is not None:
        snapshot["system"] = config.system
    if config.active_tools is not None:
        snapshot["tool_names"] = [n for n in snapshot["tool_names"] if n in config.active_tools]
    if config.messages is not None:
        snapshot["message_count"] = len(config.messages)
    return snapshot
