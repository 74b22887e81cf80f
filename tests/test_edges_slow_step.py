"""A slow before_step, or a provider's first use, is a live worker, not a dead one."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from durable_turns.activities.deps import ActivityDeps
from durable_turns.config import Settings
from durable_turns.hooks import TurnHooks
from durable_turns.models import DemoProvider, ModelProvider, ModelRegistry
from durable_turns.tools import ToolRegistry
from tests.support.harness import Harness
from tests.support.history import activity_attempts

SLOW = "tests.support.slow_hooks:SlowHooks"
WEATHER = [
    {"text": "Looking.", "tool_calls": [{"name": "get_weather", "input": {"city": "Lima"}}]},
    {"text": "Forecast: {tool_result}."},
]


async def test_a_before_step_longer_than_the_heartbeat_timeout_keeps_its_step(
    harness: Harness,
) -> None:
    """At the default 30 s heartbeat timeout, a 35 s before_step (a retrieval call, say)."""
    harness.start_worker(
        TURNS_HOOKS=SLOW, TEST_SLOW_HOOK="before_step:35", TURNS_HEARTBEAT_TIMEOUT_S="30"
    )
    conversation = harness.conv("slow-before-step")
    model = harness.script(WEATHER)
    result = await asyncio.wait_for(harness.send(conversation, "weather?", model=model), 65)
    assert result.status == "completed", result.error
    assert "Forecast: " in result.text
    assert max(await activity_attempts(harness, result.workflow_id, "model_step")) == 1


async def test_a_provider_is_built_off_the_event_loop() -> None:
    """The first use of a provider imports its SDK (1.5–2 s): not on the worker's loop."""
    built_on: list[threading.Thread] = []

    def factory() -> ModelProvider:
        built_on.append(threading.current_thread())
        return DemoProvider()

    deps = ActivityDeps(
        store=Any,  # type: ignore[arg-type]
        models=ModelRegistry({"slow": factory}),
        tools=ToolRegistry(),
        hooks=TurnHooks(),
        settings=Settings(),
    )
    results = await asyncio.gather(*(deps.resolve_async("slow:m") for _ in range(3)))
    assert [name for _, name in results] == ["m"] * 3
    assert len(built_on) == 1 and built_on[0] is not threading.main_thread()
    await deps.resolve_async("slow:again")  # built: resolved at once
    assert len(built_on) == 1
