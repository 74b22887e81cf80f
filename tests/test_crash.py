"""kill -9 the worker mid-turn; a second worker finishes it and nothing is duplicated."""

from __future__ import annotations

import asyncio

from durable_turns.contract import MODEL_STEP
from durable_turns.messages import ToolCallPart, ToolResultPart
from tests.support.harness import Harness
from tests.support.history import activity_attempts
from tests.support.probes import turn_status, wait_until


async def assert_single_reply(harness: Harness, conversation: str) -> None:
    messages = await (await harness.store()).messages(conversation)
    assert [m.role for m in messages] == ["user", "assistant"], messages


async def test_kill_during_model_step(harness: Harness) -> None:
    first = harness.start_worker()
    text = " ".join(f"word{i}" for i in range(30))
    model = harness.script([{"text": text, "delay_ms": 100}])
    conversation = harness.conv("crash-model")
    request = await harness.turns.submit(conversation, "tell me", model=model)
    await wait_until(lambda: turn_status(harness, conversation))
    await wait_until(lambda: _is(turn_status(harness, conversation), "model step 0"))
    await asyncio.sleep(0.8)  # mid-stream
    first.kill()
    harness.start_worker()
    result = await asyncio.wait_for(harness.turns.wait(conversation, request), 60)
    assert result.status == "completed"
    assert result.text == text
    await assert_single_reply(harness, conversation)
    attempts = await activity_attempts(harness, result.workflow_id, MODEL_STEP)
    assert attempts == [1, 2], "the model step was retried on the second worker"


async def test_kill_during_tool_call(harness: Harness) -> None:
    first = harness.start_worker()
    model = harness.script(
        [
            {"tool_calls": [{"name": "slow", "input": {"seconds": 3}}]},
            {"text": "result: {tool_result}"},
        ]
    )
    conversation = harness.conv("crash-tool")
    request = await harness.turns.submit(conversation, "go", model=model)
    await wait_until(lambda: any(r["phase"] == "start" for r in harness.tool_runs()))
    first.kill()
    harness.start_worker()
    result = await asyncio.wait_for(harness.turns.wait(conversation, request), 60)
    assert result.status == "completed"
    assert result.text == "result: slept 3.0s"
    harness.assert_tool_ran_again_to_its_end_once()
    await assert_single_reply(harness, conversation)
    [_, assistant] = await (await harness.store()).messages(conversation)
    assert len([p for p in assistant.parts if isinstance(p, ToolCallPart)]) == 1
    assert len([p for p in assistant.parts if isinstance(p, ToolResultPart)]) == 1


async def test_tool_not_safe_to_retry_reports_interruption(harness: Harness) -> None:
    first = harness.start_worker()
    model = harness.script(
        [
            {"tool_calls": [{"name": "charge_card", "input": {"seconds": 3}}]},
            {"text": "tool said: {tool_result}"},
        ]
    )
    conversation = harness.conv("crash-unsafe")
    request = await harness.turns.submit(conversation, "pay", model=model)
    await wait_until(lambda: any(r["tool"] == "charge_card" for r in harness.tool_runs()))
    first.kill()
    harness.start_worker()
    result = await asyncio.wait_for(harness.turns.wait(conversation, request), 60)
    assert result.status == "completed"
    assert "interrupted before a result was recorded" in result.text
    assert len(harness.tool_runs()) == 1, "the unsafe tool did not run twice"


async def _is(value: object, expected: str) -> bool:
    return (await value if asyncio.iscoroutine(value) else value) == expected  # type: ignore[no-any-return]
