"""One tool call's outcome: the checks, ``before_tool_call``'s decision, then the run.

Whatever happens, the result is an output the model sees: an unknown tool, invalid input,
a hook or tool that raises are tool errors (``is_error``), never a failed turn. A call that
``repair_tool_call`` repaired (in its model step) is checked again here, like any call.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError
from temporalio.exceptions import ApplicationError

from durable_turns.activities import heartbeats, isolation, loopwatch
from durable_turns.activities.lifecycle import Lifecycle
from durable_turns.agents import AgentTool
from durable_turns.contract import (
    AGENT_TASK_TOO_LARGE,
    MAX_AGENT_TASK_BYTES,
    TOOL_ERROR,
    TOOL_TIMEOUT,
    ToolCallOutcome,
    ToolResolution,
    validation_problems,
)
from durable_turns.hooks.types import ToolCallContext, ToolCallDecision, ToolCallProblem
from durable_turns.redaction import redact
from durable_turns.store import ToolCallRepair
from durable_turns.tools import Tool, ToolContext, ToolFailed, ToolRegistry

INTERRUPTED = "The tool call was interrupted before a result was recorded."
MAX_TOOL_ATTEMPTS = 3
"""The tool activity's retry policy allows three attempts: ``retries`` is capped at 2."""

log = logging.getLogger("durable_turns.tools")


@dataclass
class ToolRun:
    output: Any
    is_error: bool = False
    blocked: bool = False
    """Blocked or substituted by ``before_tool_call``: the tool did not run."""
    pending: str | None = None
    """"client" or "approval": nothing is recorded; the turn waits for the client. "agent":
    the workflow runs the sub-agent (``task``), then calls again with its reply."""
    task: str | None = None
    outcome: ToolCallOutcome = "ran"
    """What became of the call (stored with the result, given to ``after_tool_call``)."""


def jsonable(value: Any) -> Any:
    """A tool's output as JSON every store and payload accepts, made so once, at the edge:
    pydantic models dumped, bytes decoded, anything else stringified; lone surrogates and
    NUL characters (which UTF-8 and PostgreSQL refuse) become U+FFFD, non-finite floats text.
    """
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    elif isinstance(value, bytes | bytearray):
        value = bytes(value).decode("utf-8", "replace")
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        value = str(value)
    return _clean(value)


def clean_text(text: str) -> str:
    """``text`` as valid UTF-8 without NUL: lone surrogates and NUL become U+FFFD."""
    if text.isascii():
        return text.replace("\x00", "\ufffd") if "\x00" in text else text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # pairs of surrogates join; a lone one is replaced
        text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text.replace("\x00", "\ufffd")


def _clean(value: Any) -> Any:
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return {clean_text(str(k)): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def call_problem(
    tools: ToolRegistry, available: set[str], tool_name: str, input: Any
) -> tuple[ToolCallProblem, str] | None:
    """Why a call of the model does not validate, with the error the model is shown (None
    when it validates): the tool is not offered, or its input fails the tool's input model.
    A client tool's input is the client's to check (there is no model on the worker)."""
    if tool_name not in available:
        names = ", ".join(sorted(available)) or "none"
        return "unknown_tool", f'Unknown tool "{tool_name}". Available tools: {names}.'
    tool = tools.get(tool_name)
    if tool is None or tool.is_client_tool:
        return None
    try:
        tool.input_model.model_validate(input)
    except ValidationError as e:
        return ("invalid_json" if _not_json(input) else "invalid_input"), invalid_args(tool, e)
    return None


def _not_json(value: Any) -> bool:
    """A provider hands over arguments that are not JSON as their raw text."""
    if not isinstance(value, str):
        return False
    try:
        json.loads(value)
    except ValueError:
        return True
    return False


STILL_INVALID = "repair_tool_call's repaired call does not validate either: "


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
    repair: ToolCallRepair | None = None,
) -> ToolRun:
    """Check the call, ask ``before_tool_call``, then run, block or substitute.

    A client tool, or a tool that needs approval, is ``pending`` until the client's
    ``resolution`` arrives; the workflow then calls again with it. ``repair``: what
    ``repair_tool_call`` did with the model's call (its step recorded it), if it was asked.
    """
    if repair is not None and repair.hook_error is not None:
        return ToolRun(repair.hook_error, True, outcome="hook_error")
    again = STILL_INVALID if repair is not None and repair.repaired else ""
    tool = tools.get(ctx.tool_name)
    if ctx.tool_name not in available:
        names = ", ".join(sorted(available)) or "none"
        text = f'{again}Unknown tool "{ctx.tool_name}". Available tools: {names}.'
        return ToolRun(text, True, outcome="unavailable")
    if tool is None or tool.is_client_tool:
        if resolution is None:
            return ToolRun(None, pending="client")
        return ToolRun(jsonable(resolution.output), resolution.is_error)
    try:
        args = tool.input_model.model_validate(ctx.input)
    except ValidationError as e:
        return ToolRun(again + invalid_args(tool, e), True, outcome="invalid")
    if tool.needs_approval:
        if resolution is None:
            return ToolRun(None, pending="approval")
        if not resolution.approved:
            why = f": {resolution.reason}" if resolution.reason else "."
            text = f'The user denied the call to "{ctx.tool_name}"{why}'
            return ToolRun(text, True, outcome="denied")
    if isinstance(tool, AgentTool) and resolution is not None:  # the sub-agent's reply
        return ToolRun(jsonable(resolution.output), resolution.is_error)
    if run_ctx.attempt > 1 and not tool.retry_safe:
        return ToolRun(INTERRUPTED, True, outcome="interrupted")
    try:
        decision = await lifecycle.before_tool_call(ctx)
    except Exception as e:
        log.error("before_tool_call raised for tool %s", ctx.tool_name, exc_info=e)
        text = clean_text(f"before_tool_call raised {type(e).__name__}: {e}")
        return ToolRun(text, True, outcome="hook_error")
    if decision is not None and decision.action != "allow":
        await lifecycle.tool_call_decided(ctx, ctx.input)
        return _short_circuit(decision, ctx.tool_name)
    if decision is not None and decision.input is not None:
        try:
            args = tool.input_model.model_validate(decision.input)
        except ValidationError as e:
            text = "before_tool_call substituted invalid input: " + invalid_args(tool, e)
            return ToolRun(text, True, outcome="invalid")
    await lifecycle.tool_call_decided(ctx, args.model_dump(mode="json"))
    if isinstance(tool, AgentTool) and tool.agent is not None:
        return agent_task(tool, args)
    return await execute(tool, args, run_ctx, on_preliminary)


def agent_task(tool: AgentTool, args: BaseModel) -> ToolRun:
    """An allowed call of an agent tool: its sub-agent's task, for the workflow to run."""
    assert tool.agent is not None
    try:
        task = clean_text(tool.agent.task(args))
    except Exception as e:
        log.error("agent tool %s: rendering its task raised", tool.name, exc_info=e)
        return ToolRun(clean_text(f"{type(e).__name__}: {e}"), True)
    if (size := len(task.encode())) > MAX_AGENT_TASK_BYTES:
        text = (
            f"{AGENT_TASK_TOO_LARGE}: the task for agent {tool.name!r} is {size} bytes, over"
            f" the limit of {MAX_AGENT_TASK_BYTES}; give the sub-agent a shorter task"
        )
        return ToolRun(text, True)
    if not task.strip():
        return ToolRun(f"agent {tool.name!r} was given an empty task", True, outcome="invalid")
    return ToolRun(None, pending="agent", task=task)


async def execute(
    tool: Tool,
    args: BaseModel,
    run_ctx: ToolContext,
    on_preliminary: Callable[[Any], Awaitable[None]] | None = None,
) -> ToolRun:
    """Run the tool within its ``timeout_s``. A timeout or an exception is an error result
    the model sees, logged with its traceback, or (``retries``) a new activity attempt."""
    where = f"tool {tool.name} (call {run_ctx.tool_call_id}, attempt {run_ctx.attempt})"
    try:
        async with asyncio.timeout(tool.timeout_s) as limit:
            if tool.blocking or not tool.isolated or not isolation.enabled():
                with loopwatch.running(f"tool {tool.name}"):
                    output = await tool.run(args, run_ctx, on_preliminary)
            else:  # on a user loop of its own: blocking code there stalls only this call
                off_ctx = dataclasses.replace(
                    run_ctx, heartbeat=isolation.thread_safe_heartbeat(run_ctx.heartbeat)
                )
                prelim = None if on_preliminary is None else isolation.back_here(on_preliminary)
                output = await isolation.run(
                    f"tool {tool.name}", functools.partial(tool.run, args, off_ctx, prelim)
                )
        return ToolRun(jsonable(output))
    except asyncio.CancelledError:
        raise
    except ToolFailed as e:  # the tool's own error result: the model is told, as it is
        return ToolRun(jsonable(e.output), True)
    except Exception as e:
        if isinstance(e, TimeoutError) and limit.expired():
            text = f'ToolTimeout: tool "{tool.name}" did not finish within {tool.timeout_s:g}s.'
            log.warning("%s timed out after %gs", where, tool.timeout_s)
            error_type = TOOL_TIMEOUT
        else:
            text = f"{type(e).__name__}: {e}"
            log.error("%s raised %s", where, type(e).__name__, exc_info=e)
            error_type = TOOL_ERROR
        text = redact(text)  # a tool's error never carries a provider key onward
        # its own failures count, not its worker's deaths (which have their own budget)
        if tool.retry_safe and heartbeats.failures(run_ctx.attempt) < min(
            tool.retries, MAX_TOOL_ATTEMPTS - 1
        ):
            raise ApplicationError(clean_text(text), type=error_type) from None
        return ToolRun(clean_text(text), True)


def _short_circuit(decision: ToolCallDecision, tool_name: str) -> ToolRun:
    if decision.action == "block":
        return ToolRun(decision.reason or blocked_text(tool_name), blocked=True, outcome="blocked")
    return ToolRun(jsonable(decision.output), blocked=True, outcome="substituted")


def invalid_args(tool: Tool, error: ValidationError) -> str:
    return f'Invalid arguments for tool "{tool.name}": {validation_problems(error)}'
