"""One tool call's outcome: the checks, ``before_tool_call``'s decision, then the run.

Whatever happens, the result is an output the model sees: an unknown tool, invalid input,
a hook or tool that raises are tool errors (``is_error``), never a failed turn.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from durable_turns.activities.lifecycle import Lifecycle
from durable_turns.contract import ToolResolution, validation_problems
from durable_turns.hooks.types import ToolCallContext, ToolCallDecision
from durable_turns.tools import Tool, ToolContext, ToolRegistry

INTERRUPTED = "The tool call was interrupted before a result was recorded."


@dataclass
class ToolRun:
    output: Any
    is_error: bool = False
    blocked: bool = False
    """Blocked or substituted by ``before_tool_call``: the tool did not run."""
    pending: str | None = None
    """"client" or "approval": nothing is recorded; the turn waits for the client."""


def jsonable(value: Any) -> Any:
    """A tool's output as JSON (pydantic models dumped, anything else stringified)."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return str(value)


def blocked_text(tool_name: str) -> str:
    return f'Tool "{tool_name}" was blocked by beforeToolCall.'


async def run_tool_call(
    tools: ToolRegistry,
    lifecycle: Lifecycle,
    ctx: ToolCallContext,
    run_ctx: ToolContext,
    available: set[str],
    on_preliminary: Callable[[Any], Awaitable[None]] | None = None,
    resolution: ToolResolution | None = None,
) -> ToolRun:
    """Check the call, ask ``before_tool_call``, then run, block or substitute.

    A client tool, or a tool that needs approval, is ``pending`` until the client's
    ``resolution`` arrives; the workflow then calls again with it.
    """
    tool = tools.get(ctx.tool_name)
    if ctx.tool_name not in available:
        names = ", ".join(sorted(available)) or "none"
        return ToolRun(f'Unknown tool "{ctx.tool_name}". Available tools: {names}.', True)
    if tool is None or tool.is_client_tool:
        if resolution is None:
            return ToolRun(None, pending="client")
        return ToolRun(jsonable(resolution.output), resolution.is_error)
    try:
        args = tool.input_model.model_validate(ctx.input)
    except ValidationError as e:
        return ToolRun(invalid_args(tool, e), True)
    if tool.needs_approval:
        if resolution is None:
            return ToolRun(None, pending="approval")
        if not resolution.approved:
            why = f": {resolution.reason}" if resolution.reason else "."
            return ToolRun(f'The user denied the call to "{ctx.tool_name}"{why}', True)
    if run_ctx.attempt > 1 and not tool.retry_safe:
        return ToolRun(INTERRUPTED, True)
    try:
        decision = await lifecycle.before_tool_call(ctx)
    except Exception as e:
        return ToolRun(f"before_tool_call raised {type(e).__name__}: {e}", True)
    if decision is not None and decision.action != "allow":
        await lifecycle.tool_call_decided(ctx, ctx.input)
        return _short_circuit(decision, ctx.tool_name)
    if decision is not None and decision.input is not None:
        try:
            args = tool.input_model.model_validate(decision.input)
        except ValidationError as e:
            return ToolRun(
                "before_tool_call substituted invalid input: " + invalid_args(tool, e), True
            )
    await lifecycle.tool_call_decided(ctx, args.model_dump(mode="json"))
    try:
        return ToolRun(jsonable(await tool.run(args, run_ctx, on_preliminary)))
    except asyncio.CancelledError:
        raise
    except Exception as e:
        return ToolRun(f"{type(e).__name__}: {e}", True)


def _short_circuit(decision: ToolCallDecision, tool_name: str) -> ToolRun:
    if decision.action == "block":
        return ToolRun(decision.reason or blocked_text(tool_name), blocked=True)
    return ToolRun(jsonable(decision.output), blocked=True)


def invalid_args(tool: Tool, error: ValidationError) -> str:
    return f'Invalid arguments for tool "{tool.name}": {validation_problems(error)}'
