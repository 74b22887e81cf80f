"""Tools with a retry policy (``TURNS_TOOLS=…,tests.support.retry_tools``)."""

from __future__ import annotations

import asyncio

from pydantic import BaseModel

from durable_turns.tools import ToolContext, tool
from tests.support.tools import _log


class NoArgs(BaseModel):
    pass


@tool(timeout_s=1, retries=2)
async def hang_once(args: NoArgs, ctx: ToolContext) -> str:
    """Hangs on its first attempt only; retried by its policy."""
    _log(ctx)
    if ctx.attempt == 1:
        await asyncio.sleep(120)
    return f"answered on attempt {ctx.attempt}"


@tool(timeout_s=1, retries=2, retry_safe=False)
async def hang_unsafe(args: NoArgs, ctx: ToolContext) -> str:
    """Not safe to run twice: a timeout is reported, never retried."""
    _log(ctx)
    await asyncio.sleep(120)
    return "never"
