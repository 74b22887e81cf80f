"""The OpenAI Responses API through the whole engine: a real worker process and dev server,
the real ``openai`` SDK against ``testkit/llm_server.py`` replaying recorded streams.

``tests/test_providers_openai.py`` drives the provider alone; here a turn goes through
``TurnWorkflow`` (begin, model steps, tool calls, finish) so what reaches the wire on the
*second* call of a turn (the tool call and its result, built from the stored transcript)
and what the engine stores, retries and reports are covered end to end.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from temporalio.api.enums.v1 import EventType

from durable_turns.contract import PROVIDER_ERROR, turn_workflow_id
from durable_turns.messages import (
    ReasoningPart,
    StepStartPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)
from testkit.llm_server import FIXTURES, LLMServer, Reply
from tests.support.harness import Harness
from tests.support.history import activity_attempts
from tests.support.hooks import calls, wait_for_hook
from tests.support.provider_hooks import api_requests, start_provider_worker

CAPITAL_CALL = "call_LabG58Uhrq9kZvR52BYKjToD"
CAPITAL_REASONING = "rs_0fabc13af1ee0049006a691dfe60b081a1baa444d3cf19afba"
CALC_CALLS = [
    "call_AB6AaRZ1FYZB2RwS6A5vbdqn",
    "call_Q6pW65MUgW9vF59BmItYGos3",
    "call_Zl5vIMnD7dVAjgU6FkhmiCZh",
]
CALC_SUMMARY = (
    "**Calculating step-by-step using calculator**\n\nI'll compute 12 plus 7, then multiply"
    " the result by 3, and finally multiply that by 10, reporting the final product."
)


def items_of(body: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [i for i in body["input"] if i.get("type") == kind]


async def capital_turn(harness: Harness, server: LLMServer, name: str) -> Any:
    """The recorded pair: reasoning + commentary + get_capital call, then the answer."""
    server.push(
        Reply("openai/responses_reasoning_text_function_call.sse"),
        Reply("openai/responses_text.sse"),
    )
    start_provider_worker(harness, server)
    return await harness.send(
        harness.conv(name), "What is the capital of PotatoLand?", model="openai:gpt-5.5@responses"
    )


async def test_tool_turn_sends_the_call_and_its_output_back(
    server: LLMServer, harness: Harness
) -> None:
    result = await capital_turn(harness, server, "resp-tool")
    assert result.status == "completed" and result.steps == 2
    assert result.text == (  # the reply is every step's text
        "I’ll check the capital lookup tool for “PotatoLand.”\n\n"
        "The capital of PotatoLand is **Potato City**."
    )
    [run] = harness.tool_runs()
    assert (run["tool"], run["id"], run["input"]) == (
        "get_capital",
        CAPITAL_CALL,
        {"country": "PotatoLand"},
    )

    first, second = api_requests(server)
    assert [first.path, second.path] == ["/v1/responses"] * 2
    assert first.body["model"] == second.body["model"] == "gpt-5.5"  # the @responses suffix is gone
    assert first.body["stream"] is True
    assert first.body["input"] == [
        {
            "role": "user",
            "content": [{"type": "input_text", "text": "What is the capital of PotatoLand?"}],
        }
    ]
    assert "get_capital" in [t["name"] for t in first.body["tools"]]
    # The second call carries step 0 back: its commentary, the call and the tool's output,
    # paired by call id, in that order, after the user's message.
    body = second.body
    assert body["input"][0] == first.body["input"][0]
    [call] = items_of(body, "function_call")
    [output] = items_of(body, "function_call_output")
    assert call == {
        "type": "function_call",
        "call_id": CAPITAL_CALL,
        "name": "get_capital",
        "arguments": json.dumps({"country": "PotatoLand"}),
    }
    assert output == {
        "type": "function_call_output",
        "call_id": CAPITAL_CALL,
        "output": "Potato City",
    }
    assert body["input"].index(call) < body["input"].index(output)
    assert {
        "role": "assistant",
        "content": "I’ll check the capital lookup tool for “PotatoLand.”",
    } in (body["input"])
    assert body["tools"] == first.body["tools"]

    [s0, s1] = calls(harness, "step_record")
    assert s0["request"]["model"] == s1["request"]["model"] == "openai:gpt-5.5@responses"
    assert s0["tool_calls"] == [[CAPITAL_CALL, "get_capital", {"country": "PotatoLand"}]]
    assert s0["finish_reason"] == "tool-calls" and s1["finish_reason"] == "stop"
    assert s1["response"]["model"] == "gpt-5.5-2026-04-23"


async def test_tool_turn_sends_the_reasoning_item_back_within_the_turn(
    server: LLMServer, harness: Harness
) -> None:
    """Step 0's reasoning item (id and encrypted content, no summary was asked for) goes
    back on step 1, before the commentary and the call that followed it."""
    result = await capital_turn(harness, server, "resp-reason-back")
    assert result.status == "completed"
    first, second = (r.body for r in api_requests(server))
    assert items_of(first, "reasoning") == []
    recorded = next(
        json.loads(line.removeprefix("data: "))["item"]
        for line in FIXTURES.joinpath("openai/responses_reasoning_text_function_call.sse")
        .read_text()
        .splitlines()
        if line.startswith("data: ") and '"response.output_item.done"' in line and '"rs_' in line
    )
    assert second["input"][1:] == [
        {
            "type": "reasoning",
            "id": CAPITAL_REASONING,
            "summary": [],
            "encrypted_content": recorded["encrypted_content"],
        },
        {"role": "assistant", "content": "I’ll check the capital lookup tool for “PotatoLand.”"},
        {
            "type": "function_call",
            "call_id": CAPITAL_CALL,
            "name": "get_capital",
            "arguments": json.dumps({"country": "PotatoLand"}),
        },
        {"type": "function_call_output", "call_id": CAPITAL_CALL, "output": "Potato City"},
    ]
    assert "include" not in second  # store is the default: the id would do, too


async def test_reasoning_summary_is_stored_in_the_transcript(
    server: LLMServer, harness: Harness
) -> None:
    """A recorded four-call calculator run (reasoning summary, three calls, the answer); the
    worker picks the Responses API from TURNS_OPENAI_API."""
    server.push(*(Reply(f"openai/responses_calculator.{i}.sse") for i in range(1, 5)))
    start_provider_worker(harness, server, TURNS_OPENAI_API="responses")
    conversation = harness.conv("resp-reasoning")
    result = await harness.send(
        conversation,
        "Compute (12 + 7) * 3 * 10 with the calculator.",
        model="openai:gpt-5.1-codex-max",
    )
    assert result.status == "completed" and result.steps == 4
    assert result.text == "The final result is **570**."
    runs = [(r["id"], r["input"]) for r in harness.tool_runs()]
    assert runs == [
        (CALC_CALLS[0], {"a": 12, "b": 7, "op": "add"}),
        (CALC_CALLS[1], {"a": 19, "b": 3, "op": "multiply"}),
        (CALC_CALLS[2], {"a": 57, "b": 10, "op": "multiply"}),
    ]

    requests = api_requests(server)
    assert [r.path for r in requests] == ["/v1/responses"] * 4
    # Each call carries every earlier call and output of the turn, ids paired.
    for n, request in enumerate(requests):
        pairs = [
            (i["call_id"], i["output"]) for i in items_of(request.body, "function_call_output")
        ]
        assert pairs == list(zip(CALC_CALLS, ["19", "57", "570"], strict=True))[:n]
        assert [i["call_id"] for i in items_of(request.body, "function_call")] == CALC_CALLS[:n]

    # The reasoning summary is stored with the reply, before step 0's call.
    messages = await (await harness.store()).messages(conversation)
    assert [m.role for m in messages] == ["user", "assistant"]
    parts = messages[1].parts
    [reasoning] = [p for p in parts if isinstance(p, ReasoningPart)]
    assert reasoning.text == CALC_SUMMARY
    kinds = [type(p) for p in parts]
    assert kinds[:4] == [StepStartPart, ReasoningPart, ToolCallPart, ToolResultPart]
    assert isinstance(parts[-1], TextPart) and parts[-1].text == result.text
    assert [p.output for p in parts if isinstance(p, ToolResultPart)] == ["19", "57", "570"]

    records = calls(harness, "step_record")
    assert [r["step"] for r in records] == [0, 1, 2, 3]
    assert [r["reasoning"][0]["text"] for r in records[:1]] == [CALC_SUMMARY]
    assert all(r["reasoning"] == [] for r in records[1:])
    assert {r["request"]["model"] for r in records} == {"openai:gpt-5.1-codex-max"}
    [finish0] = calls(harness, "on_step_finish", step=0)
    assert finish0["reasoning"] == CALC_SUMMARY
    deltas = "".join(c["text"] for c in calls(harness, "on_chunk", type="reasoning-delta"))
    assert deltas == CALC_SUMMARY


async def test_rate_limit_is_retried_by_temporal_after_retry_after(
    server: LLMServer, harness: Harness
) -> None:
    server.push(
        Reply("openai/429_rate_limit.json", headers={"retry-after": "1"}),
        Reply("openai/responses_text.sse"),
    )
    start_provider_worker(harness, server)
    conversation = harness.conv("resp-429")
    result = await harness.send(conversation, "Capital?", model="openai:gpt-5.5@responses")
    assert result.status == "completed" and result.steps == 1
    assert result.text == "The capital of PotatoLand is **Potato City**."
    first, second = api_requests(server)
    assert first.body == second.body  # the same request, asked again
    assert first.headers["x-stainless-retry-count"] == "0"  # the SDK did not retry: Temporal did
    assert second.headers["x-stainless-retry-count"] == "0"

    [record] = calls(harness, "step_record")
    assert record["request"]["attempt"] == 2
    assert calls(harness, "on_chat_error") == []

    # the workflow retried it: two attempts, the first one's failure, the retry-after's wait
    handle = harness.client.get_workflow_handle(turn_workflow_id(conversation, 1))
    events = [e async for e in handle.fetch_history_events()]
    assert await activity_attempts(harness, handle.id, "model_step") == [1, 2]
    [failed] = [
        e.activity_task_failed_event_attributes.failure
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED
    ]
    assert "429" in failed.message and "rate_limit_exceeded" in failed.message
    assert failed.application_failure_info.type == "ProviderTransientError"
    [timer] = [
        e.timer_started_event_attributes.start_to_fire_timeout.ToTimedelta()
        for e in events
        if e.event_type == EventType.EVENT_TYPE_TIMER_STARTED
    ]
    assert timer == timedelta(seconds=1), "the provider's retry-after"


async def test_invalid_request_ends_the_turn_with_a_typed_error(
    server: LLMServer, harness: Harness
) -> None:
    """A 400 is not retried: the turn ends ``error`` with on_chat_error's message."""
    server.push(Reply("openai/400_unsupported_parameter.json"))
    start_provider_worker(harness, server)
    conversation = harness.conv("resp-400")
    result = await harness.send(
        conversation,
        "Capital?",
        model="openai:gpt-5.5@responses",
        body={"turn_config": {"temperature": 0.7}},
    )
    assert result.status == "error"
    error = result.error
    assert error is not None and error.type == PROVIDER_ERROR
    upstream = (
        "OpenAI API error 400 invalid_request_error: Unsupported parameter: 'temperature' is not"
        " supported with this model."
    )
    assert error.message == f"Sorry, that failed ({error.stage}): {upstream}"
    [sent] = api_requests(server)  # not retried
    assert sent.body["temperature"] == 0.7
    [seen] = calls(harness, "on_chat_error")
    assert seen["error"] == upstream and seen["messages_persisted"] is True
    response = await wait_for_hook(harness, "on_chat_response")
    assert response["status"] == "error" and response["error"] is not None
    messages = await (await harness.store()).messages(conversation)
    assert messages[0].role == "user"  # the user's message is kept
