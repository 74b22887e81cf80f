"""Client tools with auto-continuation against the real providers: Anthropic, OpenAI Chat
Completions and OpenAI Responses, through a real worker, the real SDKs and the local server.

The model (a recorded stream) calls a tool that has no executor on the worker (a per-turn
``ToolSpec``); the turn stores the call and waits; the test answers with
``TurnsClient.submit_tool_result``; the conversation runs the continuation turn, whose model
request (as the server captured it) must carry the call and the client's result in that
provider's own wire format.

Two recorded streams call ``get_weather``, which every worker registers (the built-in demo
tool); the test serves them with the tool renamed to ``device_weather`` (derived at run time,
nothing else changed) so that the call goes to the client.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest

from durable_turns.messages import ToolCallPart, ToolResultPart
from testkit.llm_server import FIXTURES, LLMServer, Recorded, Reply
from tests.support.harness import Harness
from tests.support.hooks import calls
from tests.support.probes import pending_calls, turns_done, wait_until
from tests.support.provider_hooks import TOOLS, api_requests, start_provider_worker

RESULT = {"forecast": "sunny", "celsius": 21}


def renamed(fixture: str, old: str, new: str) -> Reply:
    """A recorded stream with one tool name replaced (derived at run time)."""
    return Reply(body=(FIXTURES / fixture).read_text().replace(f'"{old}"', f'"{new}"'))


def wire_result_anthropic(second: Recorded, call_id: str) -> None:
    messages = second.body["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    uses = [b for b in messages[1]["content"] if b["type"] == "tool_use"]
    assert [(u["id"], u["name"], u["input"]) for u in uses] == [
        (call_id, "device_weather", {"location": "Paris"})
    ]
    [block] = [b for b in messages[2]["content"] if b["type"] == "tool_result"]
    assert block["tool_use_id"] == call_id and not block.get("is_error")
    content = block["content"]
    text = content if isinstance(content, str) else "".join(c["text"] for c in content)
    assert json.loads(text) == RESULT


def wire_result_chat(second: Recorded, call_id: str) -> None:
    messages = second.body["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool"]
    [call] = messages[2]["tool_calls"]
    assert call["id"] == call_id and call["function"]["name"] == "device_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "New York City"}
    assert messages[3]["tool_call_id"] == call_id
    assert json.loads(messages[3]["content"]) == RESULT


def wire_result_responses(second: Recorded, call_id: str) -> None:
    items = second.body["input"]
    [call] = [i for i in items if i.get("type") == "function_call"]
    [output] = [i for i in items if i.get("type") == "function_call_output"]
    assert (call["call_id"], call["name"]) == (call_id, "get_capital")
    assert json.loads(call["arguments"]) == {"country": "PotatoLand"}
    assert output["call_id"] == call_id and json.loads(output["output"]) == RESULT
    assert items.index(call) < items.index(output)


@dataclass
class Case:
    model: str
    tool: str
    call_id: str
    first: Reply
    second: str
    path: str
    final_text: str
    wire: Any


CASES = {
    "anthropic": lambda: Case(
        model="anthropic:claude-test-model",
        tool="device_weather",
        call_id="toolu_01NRLabsLyVHZPKxbKvkfSMn",
        first=renamed("anthropic/tool_use.sse", "get_weather", "device_weather"),
        second="anthropic/text_basic.sse",
        path="/v1/messages",
        final_text="Hello there!",
        wire=wire_result_anthropic,
    ),
    "openai-chat": lambda: Case(
        model="openai:gpt-test",
        tool="device_weather",
        call_id="call_4XzlGBLtUe9dy3GVNV4jhq7h",
        first=renamed("openai/chat_tool_call.sse", "get_weather", "device_weather"),
        second="openai/chat_text.sse",
        path="/v1/chat/completions",
        final_text="I'm unable to provide real-time weather updates.",
        wire=wire_result_chat,
    ),
    "openai-responses": lambda: Case(
        model="openai:gpt-5.5@responses",
        tool="get_capital",  # not registered on this worker: a client tool here
        call_id="call_LabG58Uhrq9kZvR52BYKjToD",
        first=Reply("openai/responses_reasoning_text_function_call.sse"),
        second="openai/responses_text.sse",
        path="/v1/responses",
        final_text="The capital of PotatoLand is **Potato City**.",
        wire=wire_result_responses,
    ),
}


@pytest.mark.parametrize("provider", list(CASES))
async def test_client_tool_result_auto_continues_on_the_provider(
    server: LLMServer, harness: Harness, provider: str
) -> None:
    case = CASES[provider]()
    server.push(case.first, Reply(case.second))
    start_provider_worker(harness, server, tools=TOOLS)  # no executor for the client tool
    spec = {
        "name": case.tool,
        "description": "Asks the user's device.",
        "input_schema": {"type": "object"},
    }
    conversation = harness.conv(f"client-{provider}")
    request = await harness.turns.submit(
        conversation,
        "Ask my device, please.",
        model=case.model,
        body={"turn_config": {"tools": [spec]}},
    )

    [call] = await pending_calls(harness, conversation)
    assert (call["tool_call_id"], call["tool_name"], call["waiting_for"]) == (
        case.call_id,
        case.tool,
        "client",
    )
    assert len(api_requests(server)) == 1, "the turn waits: no model call before the result"
    assert harness.tool_runs() == []

    await harness.turns.submit_tool_result(conversation, case.call_id, RESULT)
    first = await harness.turns.wait(conversation, request)
    assert first.status == "completed" and first.auto_continue and first.steps == 1
    await wait_until(lambda: turns_done(harness, conversation, 2))

    state = await harness.turns.state(conversation)
    final = state.last_result
    assert final is not None and final.continuation and final.turn_number == 2
    assert final.status == "completed" and final.error is None
    assert final.text.startswith(case.final_text)

    first_request, second_request = api_requests(server)
    assert first_request.path == second_request.path == case.path
    case.wire(second_request, case.call_id)
    # The continuation still offers the client tool (the request's body carries over).
    offered = json.dumps(second_request.body.get("tools"))
    assert f'"{case.tool}"' in offered

    befores = calls(harness, "before_turn")
    assert [b["continuation"] for b in befores] == [False, True]
    messages = await (await harness.store()).messages(conversation)
    assert [m.role for m in messages] == ["user", "assistant", "assistant"]
    [stored_call] = [p for p in messages[1].parts if isinstance(p, ToolCallPart)]
    [stored] = [p for p in messages[1].parts if isinstance(p, ToolResultPart)]
    assert stored_call.tool_call_id == stored.tool_call_id == case.call_id
    assert stored.output == RESULT and not stored.is_error
