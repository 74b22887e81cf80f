"""Tools that misbehave at the edges (``TURNS_TOOLS=tests.support.tools,tests.support.edge_tools``).

Plain-def tools are in ``sync_tools``, tools with ``retries`` in ``retry_tools``. Each run is logged like ``tests.support.tools`` does (``TEST_TOOL_LOG``).
"""

from __future__ import annotations

import asyncio
import time

from pydantic import BaseModel, Field

from durable_turns.tools import ToolContext, tool
from tests.support.tools import _log


class BlockArgs(BaseModel):
    seconds: float = Field(ge=0, le=60)


@tool
async def block_async(args: BlockArgs, ctx: ToolContext) -> str:
    """An async tool that blocks the event loop: the worker must name it in its log."""
    _log(ctx, phase="start")
    time.sleep(args.seconds)  # noqa: ASYNC251 (on purpose)
    return "held the loop"


class NoArgs(BaseModel):
    pass


@tool(timeout_s=1)
async def hang(args: NoArgs, ctx: ToolContext) -> str:
    """Never answers within its one-second timeout."""
    _log(ctx)
    await asyncio.sleep(120)
    return "never"


@tool
async def surrogate(args: NoArgs, ctx: ToolContext) -> dict[str, str]:
    """Returns text that is not valid UTF-8 (a lone surrogate) and a NUL."""
    _log(ctx)
    return {"text": "bad \ud800 text", "nul": "a\x00b"}


class SizeArgs(BaseModel):
    megabytes: float = Field(ge=0, le=50)


@tool
async def flood(args: SizeArgs, ctx: ToolContext) -> str:
    """Returns far more text than a tool may."""
    _log(ctx)
    return "x" * int(args.megabytes * 1024 * 1024)
