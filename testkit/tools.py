"""Tools of the tests' and the benchmarks' worker processes (``TURNS_TOOLS=testkit.tools``;
the tests load it under their own name too: ``tests/support/tools.py`` re-exports it).

Each execution is appended to the file named by ``TEST_TOOL_LOG`` (one JSON line with the
tool call id), so tests can count how often a tool really ran.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator

from pydantic import BaseModel, Field

from durable_turns.tools import ToolContext, client_tool, tool


def _log(ctx: ToolContext, **extra: object) -> None:
    path = os.environ.get("TEST_TOOL_LOG")
    if path:
        with open(path, "a") as f:
            f.write(
                json.dumps(
                    {"tool": ctx.tool_name, "id": ctx.tool_call_id, "attempt": ctx.attempt, **extra}
                )
                + "\n"
            )


class SleepArgs(BaseModel):
    seconds: float = Field(ge=0, le=60)


@tool
async def slow(args: SleepArgs, ctx: ToolContext) -> str:
    """Sleep, then say so."""
    _log(ctx, phase="start")
    await asyncio.sleep(args.seconds)
    _log(ctx, phase="end")
    return f"slept {args.seconds}s"


@tool(retry_safe=False)
async def charge_card(args: SleepArgs, ctx: ToolContext) -> str:
    """Not safe to run twice: a crash mid-run must not charge again."""
    _log(ctx, phase="start")
    await asyncio.sleep(args.seconds)
    return "charged"


class AddArgs(BaseModel):
    a: int
    b: int


@tool
async def add(args: AddArgs, ctx: ToolContext) -> int:
    """Add two integers."""
    _log(ctx)
    return args.a + args.b


class NoArgs(BaseModel):
    pass


@tool
async def explode(args: NoArgs, ctx: ToolContext) -> str:
    """Always raises."""
    _log(ctx)
    raise RuntimeError("the tool exploded")


class CountArgs(BaseModel):
    to: int = 3


@tool
async def count(args: CountArgs, ctx: ToolContext) -> AsyncIterator[str]:
    """A streaming tool: yields preliminary results; the last is the output."""
    for i in range(1, args.to + 1):
        yield f"counted {i}"


where_am_i = client_tool("where_am_i", description="The user's location, from their device.")


@tool(needs_approval=True)
async def wipe_disk(args: NoArgs, ctx: ToolContext) -> str:
    """Needs the user's approval before it runs."""
    _log(ctx)
    return "disk wiped"
