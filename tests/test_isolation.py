"""User async code that blocks delays only its own turn (issue 25, item 4).

An ``async def`` tool, an ``async def`` hook, ``on_chunk`` and a stream transform that call
``time.sleep`` each hold their own user loop (``activities/isolation.py``): another
conversation's turn on the same worker completes promptly meanwhile. Real worker processes
on the real dev server, at the default settings, and again with every core kept busy by
other processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import pytest

from durable_turns.activities import isolation
from durable_turns.config import Settings
from tests.support.harness import Harness
from tests.support.load import busy_cores

BLOCK_S = 10
"""How long the user code blocks."""
OTHER_TURN_S = 5
"""The other conversation's turn must finish within this (it waited BLOCK_S on old code)."""
TOOLS = "tests.support.tools,tests.support.edge_tools"
HOOKS = "tests.support.async_blocking:AsyncBlockingHooks"


def calling(tool: str, **input: Any) -> list[dict[str, Any]]:
    return [{"tool_calls": [{"name": tool, "input": input}]}, {"text": "{tool_result}"}]


def blocking_turn(harness: Harness, kind: str) -> dict[str, Any]:
    """The ``send`` arguments of a turn whose user code of ``kind`` blocks."""
    if kind == "tool":
        model = harness.script(calling("block_async", seconds=BLOCK_S))
        return {"text": "go", "model": model}
    if kind == "hook":
        return {"text": "hi", "model": "demo:echo", "body": {"block": "before_turn"}}
    if kind == "on_chunk":
        return {"text": "BLOCK", "model": "demo:echo", "body": {"block": "on_chunk"}}
    assert kind == "transform"
    return {"text": "BLOCK", "model": "demo:echo", "body": {"transform": True}}


def started_blocking(harness: Harness, kind: str) -> bool:
    if kind == "tool":
        return any(r["tool"] == "block_async" for r in harness.tool_runs())
    where = "before_turn" if kind == "hook" else kind
    return any(c.get("in") == where for c in harness.hook_calls() if c["hook"] == "blocking")


async def until(check: Any, within_s: float = 30) -> None:
    deadline = time.monotonic() + within_s
    while not check():
        assert time.monotonic() < deadline, "timed out waiting"
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("loaded", [False, True], ids=["defaults", "cores-loaded"])
@pytest.mark.parametrize("kind", ["tool", "hook", "on_chunk", "transform"])
async def test_blocking_async_user_code_delays_only_its_own_turn(
    harness: Harness, kind: str, loaded: bool
) -> None:
    worker = harness.start_worker(
        TURNS_TOOLS=TOOLS,
        TURNS_HOOKS=HOOKS,
        TEST_BLOCK_S=str(BLOCK_S),
    )
    load = busy_cores() if loaded else contextlib.nullcontext()
    with load:
        args = blocking_turn(harness, kind)
        text = args.pop("text")
        started = time.monotonic()
        blocked = asyncio.create_task(harness.send(harness.conv("blocked"), text, **args))
        await until(lambda: started_blocking(harness, kind))
        other_started = time.monotonic()
        other = await asyncio.wait_for(
            harness.send(harness.conv("other"), "hello", model="demo:echo"), BLOCK_S * 3
        )
        other_s = time.monotonic() - other_started
        assert other.status == "completed" and other.text == "You said: hello"
        print(f"{kind}: the other turn took {other_s:.2f}s")
        assert other_s < OTHER_TURN_S, f"the other turn took {other_s:.1f}s"
        assert not blocked.done()  # it is still blocked: the other turn did not wait for it
        result = await asyncio.wait_for(blocked, 60)
    assert result.status == "completed", result
    assert time.monotonic() - started >= BLOCK_S  # its own turn did wait
    log = worker.log_tail(20_000)
    assert "event loop blocked (user loop" in log  # named, on its own loop
    label = {"tool": "tool block_async", "hook": "hook before_turn"}.get(kind)
    label = label or {"on_chunk": "hook on_chunk", "transform": "stream transform"}[kind]
    assert f"by {label}" in log


def test_the_pool_of_user_loops_is_a_bounded_setting() -> None:
    assert Settings().user_loops == isolation.USER_LOOPS == 32
    for bad in (-1, isolation.MAX_USER_LOOPS + 1):
        with pytest.raises(ValueError, match="TURNS_USER_LOOPS must be 0"):
            Settings(user_loops=bad)
        with pytest.raises(ValueError, match="TURNS_USER_LOOPS must be 0"):
            isolation.configure(bad)
