"""Extensions: JSON-safe snapshots, after the subclass hook, bounded, never fatal."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from durable_turns.hooks import TurnConfig
from durable_turns.hooks.extensions import Extensions, json_safe, merge_extension_config
from tests.support.harness import Harness
from tests.support.hooks import calls, start_worker, wait_for_hook


def ext(harness: Harness, name: str, on: str) -> list[dict[str, Any]]:
    return [c["snapshot"] for c in calls(harness, "ext", ext=name, on=on)]


async def test_extensions_observe_a_turn(harness: Harness) -> None:
    start_worker(harness, hooks="ExtendedHooks")
    script = [
        {
            "text": "call",
            "tool_calls": [{"name": "note", "input": {"text": "model", "limit": 500}}],
        },
        {"text": "{request.temperature} {request.headers} {request.system}"},
    ]
    body = {
        "turn_config": {"headers": {"x-app": "a"}, "temperature": 1.0},
        "tool_decisions": {"note": {"action": "allow", "input": {"text": "sub", "limit": 5}}},
    }
    result = await harness.send(harness.conv("ext"), "hi", model=harness.script(script), body=body)
    assert result.status == "completed"
    # before_turn: only scalars and merged dicts are honoured, in order; model is ignored;
    # the broken and the slow (timed-out) extensions change nothing
    temperature, headers, system = result.text.split("\n\n")[1].split(" ", 2)
    assert temperature == "0.25" and json.loads(headers) == {"x-app": "a", "x-ext": "1"}
    assert system == "You are a helpful assistant. [tuned]"
    [first] = ext(harness, "first", "before_turn")
    assert set(first) == {
        "system",
        "tool_names",
        "message_count",
        "continuation",
        "body",
        "model_id",
    }
    assert first["system"] == "You are a helpful assistant." and first["message_count"] == 1
    assert first["continuation"] is False and first["model_id"].startswith("demo:")
    assert "note" in first["tool_names"] and first["body"] == body
    [last] = ext(harness, "last", "before_turn")
    assert last["system"] == "You are a helpful assistant. [tuned]"  # sees the earlier change

    [before] = ext(harness, "first", "before_tool_call")
    assert before["input"] == {"text": "sub", "limit": 5}  # the input the tool runs with
    assert set(before) == {"tool_name", "tool_call_id", "input", "step_number", "dynamic"}
    [after] = ext(harness, "last", "after_tool_call")
    assert after["input"] == {"text": "model", "limit": 500}  # what the model emitted
    assert after["success"] is True and after["output"] == "noted sub (limit 5)"
    assert after["outcome"] == "ran"  # its input replaced, the tool still ran
    assert after["duration_ms"] >= 0 and "error" not in after

    finished = ext(harness, "first", "on_step_finish")
    assert [s["step_number"] for s in finished] == [0, 1]
    assert finished[0]["tool_call_count"] == finished[0]["tool_result_count"] == 1
    assert finished[0]["text"] == "call" and finished[0]["finish_reason"] == "tool-calls"
    assert set(finished[0]["usage"]) == {
        "input_tokens",
        "output_tokens",
        "total_tokens",
        "reasoning_tokens",
        "cached_input_tokens",
    }
    chunks = ext(harness, "first", "on_chunk")
    assert {"type": "text-delta", "text": "call"} in chunks
    assert {
        "type": "tool-input-start",
        "tool_name": "note",
        "tool_call_id": before["tool_call_id"],
    } in chunks
    await wait_for_hook(harness, "on_chat_response")
    assert_subclass_first(harness)


def assert_subclass_first(harness: Harness) -> None:
    """Each extension dispatch comes after the subclass hook of the same name."""
    log = harness.hook_calls()
    for hook in ("before_turn", "before_tool_call", "after_tool_call", "on_step_finish"):
        subclass = next(i for i, c in enumerate(log) if c["hook"] == hook)
        first = next(i for i, c in enumerate(log) if c.get("on") == hook and c["ext"] == "first")
        last = next(i for i, c in enumerate(log) if c.get("on") == hook and c["ext"] == "last")
        assert subclass < first < last, hook


# --- units -------------------------------------------------------------------------------------


def test_merge_replaces_scalars_merges_dicts_ignores_the_rest() -> None:
    config = TurnConfig(
        temperature=1.0, headers={"a": "1"}, provider_options={"x": {"y": 1}}, model="demo:a"
    )
    merged = merge_extension_config(
        config,
        {
            "temperature": 0.1,
            "max_steps": 2,
            "headers": {"b": "2"},
            "provider_options": {"z": 3},
            "model": "demo:b",
            "tools": ["secret"],
            "not_a_field": 1,
        },
    )
    assert merged.temperature == 0.1 and merged.max_steps == 2
    assert merged.headers == {"a": "1", "b": "2"}
    assert merged.provider_options == {"x": {"y": 1}, "z": 3}
    assert merged.model == "demo:a" and merged.tools is None


class _Raises:
    async def on_chunk(self, snapshot: dict[str, Any]) -> None:
        raise RuntimeError("boom")


class _Slow:
    timeout_s = 0.05

    async def before_turn(self, snapshot: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(5)
        return {"temperature": 0.5}


class _Seen:
    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    def on_chunk(self, snapshot: dict[str, Any]) -> None:
        snapshot["mutated"] = True
        self.seen.append(snapshot)


async def test_errors_and_timeouts_are_contained() -> None:
    seen = _Seen()
    extensions = Extensions([_Raises(), _Slow(), seen, _Seen()])
    assert extensions.subscribed("on_chunk") and not extensions.subscribed("after_tool_call")
    snapshot = {"type": "text-delta", "text": "x"}
    await extensions.notify("on_chunk", snapshot)
    assert seen.seen == [{"type": "text-delta", "text": "x", "mutated": True}]
    assert snapshot == {"type": "text-delta", "text": "x"}  # each gets its own copy
    config = await asyncio.wait_for(
        extensions.before_turn({"system": "s", "tool_names": []}, TurnConfig()), 1
    )
    assert config.temperature is None


def test_json_safe() -> None:
    deep: dict[str, Any] = {"v": 1}
    for _ in range(8):
        deep = {"d": deep}
    safe = json_safe({"err": ValueError("bad"), "fn": print, "deep": deep, "set": {1}})
    json.dumps(safe)
    assert safe["err"] == {"name": "ValueError", "message": "bad"}
    assert "fn" not in safe and safe["set"] == [1]
    assert "[truncated]" in json.dumps(safe["deep"])
