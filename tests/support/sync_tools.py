"""A plain-def tool that blocks (``TURNS_TOOLS=…,tests.support.sync_tools``)."""

from __future__ import annotations

import time

from pydantic import BaseModel, Field

from durable_turns.tools import ToolContext, tool
from tests.support.tools import _log


class BlockArgs(BaseModel):
    seconds: float = Field(ge=0, le=60)


@tool
def block_sync(args: BlockArgs, ctx: ToolContext) -> str:
    """A plain def that blocks (a blocking client, time.sleep): it must run in a thread."""
    _log(ctx, phase="start")
    ctx.heartbeat()
    time.sleep(args.seconds)
    return f"blocked {args.seconds}s"
