"""Client tools and approvals: the turn waits durably, then continues as a continuation."""

from __future__ import annotations

import asyncio

from durable_turns.messages import ToolResultPart
from tests.support.harness import Harness
from tests.support.probes import pending_calls, turns_done, wait_until

LOCATE = [
    {"text": "Let me ask your device.", "tool_calls": [{"name": "where_am_i", "input": {}}]},
    {"text": "You are in {tool_results}."},
]


async def test_client_tool_result_then_auto_continuation(harness: Harness) -> None:
    harness.start_worker()
    conversation = harness.conv("client-tool")
    request = await harness.turns.submit(conversation, "where am I?", model=harness.script(LOCATE))
    [call] = await pending_calls(harness, conversation)
    assert call["tool_name"] == "where_am_i" and call["waiting_for"] == "client"
    await harness.turns.submit_tool_result(conversation, call["tool_call_id"], "Lisbon")
    first = await harness.turns.wait(conversation, request)
    assert first.status == "completed" and first.auto_continue
    await wait_until(lambda: turns_done(harness, conversation, 2))
    state = await harness.turns.state(conversation)
    assert state.last_result is not None
    second = state.last_result
    assert second.continuation and second.text == "You are in Lisbon."
    messages = await (await harness.store()).messages(conversation)
    assert [m.role for m in messages] == ["user", "assistant", "assistant"]
    [result] = [p for p in messages[1].parts if isinstance(p, ToolResultPart)]
    assert result.output == "Lisbon" and not result.is_error


async def test_parallel_client_results_are_gathered_before_continuing(harness: Harness) -> None:
    harness.start_worker()
    conversation = harness.conv("client-par")
    model = harness.script(
        [
            {
                "tool_calls": [
                    {"name": "where_am_i", "input": {}},
                    {"name": "where_am_i", "input": {}},
                ]
            },
            {"text": "Both: {tool_results}."},
        ]
    )
    await harness.turns.submit(conversation, "two devices?", model=model)
    calls = await pending_calls(harness, conversation, 2)
    await harness.turns.submit_tool_result(conversation, calls[0]["tool_call_id"], "Porto")
    await asyncio.sleep(1.0)
    state = await harness.turns.state(conversation)
    assert state.turn_count == 1, "no continuation before every result is in"
    await harness.turns.submit_tool_result(conversation, calls[1]["tool_call_id"], "Faro")
    await wait_until(lambda: turns_done(harness, conversation, 2))
    state = await harness.turns.state(conversation)
    assert (
        state.last_result is not None
        and state.last_result.text == 'Both: "Porto"; "Faro".'.replace('"', "")
    )
    assert state.turn_count == 2


async def test_waiting_survives_a_worker_crash(harness: Harness) -> None:
    first = harness.start_worker()
    conversation = harness.conv("client-crash")
    await harness.turns.submit(conversation, "where am I?", model=harness.script(LOCATE))
    [call] = await pending_calls(harness, conversation)
    first.kill()
    harness.start_worker()
    await harness.turns.submit_tool_result(conversation, call["tool_call_id"], "Braga")
    await wait_until(lambda: turns_done(harness, conversation, 2), within=60)
    state = await harness.turns.state(conversation)
    assert state.last_result is not None and state.last_result.text == "You are in Braga."


async def test_client_tool_timeout_gives_the_model_an_error(harness: Harness) -> None:
    harness.start_worker(TURNS_CLIENT_TOOL_TIMEOUT_S="1")
    conversation = harness.conv("client-timeout")
    request = await harness.turns.submit(conversation, "where am I?", model=harness.script(LOCATE))
    first = await harness.turns.wait(conversation, request)
    assert first.status == "completed"
    messages = await (await harness.store()).messages(conversation)
    [result] = [p for p in messages[1].parts if isinstance(p, ToolResultPart)]
    assert result.is_error and result.output == "The client sent no result within 1s."


async def test_approval_approved_runs_the_tool(harness: Harness) -> None:
    harness.start_worker()
    conversation = harness.conv("approve")
    model = harness.script(
        [{"tool_calls": [{"name": "wipe_disk", "input": {}}]}, {"text": "Result: {tool_result}"}]
    )
    await harness.turns.submit(conversation, "wipe it", model=model)
    [call] = await pending_calls(harness, conversation)
    assert call["waiting_for"] == "approval"
    assert harness.tool_runs() == [], "nothing runs before the approval"
    await harness.turns.approve(conversation, call["tool_call_id"])
    await wait_until(lambda: turns_done(harness, conversation, 2))
    state = await harness.turns.state(conversation)
    assert state.last_result is not None and state.last_result.text == "Result: disk wiped"
    assert [r["tool"] for r in harness.tool_runs()] == ["wipe_disk"]


async def test_approval_denied_never_runs_the_tool(harness: Harness) -> None:
    harness.start_worker()
    conversation = harness.conv("deny")
    model = harness.script(
        [{"tool_calls": [{"name": "wipe_disk", "input": {}}]}, {"text": "Result: {tool_result}"}]
    )
    await harness.turns.submit(conversation, "wipe it", model=model)
    [call] = await pending_calls(harness, conversation)
    await harness.turns.approve(
        conversation, call["tool_call_id"], approved=False, reason="not today"
    )
    await wait_until(lambda: turns_done(harness, conversation, 2))
    state = await harness.turns.state(conversation)
    assert state.last_result is not None
    assert state.last_result.text == 'Result: The user denied the call to "wipe_disk": not today'
    assert harness.tool_runs() == []
    [_, asked, *_] = await (await harness.store()).messages(conversation)
    [part] = [p for p in asked.parts if isinstance(p, ToolResultPart)]
    assert part.is_error  # as before; the mark tells a refusal from the tool's own error
    assert (asked.metadata or {})["tool_outcomes"] == {call["tool_call_id"]: "denied"}
