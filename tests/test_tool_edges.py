"""Tools and hooks at the edges: blocking code, timeouts and retries, output that is not
UTF-8, failures in the log. Real worker processes on the real dev server, default settings."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from temporalio.api.enums.v1 import EventType

from durable_turns.messages import ToolResultPart
from tests.support.harness import Harness

TOOLS = "tests.support.tools,tests.support.edge_tools"
SYNC_TOOLS = f"{TOOLS},tests.support.sync_tools"
RETRY_TOOLS = f"{TOOLS},tests.support.retry_tools"


def calling(tool: str, **input: Any) -> list[dict[str, Any]]:
    return [{"tool_calls": [{"name": tool, "input": input}]}, {"text": "{tool_result}"}]


async def tool_result(harness: Harness, conversation: str) -> ToolResultPart:
    messages = await (await harness.store()).messages(conversation)
    [part] = [p for m in messages for p in m.parts if isinstance(p, ToolResultPart)]
    return part


async def until(check: Any, within_s: float = 30) -> None:
    deadline = time.monotonic() + within_s
    while not check():
        assert time.monotonic() < deadline, "timed out waiting"
        await asyncio.sleep(0.1)


async def timed_turn(harness: Harness, conversation: str) -> float:
    started = time.monotonic()
    result = await asyncio.wait_for(harness.send(conversation, "hello", model="demo:echo"), 30)
    assert result.status == "completed" and result.text == "You said: hello"
    return time.monotonic() - started


# --- blocking code never delays another conversation ----------------------------------------


async def test_a_blocking_sync_tool_does_not_delay_other_conversations(harness: Harness) -> None:
    harness.start_worker(TURNS_TOOLS=SYNC_TOOLS)
    blocked = asyncio.create_task(
        harness.send(
            harness.conv("blocked"), "go", model=harness.script(calling("block_sync", seconds=15))
        )
    )
    await until(lambda: any(r["tool"] == "block_sync" for r in harness.tool_runs()))
    assert await timed_turn(harness, harness.conv("other")) < 6
    assert not blocked.done()
    result = await asyncio.wait_for(blocked, 60)
    assert result.status == "completed" and result.text == "blocked 15.0s"


async def test_a_blocking_sync_hook_does_not_delay_other_conversations(harness: Harness) -> None:
    harness.start_worker(TURNS_HOOKS="tests.support.edge_hooks:BlockingHooks")
    blocked = asyncio.create_task(
        harness.send(harness.conv("blocked"), "hi", model="demo:echo", body={"block_s": 15})
    )
    await until(lambda: bool(harness.hook_calls()))
    assert await timed_turn(harness, harness.conv("other")) < 6
    result = await asyncio.wait_for(blocked, 60)
    assert result.status == "completed"


async def test_an_async_tool_that_blocks_is_named_in_the_log(harness: Harness) -> None:
    worker = harness.start_worker(TURNS_TOOLS=TOOLS)
    model = harness.script(calling("block_async", seconds=3))
    result = await harness.send(harness.conv("holds"), "go", model=model)
    assert result.status == "completed"
    log = worker.log_tail(20_000)
    # on its own user loop (activities/isolation.py): only its own turn waited
    assert "event loop blocked (user loop" in log and "by tool block_async" in log
    assert "edge_tools.py" in log  # where: the blocking line


# --- timeouts and retries -------------------------------------------------------------------


async def test_a_tool_that_overruns_its_timeout_is_a_tool_timeout(harness: Harness) -> None:
    worker = harness.start_worker(TURNS_TOOLS=TOOLS)
    conversation = harness.conv("hang")
    started = time.monotonic()
    result = await asyncio.wait_for(
        harness.send(conversation, "go", model=harness.script(calling("hang"))), 30
    )
    assert time.monotonic() - started < 20
    assert result.status == "completed"
    part = await tool_result(harness, conversation)
    assert part.is_error and part.output == 'ToolTimeout: tool "hang" did not finish within 1s.'
    assert result.text == part.output  # the model saw it
    assert [r["tool"] for r in harness.tool_runs()] == ["hang"]  # no retries: it ran once
    assert "tool hang (call" in worker.log_tail(20_000)


async def test_a_tool_with_retries_is_run_again_after_a_timeout(harness: Harness) -> None:
    harness.start_worker(TURNS_TOOLS=RETRY_TOOLS)
    conversation = harness.conv("retry")
    result = await asyncio.wait_for(
        harness.send(conversation, "go", model=harness.script(calling("hang_once"))), 30
    )
    assert result.status == "completed" and result.text == "answered on attempt 2"
    assert [r["attempt"] for r in harness.tool_runs()] == [1, 2]
    assert not (await tool_result(harness, conversation)).is_error
    # the UI shows the tool's limits on its activity
    history = await harness.client.get_workflow_handle(result.workflow_id).fetch_history()
    scheduled = [  # one schedule per attempt: the workflow counts them
        e
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == "tool_call"
    ]
    summaries = [json.loads(e.user_metadata.summary.data) for e in scheduled]
    assert summaries == ["tool hang_once · timeout 1s · retries 2"] * 2


async def test_a_tool_not_safe_to_retry_is_not_retried_after_a_timeout(harness: Harness) -> None:
    harness.start_worker(TURNS_TOOLS=RETRY_TOOLS)
    conversation = harness.conv("unsafe")
    result = await asyncio.wait_for(
        harness.send(conversation, "go", model=harness.script(calling("hang_unsafe"))), 30
    )
    assert result.status == "completed"
    assert (await tool_result(harness, conversation)).output.startswith("ToolTimeout:")
    assert [r["attempt"] for r in harness.tool_runs()] == [1]


# --- output that is not UTF-8, failures in the log ------------------------------------------


async def test_tool_output_that_is_not_utf8_is_made_safe_once(harness: Harness) -> None:
    harness.start_worker(TURNS_TOOLS=TOOLS)
    conversation = harness.conv("surrogate")
    result = await asyncio.wait_for(
        harness.send(conversation, "go", model=harness.script(calling("surrogate"))), 60
    )
    assert result.status == "completed", result.error
    part = await tool_result(harness, conversation)
    assert part.output == {"text": "bad \ufffd text", "nul": "a\ufffdb"}
    assert len(harness.tool_runs()) == 1


async def test_every_tool_failure_is_logged_with_its_traceback(harness: Harness) -> None:
    worker = harness.start_worker()
    conversation = harness.conv("explode")
    result = await harness.send(conversation, "go", model=harness.script(calling("explode")))
    assert result.status == "completed"
    assert (await tool_result(harness, conversation)).output == "RuntimeError: the tool exploded"
    log = worker.log_tail(20_000)
    assert "tool explode (call" in log and "Traceback (most recent call last)" in log
    assert 'raise RuntimeError("the tool exploded")' in log


async def test_an_oversized_tool_output_is_a_typed_error_the_model_sees(harness: Harness) -> None:
    harness.start_worker(TURNS_TOOLS=TOOLS)
    conversation = harness.conv("flood")
    result = await asyncio.wait_for(
        harness.send(conversation, "go", model=harness.script(calling("flood", megabytes=3))), 60
    )
    assert result.status == "completed"
    part = await tool_result(harness, conversation)
    assert part.is_error and part.output.startswith("ToolOutputTooLarge: tool 'flood' returned")
    assert result.text.startswith("ToolOutputTooLarge")  # what the model was given
    assert [r["tool"] for r in harness.tool_runs()] == ["flood"]  # run once, not retried
