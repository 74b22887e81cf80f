"""``before_step``'s ``StepConfig`` per step, against the real providers: each step's model
request (as ``testkit/llm_server.py`` captured it from the real SDK) carries exactly that
step's overrides (model, system, tool_choice, active_tools, provider_options) and none of
another step's, and the step's record and ``StepContext`` name the model it really used.

The hooks are ``RecordingHooks`` (through ``ProviderHooks``): ``before_step`` returns
``body["step_configs"][str(step_number)]``.
"""

from __future__ import annotations

from typing import Any

from durable_turns.contract import turn_workflow_id
from testkit.llm_server import LLMServer, Reply
from tests.support.harness import Harness
from tests.support.hooks import calls
from tests.support.provider_hooks import api_requests, start_provider_worker

ANTHROPIC_CALL = "toolu_01NRLabsLyVHZPKxbKvkfSMn"
CHAT_CALL = "call_4XzlGBLtUe9dy3GVNV4jhq7h"


def tool_names(body: dict[str, Any]) -> list[str]:
    return sorted(t.get("name") or t["function"]["name"] for t in body.get("tools", []))


def system_text(body: dict[str, Any]) -> str:
    return "".join(block["text"] for block in body["system"])


async def stored_models(harness: Harness, conversation: str) -> list[str]:
    steps = await (await harness.store()).steps(turn_workflow_id(conversation, 1), 0)
    return [s.model for s in steps]


async def test_each_step_gets_its_own_model_and_settings_across_providers(
    server: LLMServer, harness: Harness
) -> None:
    """Step 0 on Anthropic with its overrides; step 1 switched to OpenAI with others."""
    server.push(Reply("anthropic/tool_use.sse"), Reply("openai/chat_text.sse"))
    start_provider_worker(harness, server)
    step0 = {
        "system": "Step zero system.",
        "tool_choice": {"type": "tool", "tool_name": "get_weather"},
        "active_tools": ["get_weather", "note"],
        "provider_options": {
            "anthropic": {"metadata": {"user_id": "step-0"}},
            "openai": {"user": "not-for-anthropic"},
        },
    }
    step1 = {
        "model": "openai:gpt-step-one",
        "system": "Step one system.",
        "tool_choice": "none",
        "active_tools": ["add"],
        "provider_options": {"openai": {"user": "step-1", "parallel_tool_calls": False}},
    }
    conversation = harness.conv("step-switch")
    result = await harness.send(
        conversation,
        "Weather in Paris?",
        model="anthropic:claude-step-zero",
        body={"step_configs": {"0": step0, "1": step1}},
    )
    assert result.status == "completed" and result.steps == 2

    first, second = api_requests(server)
    # Step 0: Anthropic, with step 0's overrides only.
    assert first.path == "/v1/messages"
    body = first.body
    assert body["model"] == "claude-step-zero"
    assert system_text(body) == "Step zero system."
    assert body["tool_choice"] == {"type": "tool", "name": "get_weather"}
    assert tool_names(body) == ["get_weather", "note"]
    assert body["metadata"] == {"user_id": "step-0"}
    assert "user" not in body and "parallel_tool_calls" not in body

    # Step 1: OpenAI Chat Completions, with step 1's overrides only, and step 0 translated.
    assert second.path == "/v1/chat/completions"
    body = second.body
    assert body["model"] == "gpt-step-one"
    assert body["messages"][0] == {"role": "system", "content": "Step one system."}
    assert body["tool_choice"] == "none"
    assert tool_names(body) == ["add"]
    assert (body["user"], body["parallel_tool_calls"]) == ("step-1", False)
    assert "metadata" not in body
    [call] = body["messages"][2]["tool_calls"]
    assert (call["id"], call["function"]["name"]) == (ANTHROPIC_CALL, "get_weather")
    assert body["messages"][3] == {
        "role": "tool",
        "tool_call_id": ANTHROPIC_CALL,
        "content": "sunny, 21°C in Paris",
    }

    # What the hooks and the store say each step used.
    b0, b1 = calls(harness, "before_step")
    assert (
        b0["model"] == b1["model"] == "anthropic:claude-step-zero"
    )  # the turn's, before overrides
    s0, s1 = calls(harness, "step_record")
    assert s0["request"]["model"] == "anthropic:claude-step-zero"
    assert s0["request"]["tools"] == ["get_weather", "note"]
    assert s0["request"]["tool_choice"] == step0["tool_choice"]
    assert s0["request"]["provider_options"] == step0["provider_options"]
    assert s1["request"]["model"] == "openai:gpt-step-one"
    assert s1["request"]["tools"] == ["add"]
    assert s1["request"]["tool_choice"] == "none"
    assert s1["request"]["provider_options"] == step1["provider_options"]
    assert s0["response"]["model"] == "claude-sonnet-4-20250514"  # what the recording served
    assert s1["response"]["model"] == "gpt-4o-2024-08-06"
    assert await stored_models(harness, conversation) == [
        "anthropic:claude-step-zero",
        "openai:gpt-step-one",
    ]


async def test_a_later_step_overrides_the_turn_and_step_zero_keeps_the_turn_settings(
    server: LLMServer, harness: Harness
) -> None:
    """Two OpenAI model names (and both APIs): step 0 runs the turn's config as it is;
    step 1's StepConfig switches the model and narrows the tools for step 1 alone."""
    server.push(Reply("openai/chat_tool_call.sse"), Reply("openai/responses_text.sse"))
    start_provider_worker(harness, server)
    turn_config = {
        "system": "Turn system.",
        "tool_choice": "auto",
        "provider_options": {"openai": {"user": "turn"}},
    }
    step1 = {
        "model": "openai:gpt-b@responses",
        "tool_choice": {"type": "tool", "tool_name": "note"},
        "active_tools": ["note"],
        "provider_options": {"openai": {"user": "step-1"}},
    }
    conversation = harness.conv("step-later")
    result = await harness.send(
        conversation,
        "Weather in New York City?",
        model="openai:gpt-a",
        body={"turn_config": turn_config, "step_configs": {"1": step1}},
    )
    assert result.status == "completed" and result.steps == 2

    first, second = api_requests(server)
    assert first.path == "/v1/chat/completions"
    body = first.body
    assert body["model"] == "gpt-a"
    assert body["messages"][0] == {"role": "system", "content": "Turn system."}
    assert body["tool_choice"] == "auto" and body["user"] == "turn"
    assert {"add", "get_weather", "note"} <= set(tool_names(body))

    assert second.path == "/v1/responses"
    body = second.body
    assert body["model"] == "gpt-b"
    assert body["instructions"] == "Turn system."  # not overridden: the turn's
    assert body["tool_choice"] == {"type": "function", "name": "note"}
    assert tool_names(body) == ["note"]
    assert body["user"] == "step-1"
    calls_sent = [i for i in body["input"] if i.get("type") == "function_call"]
    outputs = [i for i in body["input"] if i.get("type") == "function_call_output"]
    assert [c["call_id"] for c in calls_sent] == [o["call_id"] for o in outputs] == [CHAT_CALL]
    assert outputs[0]["output"] == "sunny, 21°C in New York City"

    s0, s1 = calls(harness, "step_record")
    assert (s0["request"]["model"], s1["request"]["model"]) == (
        "openai:gpt-a",
        "openai:gpt-b@responses",
    )
    assert s0["request"]["tool_choice"] == "auto"
    assert s1["request"]["tool_choice"] == step1["tool_choice"]
    assert s1["request"]["tools"] == ["note"]
    assert s0["request"]["provider_options"] == {"openai": {"user": "turn"}}
    assert s1["request"]["provider_options"] == {"openai": {"user": "step-1"}}
    assert await stored_models(harness, conversation) == ["openai:gpt-a", "openai:gpt-b@responses"]
