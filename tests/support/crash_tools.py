"""A tool that kills its own worker (``TURNS_TOOLS=…,tests.support.crash_tools``): a native
crash or an out-of-memory kill, on every attempt. Each run is logged as
``tests.support.tools`` logs them, before the kill."""

from __future__ import annotations

import os
import signal

from durable_turns.tools import ToolContext, tool
from tests.support.tools import NoArgs, _log


@tool
async def crash(args: NoArgs, ctx: ToolContext) -> str:
    """SIGKILL the worker running it, every time."""
    _log(ctx, phase="start")
    os.kill(os.getpid(), signal.SIGKILL)
    return "unreachable"
