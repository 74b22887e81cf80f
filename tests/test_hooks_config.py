"""Every ``TurnConfig`` field that ``before_turn`` returns has its effect."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from durable_turns.contract import TurnResult
from durable_turns.hooks import TurnConfig, has_tool_call, step_count_is
from durable_turns.messages import ReasoningPart, ToolResultPart
from tests.support.harness import Harness
from tests.support.history import model_step_bytes
from tests.support.hooks import calls, start_worker
from tests.support.probes import chunk_backend, pending_calls, turns_done, wait_until


async def send(harness: Harness, name: str, script: Any, config: dict[str, Any]) -> TurnResult:
    model = script if isinstance(script, str) else harness.script(script)
    return await harness.send(harness.conv(name), "hi", model=model, body={"turn_config": config})


SAMPLING = {
    "temperature": 0.3,
    "top_p": 0.9,
    "top_k": 40,
    "max_output_tokens": 123,
    "presence_penalty": 0.5,
    "frequency_penalty": 0.25,
    "stop_sequences": ["END"],
    "seed": 7,
    "headers": {"x-team": "blue"},
    "provider_options": {"demo": {"mode": "fast"}},
    "tool_choice": "required",
    "system": "Be brief.",
}


async def test_request_settings_reach_the_provider(harness: Harness) -> None:
    start_worker(harness)
    echo = "|".join(f"{k}={{request.{k}}}" for k in SAMPLING)
    result = await send(harness, "sampling", [{"text": echo}], SAMPLING)
    seen = dict(item.split("=", 1) for item in result.text.split("|"))
    expected = {
        k: v if isinstance(v, str) else json.dumps(v, separators=(",", ":"))
        for k, v in SAMPLING.items()
    }
    assert seen == expected


async def test_without_a_config_the_provider_gets_defaults(harness: Harness) -> None:
    start_worker(harness)
    result = await send(
        harness, "defaults", [{"text": "{request.temperature} {request.system}"}], {}
    )
    assert result.text == "null You are a helpful assistant."


async def test_model_override(harness: Harness) -> None:
    start_worker(harness)
    script = harness.script([{"text": "scripted"}])
    result = await send(harness, "model", script, {"model": "demo:echo"})
    assert result.text == "You said: hi"
    assert calls(harness, "before_turn")[0]["model"] == script  # what it was before the override
    assert calls(harness, "before_step")[0]["model"] == "demo:echo"


async def test_messages_override_is_stored_not_in_history(harness: Harness) -> None:
    start_worker(harness)
    script = harness.script([{"text": "saw {request.message_count} message(s)"}])
    small = await harness.send(
        harness.conv("ovr-small"), "hi", model=script, body={"big_override": 10}
    )
    big = await harness.send(
        harness.conv("ovr-big"), "hi", model=script, body={"big_override": 400_000}
    )
    assert small.text == big.text == "saw 1 message(s)"
    assert big.usage.input_tokens > 90_000  # the model really got the override
    (_, small_turn), (_, big_turn) = [
        await model_step_bytes(harness.client, r.workflow_id) for r in (small, big)
    ]
    assert big_turn <= small_turn * 1.2 and big_turn < 20_000, (small_turn, big_turn)
    messages = await (await harness.store()).messages(harness.conv("ovr-big"))
    assert [m.text for m in messages] == ["hi", "saw 1 message(s)"]  # the transcript is untouched


async def test_tools_are_additive_names_and_client_specs(harness: Harness) -> None:
    start_worker(harness)
    spec = {
        "name": "pick_color",
        "description": "The user picks",
        "input_schema": {"type": "object"},
    }
    script = [
        {
            "text": "{request.tools}",
            "tool_calls": [{"name": "secret", "input": {}}, {"name": "pick_color", "input": {}}],
        },
        {"text": "{tool_results}"},
    ]
    conversation = harness.conv("tools")
    request = await harness.turns.submit(
        conversation,
        "hi",
        model=harness.script(script),
        body={"turn_config": {"tools": ["secret", spec]}},
    )
    # the client tool makes the turn wait for the client's result
    [call] = await pending_calls(harness, conversation)
    assert call["tool_name"] == "pick_color" and call["waiting_for"] == "client"
    await harness.turns.submit_tool_result(conversation, call["tool_call_id"], "blue")
    result = await harness.turns.wait(conversation, request)
    offered = json.loads(result.text.split("\n\n")[0])
    assert {"secret", "pick_color", "note", "get_weather"} <= set(offered)
    assert result.auto_continue
    await wait_until(lambda: turns_done(harness, conversation, 2))
    continued = (await harness.turns.state(conversation)).last_result
    assert continued is not None and continued.continuation
    assert "the secret is 42" in continued.text and "blue" in continued.text
    plain = await send(harness, "tools-plain", [{"text": "{request.tools}"}], {})
    assert "secret" not in json.loads(plain.text)


async def test_active_tools_limit_what_is_offered_and_run(harness: Harness) -> None:
    start_worker(harness)
    script = [
        {"text": "{request.tools}", "tool_calls": [{"name": "add", "input": {"a": 1, "b": 2}}]},
        {"text": "{tool_result}"},
    ]
    result = await send(harness, "active", script, {"active_tools": ["note"]})
    assert json.loads(result.text.split("\n\n")[0]) == ["note"]
    assert 'Unknown tool "add". Available tools: note.' in result.text
    assert harness.tool_runs() == []


LOOP = [{"tool_calls": [{"name": "note", "input": {"text": "x"}}]}] * 6


async def test_max_steps(harness: Harness) -> None:
    start_worker(harness)
    assert (await send(harness, "max", LOOP, {"max_steps": 2})).steps == 2


async def test_stop_when_conditions(harness: Harness) -> None:
    start_worker(harness)
    on_tool = TurnConfig(stop_when=has_tool_call("note")).model_dump(mode="json", exclude_none=True)
    assert (await send(harness, "stop-tool", LOOP, on_tool)).steps == 1
    on_count = TurnConfig(stop_when=[step_count_is(3)]).model_dump(mode="json", exclude_none=True)
    assert (await send(harness, "stop-count", LOOP, on_count)).steps == 3
    other = {"stop_when": [{"kind": "has_tool_call", "tool_name": "add"}]}
    assert (await send(harness, "stop-other", [*LOOP[:4], {"text": "end"}], other)).steps == 5


REASONING = [{"reasoning": "let me think", "text": "answer"}]


async def test_send_reasoning_false_keeps_reasoning_from_the_client(harness: Harness) -> None:
    start_worker(harness)
    shown = await send(harness, "reason-on", REASONING, {})
    hidden = await send(harness, "reason-off", REASONING, {"send_reasoning": False})
    assert shown.text == hidden.text == "answer"
    store = await harness.store()
    [_, with_reasoning] = await store.messages(harness.conv("reason-on"))
    [_, without] = await store.messages(harness.conv("reason-off"))
    assert any(isinstance(p, ReasoningPart) for p in with_reasoning.parts)
    assert not any(isinstance(p, ReasoningPart) for p in without.parts)
    steps = calls(harness, "on_step_finish")  # the server side still sees it
    assert [s["reasoning"] for s in steps] == ["let me think", "let me think"]
    chunk_types = [c["type"] for c in calls(harness, "on_chunk")]
    assert chunk_types.count("reasoning-delta") == 3  # the first turn's three words only
    streams = await chunk_backend(harness)  # nor does the live chunk stream carry it
    try:
        for result, expected in ((shown, 3), (hidden, 0)):
            events = await streams.read(result.workflow_id)
            kinds = [e.data.get("type") for e in events if e.type == "chunk"]
            assert kinds.count("reasoning-delta") == expected and "text-delta" in kinds
    finally:
        await streams.close()


async def test_max_retries(harness: Harness) -> None:
    start_worker(harness)
    flaky = [{"text": "ok", "error": {"status": 503, "message": "overloaded"}, "attempts": 1}]
    assert (await send(harness, "retry-default", flaky, {})).status == "completed"
    failed = await send(harness, "retry-none", flaky, {"max_retries": 0})
    assert failed.status == "error" and failed.error is not None
    assert "overloaded" in failed.error.message


async def test_timeout_total_ms_bounds_a_step(harness: Harness) -> None:
    start_worker(harness)
    slow = [{"text": "one two three four five six", "delay_ms": 400}]
    result = await send(harness, "total", slow, {"timeout": {"total_ms": 800}, "max_retries": 0})
    assert result.status == "error" and result.error is not None
    assert result.error.type == "TimeoutError", result.error


async def test_stall_timeouts(harness: Harness) -> None:
    start_worker(harness, TURNS_STALL_TIMEOUT_MS="300")
    stalling = [{"text": "a b c", "stall_s": 1.5, "stall_after_chunks": 1, "attempts": 10}]
    chunk = await send(harness, "chunk", stalling, {"timeout": {"chunk_ms": 300}, "max_retries": 0})
    assert chunk.error is not None and chunk.error.type == "StreamStalled"
    wins = {"timeout": {"chunk_ms": 60_000}, "chat_stream_stall_timeout_ms": 300, "max_retries": 0}
    stalled = await send(harness, "stall", stalling, wins)
    assert stalled.error is not None and stalled.error.type == "StreamStalled"
    off = await send(harness, "stall-off", stalling, {"chat_stream_stall_timeout_ms": 0})
    assert off.status == "completed" and off.text == "a b c"  # 0 disables the worker's 300 ms


class Verdict(BaseModel):
    severity: str
    score: int

    model_config = {"json_schema_extra": {"additionalProperties": False}}


async def test_structured_output_is_checked(harness: Harness) -> None:
    start_worker(harness)
    schema = TurnConfig(output=Verdict).output
    assert schema is not None and schema["required"] == ["severity", "score"]
    good = await send(
        harness, "out-good", [{"text": '{"severity": "high", "score": 3}'}], {"output": schema}
    )
    assert good.status == "completed" and json.loads(good.text) == {"severity": "high", "score": 3}
    assert good.output == {"severity": "high", "score": 3}, (
        "the parsed answer comes with the result"
    )
    bad = await send(
        harness, "out-bad", [{"text": '{"severity": "high", "score": "x"}'}], {"output": schema}
    )
    assert bad.status == "error" and bad.error is not None
    assert bad.error.type == "OutputValidationError"
    assert "$.score: expected integer" in bad.error.message
    prose = await send(harness, "out-prose", [{"text": "It is high."}], {"output": schema})
    assert prose.error is not None and "not JSON" in prose.error.message
    echo = await send(harness, "out-req", [{"text": "{request.output_schema}"}], {"output": schema})
    assert echo.error is not None  # the schema reached the provider; its echo is not a Verdict
    assert calls(harness, "on_chat_error", type="OutputValidationError")


async def test_experimental_transform(harness: Harness) -> None:
    start_worker(harness)
    mail = [{"text": "write to ann@example.com today"}]
    redacted = await send(harness, "redact", mail, {"experimental_transform": "redact-emails"})
    assert redacted.text == "write to [email] today"
    chained = await send(
        harness,
        "chain",
        [{"text": "hi there"}],
        {"experimental_transform": ["test-double", "uppercase"]},
    )
    assert chained.text == "HI HI THERETHERE"
    texts = [c["text"] for c in calls(harness, "on_chunk") if c["type"] == "text-delta"]
    assert texts[-4:] == ["HI ", "HI ", "THERE", "THERE"]  # on_chunk sees the transformed stream
    messages = await (await harness.store()).messages(harness.conv("redact"))
    assert "ann@" not in messages[-1].text  # what is stored is what was transformed
    unknown = await send(harness, "unknown-tf", mail, {"experimental_transform": ["nope"]})
    assert unknown.error is not None and unknown.error.type == "InvalidRequest"
    assert "unknown stream transform(s) ['nope']" in unknown.error.message
    assert "redact-emails" in unknown.error.message


async def test_tool_results_of_a_turn_are_stored_with_the_call(harness: Harness) -> None:
    """A sanity check the config tests lean on: ``{tool_results}`` reads stored results."""
    start_worker(harness)
    script = [
        {"tool_calls": [{"name": "note", "input": {"text": "n"}}]},
        {"text": "{tool_results}"},
    ]
    result = await send(harness, "sanity", script, {})
    [_, assistant] = await (await harness.store()).messages(harness.conv("sanity"))
    [part] = [p for p in assistant.parts if isinstance(p, ToolResultPart)]
    assert part.output == "noted n (limit 10)" and result.text == part.output
