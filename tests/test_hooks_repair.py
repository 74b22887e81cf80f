"""``repair_tool_call``: a call of the model that does not validate (an unknown tool,
arguments that are not JSON, input that fails the tool's model) is repaired once, in its
model step; the stored step, the transcript and the next step show the repaired call."""

from __future__ import annotations

import asyncio
from typing import Any

from durable_turns.activities.tool_calls import STILL_INVALID
from durable_turns.contract import TurnResult
from durable_turns.messages import Message, ToolCallPart, ToolResultPart
from durable_turns.store import StepRecord
from tests.support.harness import Harness
from tests.support.hooks import calls, start_worker
from tests.support.probes import wait_until


def call(name: str, **how: Any) -> list[dict[str, Any]]:
    """A two-step script: one call of ``name``, then a reply that quotes its result and
    what the model was sent (so the test sees what the next step got)."""
    return [
        {"tool_calls": [{"name": name, "id": "call_1", **how}]},
        {"text": "{tool_result}"},
    ]


async def turn(
    harness: Harness, name: str, script: list[dict[str, Any]], repairs: dict[str, Any]
) -> tuple[TurnResult, Message, StepRecord]:
    conversation = harness.conv(name)
    result = await harness.send(
        conversation, "go", model=harness.script(script), body={"repairs": repairs}
    )
    assert result.status == "completed"
    store = await harness.store()
    [_, assistant] = await store.messages(conversation)
    [step, _] = await store.steps(result.workflow_id, 0)
    return result, assistant, step


def parts(message: Message) -> tuple[ToolCallPart, ToolResultPart]:
    [made] = [p for p in message.parts if isinstance(p, ToolCallPart)]
    [got] = [p for p in message.parts if isinstance(p, ToolResultPart)]
    return made, got


async def test_an_unknown_tool_is_repaired_and_runs(harness: Harness) -> None:
    start_worker(harness)
    script = call("nte", input={"text": "fixed", "limit": 3})
    result, assistant, step = await turn(harness, "unknown", script, {"nte": {"tool_name": "note"}})
    [asked] = calls(harness, "repair_tool_call")
    assert asked["problem"] == "unknown_tool" and asked["tool"] == "nte"
    assert asked["error"].startswith('Unknown tool "nte". Available tools: ')
    assert "note" in asked["tools"] and asked["input"] == {"text": "fixed", "limit": 3}
    assert asked["message_count"] == 1 and asked["system"]  # what the step sent
    # the transcript records the repaired call under the model's id, and its result
    made, got = parts(assistant)
    assert (made.tool_call_id, made.tool_name) == ("call_1", "note")
    assert got.output == "noted fixed (limit 3)" and not got.is_error
    assert result.text == "noted fixed (limit 3)"  # the next step saw the repaired call's result
    # the stored step keeps what the model called, and what the hook did
    repair = step.repairs["call_1"]
    assert (repair.tool_name, repair.problem, repair.repaired) == ("nte", "unknown_tool", True)
    [before] = calls(harness, "before_tool_call")
    [after] = calls(harness, "after_tool_call")
    assert before["tool"] == after["tool"] == "note" and before["repaired"] and after["repaired"]
    assert after["outcome"] == "ran" and after["success"]
    assert [r["text"] for r in calls(harness, "tool")] == ["fixed"]


async def test_invalid_input_and_bad_json_are_repaired(harness: Harness) -> None:
    start_worker(harness)
    fixed = {"input": {"text": "ok", "limit": 7}}
    script = call("note", input={"text": "ok", "limit": "many"})
    _, assistant, step = await turn(harness, "invalid", script, {"note": fixed})
    made, got = parts(assistant)
    assert made.input == {"text": "ok", "limit": 7} and got.output == "noted ok (limit 7)"
    assert step.repairs["call_1"].input == {"text": "ok", "limit": "many"}
    [asked] = calls(harness, "repair_tool_call")
    assert asked["problem"] == "invalid_input"
    assert asked["error"].startswith('Invalid arguments for tool "note": limit:')

    script = call("note", raw_args='{"text": "ok", limit: 7')
    _, assistant, step = await turn(harness, "bad-json", script, {"note": fixed})
    made, got = parts(assistant)
    assert made.input == {"text": "ok", "limit": 7} and got.output == "noted ok (limit 7)"
    asked = calls(harness, "repair_tool_call")[-1]
    assert asked["problem"] == "invalid_json" and asked["input"] == '{"text": "ok", limit: 7'
    assert step.repairs["call_1"].problem == "invalid_json"


async def test_no_repair_sends_the_validation_error_as_today(harness: Harness) -> None:
    start_worker(harness)
    script = call("note", input={"limit": "many"})
    _, assistant, step = await turn(harness, "none", script, {})
    made, got = parts(assistant)
    assert made.input == {"limit": "many"}  # the model's own call, unchanged
    assert got.is_error and got.output.startswith('Invalid arguments for tool "note": limit:')
    assert not step.repairs["call_1"].repaired
    [after] = calls(harness, "after_tool_call")
    assert after["outcome"] == "invalid" and not after["repaired"]
    assert calls(harness, "tool") == [] and len(calls(harness, "repair_tool_call")) == 1


async def test_a_repair_that_still_fails_is_an_error_never_repaired_twice(
    harness: Harness,
) -> None:
    start_worker(harness)
    script = call("nte", input={})
    _, assistant, _ = await turn(harness, "again", script, {"nte": {"tool_name": "nope"}})
    made, got = parts(assistant)
    assert made.tool_name == "nope"  # the transcript has the call that was tried
    assert got.is_error and got.output.startswith(STILL_INVALID + 'Unknown tool "nope".')
    assert len(calls(harness, "repair_tool_call")) == 1  # the repaired call is not repaired
    [after] = calls(harness, "after_tool_call")
    assert after["outcome"] == "unavailable" and after["repaired"]

    script = call("nte", input={})
    bad = {"nte": {"tool_name": "note", "input": {"limit": "x"}}}
    _, assistant, _ = await turn(harness, "again-input", script, bad)
    _, got = parts(assistant)
    assert got.output.startswith(STILL_INVALID + 'Invalid arguments for tool "note": limit:')
    assert len(calls(harness, "repair_tool_call")) == 2 and calls(harness, "tool") == []


async def test_a_raising_repair_is_a_tool_error(harness: Harness) -> None:
    start_worker(harness)
    result, assistant, step = await turn(harness, "raise", call("nte"), {"nte": "raise"})
    made, got = parts(assistant)
    assert made.tool_name == "nte"
    assert got.is_error and got.output == "repair_tool_call raised LookupError: no repairs today"
    assert step.repairs["call_1"].hook_error == got.output
    [after] = calls(harness, "after_tool_call")
    assert after["outcome"] == "hook_error" and after["success"] is False
    assert calls(harness, "before_tool_call") == []  # the call never got that far
    assert result.text == got.output


async def test_a_repair_is_recorded_once_a_crash_never_asks_again(harness: Harness) -> None:
    """The worker dies while the repaired call runs: another worker runs it again (the same
    call id, the repaired input) from the stored step, and repair_tool_call is not asked."""
    first = start_worker(harness)
    conversation = harness.conv("crash")
    script = call("slw", input={"seconds": "three"})
    repairs = {"slw": {"tool_name": "slow", "input": {"seconds": 2}}}
    request = await harness.turns.submit(
        conversation, "go", model=harness.script(script), body={"repairs": repairs}
    )
    await wait_until(lambda: any(r["phase"] == "start" for r in harness.tool_runs()))
    first.kill()
    start_worker(harness)
    result = await asyncio.wait_for(harness.turns.wait(conversation, request), 60)
    assert result.status == "completed" and result.text == "slept 2.0s"
    starts = [r for r in harness.tool_runs() if r["phase"] == "start"]
    assert [r["id"] for r in starts] == ["call_1", "call_1"]
    assert len(calls(harness, "repair_tool_call")) == 1
