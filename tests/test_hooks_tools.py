"""``before_tool_call`` decisions, ``after_tool_call`` for every outcome, and durability."""

from __future__ import annotations

import asyncio
from typing import Any

from durable_turns.activities.context import tool_result_part
from durable_turns.messages import ToolResultPart
from durable_turns.store import ToolResultRecord
from tests.support.harness import Harness
from tests.support.hooks import calls, start_worker, wait_for_hook
from tests.support.probes import chunk_backend

CALL_NOTE = [
    {"tool_calls": [{"name": "note", "input": {"text": "model", "limit": 500}}]},
    {"text": "{tool_result}"},
]


async def decide(
    harness: Harness, name: str, decision: Any, outcome: str
) -> tuple[ToolResultPart, dict[str, Any]]:
    """Run CALL_NOTE with ``decision`` for note; the stored result and after_tool_call's view.

    The call's ``outcome`` is marked alike on the stored result, in after_tool_call, on the
    tool-result event and (when it is not "ran") in the stored message's metadata."""
    conversation = harness.conv(name)
    body = {"tool_decisions": {"note": decision}}
    result = await harness.send(conversation, "go", model=harness.script(CALL_NOTE), body=body)
    assert result.status == "completed"
    [_, assistant] = await (await harness.store()).messages(conversation)
    [part] = [p for p in assistant.parts if isinstance(p, ToolResultPart)]
    after = calls(harness, "after_tool_call")[-1]  # turns run one at a time
    assert after["id"] == part.tool_call_id
    assert after["input"] == {"text": "model", "limit": 500}  # what the model emitted, always
    assert result.text == (part.output if isinstance(part.output, str) else result.text)
    store = await harness.store()
    [record] = (await store.tool_results(result.workflow_id)).values()
    streams = await chunk_backend(harness)
    [event] = [e for e in await streams.read(result.workflow_id) if e.type == "tool-result"]
    await streams.close()
    assert record.outcome == after["outcome"] == event.data["outcome"] == outcome
    assert record.blocked == (outcome in ("blocked", "substituted"))
    assert event.data["is_error"] == part.is_error  # the existing fields keep their meaning
    marks = (assistant.metadata or {}).get("tool_outcomes")
    assert marks == (None if outcome == "ran" else {part.tool_call_id: outcome})
    assert "outcome" not in part.model_dump()  # what providers get is unchanged
    return part, after


def ran(harness: Harness) -> list[dict[str, Any]]:
    return calls(harness, "tool")


async def test_allow_and_allow_with_input(harness: Harness) -> None:
    start_worker(harness)
    part, after = await decide(harness, "allow", None, "ran")
    assert part.output == "noted model (limit 500)" and after["success"]
    part, after = await decide(
        harness, "clamp", {"action": "allow", "input": {"text": "model", "limit": 50}}, "ran"
    )
    assert part.output == "noted model (limit 50)" and not part.is_error
    assert after["success"] and after["output"] == "noted model (limit 50)"
    assert [r["limit"] for r in ran(harness)] == [500, 50]
    [first, second] = calls(harness, "before_tool_call")
    assert first["input"] == second["input"] == {"text": "model", "limit": 500}
    assert first["message_count"] == 2  # the user's message and this turn's call


async def test_invalid_substituted_input_is_a_tool_error(harness: Harness) -> None:
    start_worker(harness)
    part, after = await decide(
        harness, "bad-input", {"action": "allow", "input": {"limit": "many"}}, "invalid"
    )
    assert part.is_error and part.output.startswith(
        'before_tool_call substituted invalid input: Invalid arguments for tool "note": limit:'
    )
    assert after["success"] is False and after["error"] == part.output
    assert ran(harness) == []


async def test_block_with_default_text_and_with_a_reason(harness: Harness) -> None:
    start_worker(harness)
    part, after = await decide(harness, "block", {"action": "block"}, "blocked")
    assert part.output == 'Tool "note" was blocked by beforeToolCall.' and not part.is_error
    assert after["success"] is True and after["output"] == part.output
    why = {"action": "block", "reason": "read-only mode"}
    part, _ = await decide(harness, "block-why", why, "blocked")
    assert part.output == "read-only mode"
    assert ran(harness) == []


async def test_substitute_output(harness: Harness) -> None:
    start_worker(harness)
    part, after = await decide(
        harness, "subst", {"action": "substitute", "output": {"cached": True}}, "substituted"
    )
    assert part.output == {"cached": True} and not part.is_error
    assert after["success"] is True and after["output"] == {"cached": True}
    assert ran(harness) == []


async def test_a_raising_hook_is_a_tool_error(harness: Harness) -> None:
    start_worker(harness)
    part, after = await decide(harness, "raise", "raise", "hook_error")
    assert (
        part.is_error and part.output == "before_tool_call raised PermissionError: no tools today"
    )
    assert after["success"] is False and after["error"] == part.output
    assert ran(harness) == []


async def test_an_unknown_tool_is_marked_unavailable(harness: Harness) -> None:
    start_worker(harness)
    script = [{"tool_calls": [{"name": "no_such_tool", "input": {}}]}, {"text": "{tool_result}"}]
    result = await harness.send(harness.conv("unknown"), "go", model=harness.script(script))
    [after] = calls(harness, "after_tool_call")
    assert after["success"] is False and after["outcome"] == "unavailable"
    [record] = (await (await harness.store()).tool_results(result.workflow_id)).values()
    assert record.outcome == "unavailable" and record.is_error and not record.blocked


async def test_after_tool_call_for_failures_and_duration(harness: Harness) -> None:
    start_worker(harness)
    script = [
        {
            "tool_calls": [
                {"name": "explode", "input": {}},
                {"name": "slow", "input": {"seconds": 0.3}},
            ]
        },
        {"text": "done"},
    ]
    await harness.send(harness.conv("after"), "go", model=harness.script(script))
    by_tool = {c["tool"]: c for c in calls(harness, "after_tool_call")}
    assert by_tool["explode"]["success"] is False
    assert by_tool["explode"]["error"] == "RuntimeError: the tool exploded"
    assert by_tool["slow"]["success"] is True and by_tool["slow"]["output"] == "slept 0.3s"
    assert by_tool["slow"]["duration_ms"] >= 300


async def test_a_recorded_decision_is_not_asked_again_after_a_crash(harness: Harness) -> None:
    first = start_worker(harness)
    words = " ".join(f"w{i}" for i in range(20))
    script = [
        {"tool_calls": [{"name": "note", "input": {"text": "model", "limit": 500}}]},
        {"text": "{tool_result} " + words, "delay_ms": 100},
    ]
    conversation = harness.conv("durable")
    body = {
        "tool_decisions": {"note": {"action": "allow", "input": {"text": "clamped", "limit": 5}}}
    }
    request = await harness.turns.submit(
        conversation, "go", model=harness.script(script), body=body
    )
    await wait_for_hook(harness, "on_chunk", step=1, type="text-delta")  # the tool call is recorded
    first.kill()
    start_worker(harness)
    result = await asyncio.wait_for(harness.turns.wait(conversation, request), 60)
    assert result.status == "completed"
    assert result.text.startswith("noted clamped (limit 5) w0")
    assert len(calls(harness, "before_tool_call")) == 1, "the decision was asked again"
    assert len(ran(harness)) == 1 and len(calls(harness, "after_tool_call")) == 1
    assert len(calls(harness, "before_step", step=1)) == 2  # the model step did run again


def test_a_result_recorded_before_outcomes_still_reads() -> None:
    old = '{"tool_call_id": "c1", "tool_name": "note", "step": 0, "output": "no", "blocked": true}'
    record = ToolResultRecord.model_validate_json(old)
    assert record.outcome is None and record.blocked
    assert tool_result_part(record) == ToolResultPart(
        tool_call_id="c1", tool_name="note", output="no"
    )
