"""The hook tests' worker code under the tests' own name, and the hook tests' helpers.

The hooks, extensions, tools and transform live in ``testkit/hooks.py`` (the benchmarks run
them too, and ``bench/`` imports nothing from ``tests/``); this module re-exports them, so a
worker started with ``TURNS_HOOKS=tests.support.hooks:RecordingHooks`` and
``TURNS_TOOLS=tests.support.tools,tests.support.hooks`` loads the very same ones.
"""

from __future__ import annotations

import asyncio
from typing import Any

from testkit.hooks import *  # noqa: F403  (a worker loads the hooks and tools found here)
from testkit.hooks import RecordingHooks as RecordingHooks
from testkit.hooks import record as record

# --- test-side helpers -------------------------------------------------------------------------

HOOK_TOOLS = "tests.support.tools,tests.support.hooks"


def start_worker(harness: Any, hooks: str = "RecordingHooks", **env: str) -> Any:
    """A worker running ``tests.support.hooks:<hooks>`` with the test tools and these tools."""
    env.setdefault("TURNS_TOOLS", HOOK_TOOLS)
    return harness.start_worker(TURNS_HOOKS=f"tests.support.hooks:{hooks}", **env)


async def wait_for_hook(
    harness: Any, hook: str, within_s: float = 30, **match: Any
) -> dict[str, Any]:
    """The first recorded call of ``hook`` whose fields include ``match`` (polls the log)."""
    deadline = asyncio.get_running_loop().time() + within_s
    while True:
        for call in harness.hook_calls():
            if call["hook"] == hook and all(call.get(k) == v for k, v in match.items()):
                return call
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError(f"no {hook} call matching {match}: {harness.hook_calls()[-5:]}")
        await asyncio.sleep(0.05)


def calls(harness: Any, hook: str, **match: Any) -> list[dict[str, Any]]:
    return [
        c
        for c in harness.hook_calls()
        if c["hook"] == hook and all(c.get(k) == v for k, v in match.items())
    ]
