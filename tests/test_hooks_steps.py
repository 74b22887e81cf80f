"""``before_step`` overrides, ``on_step_finish``'s fields and what ``on_chunk`` sees."""

from __future__ import annotations

import json
from typing import Any

from durable_turns.contract import TurnResult
from tests.support.harness import Harness
from tests.support.hooks import calls, start_worker, wait_for_hook

ECHO = "{request.system}|{request.tool_choice}|{request.tools}|{request.provider_options}"


def note(text: str = "x") -> dict[str, Any]:
    return {"name": "note", "input": {"text": text}}


async def send(harness: Harness, name: str, script: Any, **body: Any) -> TurnResult:
    return await harness.send(harness.conv(name), "hi", model=harness.script(script), body=body)


async def test_before_step_overrides_apply_to_that_step_only(harness: Harness) -> None:
    start_worker(harness)
    script = [
        {"text": ECHO, "tool_calls": [note(), {"name": "add", "input": {"a": 1, "b": 2}}]},
        {"text": ECHO},
    ]
    step0 = {
        "system": "step zero",
        "tool_choice": {"type": "tool", "tool_name": "note"},
        "active_tools": ["note"],
        "provider_options": {"demo": {"b": 2}},
    }
    result = await send(
        harness,
        "step-ovr",
        script,
        turn_config={"provider_options": {"demo": {"a": 1}, "other": {"c": 3}}},
        step_configs={"0": step0},
    )
    first, second = result.text.split("\n\n")
    system, choice, tools, options = first.split("|")
    assert system == "step zero" and json.loads(choice) == step0["tool_choice"]
    assert json.loads(tools) == ["note"]
    assert json.loads(options) == {"demo": {"b": 2}, "other": {"c": 3}}
    system, choice, tools, options = second.split("|")
    assert system == "You are a helpful assistant." and choice == "null"
    assert "add" in json.loads(tools)
    assert json.loads(options) == {"demo": {"a": 1}, "other": {"c": 3}}
    [after_add] = calls(harness, "after_tool_call", tool="add")  # step 0 could not run add
    assert after_add["success"] is False and after_add["error"].startswith('Unknown tool "add"')
    assert harness.tool_runs() == []


async def test_before_step_model_and_messages(harness: Harness) -> None:
    start_worker(harness)
    override = {"model": "demo:echo", "messages": [{"role": "user", "content": "override"}]}
    result = await send(
        harness, "step-model", [{"tool_calls": [note()]}], step_configs={"1": override}
    )
    assert result.text == "You said: override"
    [b0, b1] = calls(harness, "before_step")
    assert (b0["step"], b0["steps"], b0["message_count"]) == (0, [], 1)
    assert (b1["step"], b1["steps"], b1["message_count"]) == (1, [0], 2)
    assert b0["model"] == b1["model"] != "demo:echo"  # the override was for step 1 only


async def test_a_hook_changing_its_messages_in_place_changes_nothing_else(
    harness: Harness,
) -> None:
    # The worker shares the messages it read from the store between reads (it does not
    # parse a stored body twice): a hook gets copies, so an in-place change stays its own.
    start_worker(harness)
    script = [{"tool_calls": [note()]}, {"tool_calls": [note()]}, {"text": "done"}]
    for _ in range(2):  # the second turn reads the first turn's messages again
        result = await send(harness, "mutating", script, mutate_messages=True)
        assert result.status == "completed"
    seen = calls(harness, "before_step")
    assert len(seen) == 6 and all("MUTATED" not in c["first_text"] for c in seen)
    assert seen[0]["first_text"] == "hi"
    transcript = await (await harness.store()).messages(harness.conv("mutating"))
    assert "MUTATED" not in json.dumps([m.model_dump() for m in transcript])


async def test_experimental_context_reaches_tools_from_that_step_on(harness: Harness) -> None:
    start_worker(harness)
    script = [{"tool_calls": [note("a")]}, {"tool_calls": [note("b")]}, {"tool_calls": [note("c")]}]
    contexts = {
        "0": {"experimental_context": {"tenant": "t1"}},
        "2": {"experimental_context": {"tenant": "t2"}},
    }
    await send(harness, "ctx", [*script, {"text": "end"}], step_configs=contexts)
    seen = {c["text"]: c["experimental_context"] for c in calls(harness, "tool")}
    assert seen == {"a": {"tenant": "t1"}, "b": {"tenant": "t1"}, "c": {"tenant": "t2"}}
    inherited = [c["experimental_context"] for c in calls(harness, "before_step")]
    assert inherited == [None, {"tenant": "t1"}, {"tenant": "t1"}, {"tenant": "t2"}]


async def test_on_step_finish_gets_the_whole_step(harness: Harness) -> None:
    start_worker(harness)
    step0 = {
        "reasoning": "think first",
        "text": "calling",
        "tool_calls": [note("n")],
        "usage": {"input_tokens": 11, "output_tokens": 5},
        "provider_metadata": {"demo": {"cache_read": 7}},
        "warnings": ["temperature ignored"],
    }
    await send(harness, "finish", [step0, {"text": "done"}])
    [first, last] = calls(harness, "on_step_finish")
    assert first["step"] == 0 and first["text"] == "calling" and first["reasoning"] == "think first"
    assert first["tool_calls"] == ["note"] and first["tool_results"] == ["noted n (limit 10)"]
    assert first["finish_reason"] == "tool-calls"
    assert first["usage"]["input_tokens"] == 11 and first["usage"]["total_tokens"] == 16
    assert first["provider_metadata"] == {"demo": {"cache_read": 7}}
    assert first["warnings"] == ["temperature ignored"]
    assert first["response"]["scripted"] is True
    assert (last["step"], last["text"], last["finish_reason"], last["tool_calls"]) == (
        1,
        "done",
        "stop",
        [],
    )


async def test_on_chunk_sees_every_kind_of_chunk(harness: Harness) -> None:
    start_worker(harness)
    step0 = {
        "reasoning": "hm",
        "sources": [{"url": "https://example.com", "title": "Example"}],
        "raw": [{"provider": "event"}],
        "text": "look",
        "tool_calls": [note()],
    }
    await send(harness, "chunks", [step0, {"text": "done"}])
    types = {c["type"] for c in calls(harness, "on_chunk")}
    assert types == {
        "text-delta",
        "reasoning-delta",
        "source",
        "tool-call",
        "tool-input-start",
        "tool-input-delta",
        "tool-result",
        "raw",
    }
    [result] = calls(harness, "on_chunk", type="tool-result")
    assert result["output"] == "noted x (limit 10)" and result["preliminary"] is False


async def test_streaming_tool_preliminaries_reach_on_chunk(harness: Harness) -> None:
    start_worker(harness)
    result = await send(
        harness,
        "ticker",
        [{"tool_calls": [{"name": "ticker", "input": {}}]}, {"text": "{tool_result}"}],
    )
    assert result.text == "tick 3"
    seen = [(c["output"], c["preliminary"]) for c in calls(harness, "on_chunk", type="tool-result")]
    assert seen == [("tick 1", True), ("tick 2", True), ("tick 3", True), ("tick 3", False)]
    [after] = calls(harness, "after_tool_call")
    assert after["success"] and after["output"] == "tick 3"
    await wait_for_hook(harness, "on_chat_response")
