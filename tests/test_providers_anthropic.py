"""The Anthropic provider, driven through the real SDK against recorded Messages API streams.

The local server (``testkit/llm_server.py``) replays fixtures byte for byte, so these tests
cover the SDK's SSE parsing and error construction as well as our mapping.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from durable_turns.activities.streaming import StepSnapshot, StreamStalled, consume
from durable_turns.config import Settings
from durable_turns.hooks.types import ToolSpec
from durable_turns.messages import (
    Message,
    ReasoningDelta,
    ReasoningEnd,
    ReasoningPart,
    StepStartPart,
    StreamPart,
    TextDelta,
    TextPart,
    ToolCallChunk,
    ToolCallPart,
    ToolInputDelta,
    ToolInputStart,
    ToolResultPart,
    user_message,
)
from durable_turns.models import ModelRegistry
from durable_turns.models.anthropic import AnthropicProvider
from durable_turns.models.base import ModelRequest, ProviderError
from durable_turns.models.openai import OpenAIProvider
from testkit.llm_server import FIXTURES, LLMServer, Reply
from tests.support.harness import Harness

KEY = "sk-ant-api03-TESTSECRETKEY0123456789abcdef"
WEATHER = ToolSpec(
    name="get_weather",
    description="Weather for a city",
    input_schema={"type": "object", "properties": {"location": {"type": "string"}}},
)


@pytest.fixture
async def provider(server: LLMServer) -> AsyncIterator[AnthropicProvider]:
    p = AnthropicProvider(api_key=KEY, base_url=server.base_url, timeout=30)
    yield p
    await p.aclose()


def sent_key(headers: dict[str, str]) -> str:
    """SDKs before 2.x send ``x-api-key``; 2.x sends ``Authorization: Bearer``."""
    return headers.get("x-api-key") or headers.get("authorization", "").removeprefix("Bearer ")


def request(*messages: Message, **settings: object) -> ModelRequest:
    settings.setdefault("model", "claude-test-model")
    settings.setdefault("cache", False)  # breakpoints: tests/test_prompt_cache.py
    return ModelRequest(
        messages=list(messages) or [user_message("Hi")],
        **settings,  # type: ignore[arg-type]
    )


async def run(
    provider: AnthropicProvider, req: ModelRequest, stall_timeout_ms: int = 0
) -> tuple[list[StreamPart], StepSnapshot]:
    parts: list[StreamPart] = []

    async def on_chunk(chunk: StreamPart) -> None:
        parts.append(chunk)

    snap = await consume(
        provider.stream(req),
        stall_timeout_ms=stall_timeout_ms,
        heartbeat=lambda *a: None,
        heartbeat_every_s=10,
        on_chunk=on_chunk,
    )
    assert snap.finish is not None or stall_timeout_ms
    return parts, snap


async def fail(provider: AnthropicProvider, req: ModelRequest | None = None) -> ProviderError:
    with pytest.raises(ProviderError) as info:
        await run(provider, req or request())
    return info.value


# --- streams -----------------------------------------------------------------------------


async def test_text_stream_and_request(server: LLMServer, provider: AnthropicProvider) -> None:
    server.script("anthropic/text_basic.sse")
    req = request(
        system="Be brief.",
        cached_prompt=True,
        temperature=0.2,
        top_k=5,
        seed=7,
        stop_sequences=["END"],
        headers={"x-trace": "abc"},
    )
    parts, snap = await run(provider, req)

    assert [p.text for p in parts if isinstance(p, TextDelta)] == ["Hello", " there", "!"]
    assert snap.text == "Hello there!"
    finish = snap.finish
    assert finish is not None
    assert (finish.finish_reason, finish.raw_finish_reason) == ("stop", "end_turn")
    assert (finish.usage.input_tokens, finish.usage.output_tokens, finish.usage.total_tokens) == (
        11,
        6,
        17,
    )
    assert finish.response == {
        "id": "msg_4QpJur2dWWDjF6C758FbBw5vm12BaVipnK",
        "model": "claude-3-opus-latest",
    }
    assert finish.warnings == ["seed is not supported by the Anthropic API; it was ignored"]

    [sent] = server.requests
    assert sent.path == "/v1/messages"
    assert sent_key(sent.headers) == KEY
    assert sent.headers["x-trace"] == "abc"
    assert sent.headers["x-stainless-retry-count"] == "0"
    body = sent.body
    assert body["model"] == "claude-test-model"
    assert body["stream"] is True
    assert body["max_tokens"] == 4096
    assert body["system"] == [
        {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}
    ]
    assert (body["temperature"], body["top_k"], body["stop_sequences"]) == (0.2, 5, ["END"])
    assert "seed" not in body
    assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]


async def test_a_prefill_is_continued(server: LLMServer, provider: AnthropicProvider) -> None:
    """``continue_text`` (a lost attempt's text) goes as a last assistant message, without
    its trailing white space and after the cache breakpoints; the model (here the local
    server) streams only what follows it."""
    server.script("anthropic/text_basic.sse")
    req = request(continue_text="Hello ", cache=True)
    assert provider.continues_prefill
    parts, snap = await run(provider, req)
    assert [p.text for p in parts if isinstance(p, TextDelta)] == [" there", "!"]
    assert snap.text == " there!"
    [sent] = server.requests
    assert sent.body["messages"][-1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "Hello"}],
    }
    assert "cache_control" in json.dumps(sent.body["messages"][0])


def test_what_rules_a_prefill_out(provider: AnthropicProvider) -> None:
    """Extended thinking, a forced tool, structured output, or a conversation that does not
    end with the user: the step starts again instead of going on from a prefill."""
    assert provider.continues(request())
    assert provider.continues(request(tools=[WEATHER], tool_choice="auto"))
    thinking = {"thinking": {"type": "enabled", "budget_tokens": 1024}}
    assert not provider.continues(request(provider_options=thinking))
    assert not provider.continues(request(tools=[WEATHER], tool_choice="required"))
    assert not provider.continues(request(output_schema={"type": "object"}))
    ended = Message(role="assistant", parts=[TextPart(text="done")])
    assert not provider.continues(request(user_message("Hi"), ended))
    assert not OpenAIProvider(api_key="sk-test").continues(request())


async def test_tool_use_streams_incremental_json(
    server: LLMServer, provider: AnthropicProvider
) -> None:
    server.script("anthropic/tool_use.sse")
    parts, snap = await run(
        provider, request(tools=[WEATHER], tool_choice="required", max_output_tokens=300)
    )

    start = next(p for p in parts if isinstance(p, ToolInputStart))
    assert (start.tool_call_id, start.tool_name) == (
        "toolu_01NRLabsLyVHZPKxbKvkfSMn",
        "get_weather",
    )
    deltas = [p.delta for p in parts if isinstance(p, ToolInputDelta)]
    assert deltas == ['{"locati', 'on": "P', "ar", 'is"}']
    [call] = [p for p in parts if isinstance(p, ToolCallChunk)]
    assert call.input == {"location": "Paris"} and call.input_error is None
    assert snap.text == "I'll check the current weather in Paris for you."
    assert snap.tool_calls[0].input == {"location": "Paris"}
    assert snap.finish is not None and snap.finish.finish_reason == "tool-calls"

    body = server.requests[0].body
    assert body["max_tokens"] == 300
    assert body["tools"] == [
        {
            "name": "get_weather",
            "description": "Weather for a city",
            "input_schema": WEATHER.input_schema,
        }
    ]
    assert body["tool_choice"] == {"type": "any"}


async def test_parallel_tool_calls(server: LLMServer, provider: AnthropicProvider) -> None:
    server.script("anthropic/tool_use_parallel.sse")
    _, snap = await run(
        provider, request(tools=[WEATHER], tool_choice={"type": "tool", "tool_name": "get_weather"})
    )
    assert [(c.tool_call_id, c.input) for c in snap.tool_calls] == [
        ("toolu_01NRLabsLyVHZPKxbKvkfSMn", {"location": "Paris"}),
        ("toolu_01ComposedSecondCall0001", {"location": "London"}),
    ]
    assert server.requests[0].body["tool_choice"] == {"type": "tool", "name": "get_weather"}


async def test_thinking_signature_round_trips(
    server: LLMServer, provider: AnthropicProvider
) -> None:
    server.script("anthropic/thinking.sse")
    parts, snap = await run(
        provider, request(provider_options={"thinking": {"type": "enabled", "budget_tokens": 1024}})
    )
    assert server.requests[0].body["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    signatures = [p.signature for p in parts if isinstance(p, ReasoningDelta) and p.signature]
    assert len(signatures) == 1 and signatures[0].startswith("EvMCCkYICxgC")
    assert sum(isinstance(p, ReasoningEnd) for p in parts) == 1
    reasoning = snap.parts[0]
    assert isinstance(reasoning, ReasoningPart)
    assert reasoning.text.startswith("This is a straightforward question about pedestrian safety.")
    assert reasoning.signature == signatures[0]
    assert snap.text.startswith("Here are the basic steps")

    server.script("anthropic/text_basic.sse")
    follow_up = [
        user_message("How do I cross the street?"),
        Message(role="assistant", parts=[StepStartPart(), *snap.parts]),
        user_message("Thanks!"),
    ]
    await run(provider, request(*follow_up))
    assistant = server.requests[1].body["messages"][1]
    assert assistant["role"] == "assistant"
    assert assistant["content"][0] == {
        "type": "thinking",
        "thinking": reasoning.text,
        "signature": reasoning.signature,
    }
    assert assistant["content"][1] == {"type": "text", "text": snap.text}


async def test_redacted_thinking_round_trips(
    server: LLMServer, provider: AnthropicProvider
) -> None:
    server.script("anthropic/redacted_thinking.sse")
    _, snap = await run(provider, request())
    redacted = [p for p in snap.parts if isinstance(p, ReasoningPart)]
    assert len(redacted) == 2  # ReasoningEnd keeps the two blocks apart
    assert redacted[0].redacted_data and redacted[0].redacted_data.startswith("EqkECkYIBxgC")
    assert redacted[1].redacted_data and redacted[1].redacted_data.startswith("EtgBCkYIBxgC")

    server.script("anthropic/text_basic.sse")
    history = [
        user_message("magic"),
        Message(role="assistant", parts=snap.parts),
        user_message("ok"),
    ]
    await run(provider, request(*history))
    content = server.requests[1].body["messages"][1]["content"]
    assert content[:2] == [
        {"type": "redacted_thinking", "data": redacted[0].redacted_data},
        {"type": "redacted_thinking", "data": redacted[1].redacted_data},
    ]

    server.script("anthropic/text_basic.sse")
    await run(provider, request(*history, send_reasoning=False))
    assert [b["type"] for b in server.requests[2].body["messages"][1]["content"]] == ["text"]


async def test_cache_usage_is_cumulative(server: LLMServer, provider: AnthropicProvider) -> None:
    server.script("anthropic/cache_usage.sse")
    _, snap = await run(provider, request())
    assert snap.finish is not None
    usage = snap.finish.usage
    # message_delta (40/12/7, out 8) replaces message_start (25/10/5): it is cumulative.
    assert usage.input_tokens == 40 + 12 + 7
    assert (usage.cached_input_tokens, usage.cache_creation_input_tokens) == (7, 12)
    assert (usage.output_tokens, usage.reasoning_tokens, usage.total_tokens) == (8, 3, 67)
    assert snap.finish.provider_metadata == {
        "anthropic": {"cache_creation_input_tokens": 12, "cache_read_input_tokens": 7}
    }


async def test_server_tools_are_not_tool_calls(
    server: LLMServer, provider: AnthropicProvider
) -> None:
    server.script("anthropic/cache_usage_server_tools.sse")
    parts, snap = await run(provider, request())
    assert not any(isinstance(p, ToolInputStart | ToolCallChunk) for p in parts)
    assert snap.text == "The sum of the squares of the numbers 1 through 12 is **650**."
    assert snap.finish is not None
    usage = snap.finish.usage
    assert (usage.cached_input_tokens, usage.cache_creation_input_tokens) == (6289, 3337)
    assert usage.input_tokens == 6 + 6289 + 3337


async def test_truncated_tool_input_at_max_tokens(
    server: LLMServer, provider: AnthropicProvider
) -> None:
    server.script("anthropic/tool_use_truncated_max_tokens.sse")
    parts, snap = await run(provider, request())
    [call] = [p for p in parts if isinstance(p, ToolCallChunk)]
    assert call.tool_name == "make_file"
    assert isinstance(call.input, str) and call.input.endswith('"Filing taxes')
    assert call.input_error is not None and "not valid JSON" in call.input_error
    assert snap.finish is not None
    assert (snap.finish.finish_reason, snap.finish.raw_finish_reason) == ("length", "max_tokens")


async def test_stall_mid_stream(server: LLMServer, provider: AnthropicProvider) -> None:
    server.push(Reply("anthropic/text_basic.sse", stall_after_events=4, stall_s=20))
    with pytest.raises(StreamStalled) as info:
        await run(provider, request(), stall_timeout_ms=300)
    assert info.value.chunks == 1  # "Hello" arrived, then silence


# --- requests ----------------------------------------------------------------------------


async def test_multi_step_history_translation(
    server: LLMServer, provider: AnthropicProvider
) -> None:
    server.script("anthropic/text_basic.sse")
    history = [
        Message(role="system", parts=[TextPart(text="Extra rules.")]),
        user_message("Hi"),
        user_message("Weather in Paris, London and Oslo?"),
        Message(
            role="assistant",
            parts=[
                StepStartPart(),
                TextPart(text="Checking Paris."),
                ToolCallPart(
                    tool_call_id="t1", tool_name="get_weather", input={"location": "Paris"}
                ),
                ToolResultPart(tool_call_id="t1", tool_name="get_weather", output={"temp": 21}),
                StepStartPart(),
                ReasoningPart(text="unsigned, from another provider"),
                ToolCallPart(
                    tool_call_id="t2", tool_name="get_weather", input={"location": "London"}
                ),
                ToolCallPart(
                    tool_call_id="t3", tool_name="get_weather", input={"location": "Oslo"}
                ),
                ToolResultPart(
                    tool_call_id="t3", tool_name="get_weather", output="down", is_error=True
                ),
                StepStartPart(),
                TextPart(text="Done."),
            ],
        ),
        user_message("Thanks"),
    ]
    await run(provider, request(*history, system="Base."))
    body = server.requests[0].body
    assert body["system"] == [{"type": "text", "text": "Base.\n\nExtra rules."}]
    assert body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Hi"},
                {"type": "text", "text": "Weather in Paris, London and Oslo?"},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Checking Paris."},
                {
                    "type": "tool_use",
                    "id": "t1",
                    "name": "get_weather",
                    "input": {"location": "Paris"},
                },
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "content": '{"temp": 21}'}],
        },
        {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_use",
                    "id": "t2",
                    "name": "get_weather",
                    "input": {"location": "London"},
                },
                {
                    "type": "tool_use",
                    "id": "t3",
                    "name": "get_weather",
                    "input": {"location": "Oslo"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t2",
                    "content": "No result was recorded for this tool call.",
                    "is_error": True,
                },
                {"type": "tool_result", "tool_use_id": "t3", "content": "down", "is_error": True},
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "Done."}]},
        {"role": "user", "content": [{"type": "text", "text": "Thanks"}]},
    ]


async def test_provider_options_are_scoped(server: LLMServer, provider: AnthropicProvider) -> None:
    server.script("anthropic/text_basic.sse")
    options = {
        "metadata": {"user_id": "u1"},
        "anthropic": {"service_tier": "auto"},
        "openai": {"store": False},
        "api": "responses",
    }
    await run(provider, request(provider_options=options))
    body = server.requests[0].body
    assert body["metadata"] == {"user_id": "u1"} and body["service_tier"] == "auto"
    assert "openai" not in body and "anthropic" not in body and "store" not in body
    assert "api" not in body


async def test_structured_output_native(server: LLMServer, provider: AnthropicProvider) -> None:
    server.script("anthropic/text_basic.sse")
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}}
    await run(provider, request(output_schema=schema))
    body = server.requests[0].body
    assert body["output_config"] == {"format": {"type": "json_schema", "schema": schema}}
    assert "tools" not in body


async def test_structured_output_via_forced_tool(
    server: LLMServer, provider: AnthropicProvider
) -> None:
    # Derived at run time: the recorded tool_use stream with the tool renamed json_output.
    body = (FIXTURES / "anthropic/tool_use.sse").read_text().replace("get_weather", "json_output")
    server.push(Reply(body=body))
    schema = {"type": "object", "properties": {"location": {"type": "string"}}}
    parts, snap = await run(
        provider, request(output_schema=schema, provider_options={"structured_output": "tool"})
    )
    sent = server.requests[0].body
    assert sent["tools"][0]["name"] == "json_output" and sent["tools"][0]["input_schema"] == schema
    assert sent["tool_choice"] == {"type": "tool", "name": "json_output"}
    assert "structured_output" not in sent and "output_config" not in sent
    assert not any(isinstance(p, ToolCallChunk) for p in parts)
    assert snap.text.endswith('{"location": "Paris"}')
    assert snap.finish is not None and snap.finish.finish_reason == "stop"


# --- errors ------------------------------------------------------------------------------


async def test_overloaded_529_is_transient(server: LLMServer, provider: AnthropicProvider) -> None:
    server.push(Reply("anthropic/529_overloaded.json", headers={"retry-after": "3"}))
    error = await fail(provider)
    assert (error.kind, error.status, error.retry_after, error.provider) == (
        "transient",
        529,
        3.0,
        "anthropic",
    )
    assert error.retryable
    assert "Overloaded" in str(error) and "req_01RCc7MbLyQNtGKzBTv8VCep" in str(error)
    assert len(server.requests) == 1  # the SDK did not retry: Temporal does


async def test_overloaded_error_event_is_transient(
    server: LLMServer, provider: AnthropicProvider
) -> None:
    server.script("anthropic/error_overloaded_event.sse")
    error = await fail(provider)
    assert (error.kind, error.status) == ("transient", 529)


async def test_overloaded_mid_stream_after_text(
    server: LLMServer, provider: AnthropicProvider
) -> None:
    server.script("anthropic/error_overloaded_midstream.sse")
    seen: list[StreamPart] = []
    with pytest.raises(ProviderError) as info:
        async for part in provider.stream(request()):
            seen.append(part)
    assert seen == [TextDelta(text="Hello")]
    assert info.value.kind == "transient" and "Overloaded" in str(info.value)


async def test_rate_limit_honours_retry_after_ms(
    server: LLMServer, provider: AnthropicProvider
) -> None:
    server.push(
        Reply(
            "anthropic/429_rate_limit.json", headers={"retry-after-ms": "1500", "retry-after": "2"}
        )
    )
    error = await fail(provider)
    assert (error.kind, error.status, error.retry_after) == ("transient", 429, 1.5)
    assert "rate limit" in str(error)


async def test_prompt_too_long_is_context_overflow(
    server: LLMServer, provider: AnthropicProvider
) -> None:
    server.script("anthropic/400_prompt_too_long.json")
    error = await fail(provider)
    assert (error.kind, error.status, error.retry_after) == ("context_overflow", 400, None)
    assert "prompt is too long: 219898 tokens > 200000 maximum" in str(error)


async def test_401_is_auth_and_never_shows_the_key(
    server: LLMServer, provider: AnthropicProvider
) -> None:
    # A hostile body that echoes the key: the message must still not carry it.
    body = {
        "type": "error",
        "error": {"type": "authentication_error", "message": f"invalid x-api-key {KEY}"},
    }
    server.push(Reply(body=json.dumps(body), status=401, headers={"retry-after": "1"}))
    error = await fail(provider)
    assert (error.kind, error.status, error.retry_after) == ("auth", 401, None)
    assert "ANTHROPIC_API_KEY" in str(error)
    assert KEY not in str(error) and KEY[10:] not in str(error)
    assert error.__cause__ is None  # the SDK's unredacted error is not chained


@pytest.mark.parametrize(
    ("status", "err_type", "headers", "kind"),
    [
        (403, "permission_error", {}, "auth"),
        (404, "not_found_error", {}, "invalid_request"),
        (400, "invalid_request_error", {}, "invalid_request"),
        (500, "api_error", {}, "transient"),
        (500, "api_error", {"x-should-retry": "false"}, "fatal"),
        (409, "invalid_request_error", {}, "transient"),
    ],
)
async def test_status_mapping(
    server: LLMServer,
    provider: AnthropicProvider,
    status: int,
    err_type: str,
    headers: dict[str, str],
    kind: str,
) -> None:
    body = {"type": "error", "error": {"type": err_type, "message": "something"}}
    server.push(Reply(body=json.dumps(body), status=status, headers=headers))
    error = await fail(provider)
    assert (error.kind, error.status) == (kind, status)


async def test_dropped_connection_is_transient(
    server: LLMServer, provider: AnthropicProvider
) -> None:
    server.push(Reply("anthropic/text_basic.sse", drop_after_events=4))
    error = await fail(provider)
    assert error.kind == "transient"


async def test_connection_refused_is_transient() -> None:
    with LLMServer() as gone:
        url = gone.base_url
    provider = AnthropicProvider(api_key=KEY, base_url=url, timeout=5)
    error = await fail(provider)
    assert error.kind == "transient" and "connection" in str(error).lower()
    await provider.aclose()


async def test_missing_key_is_an_auth_error(
    server: LLMServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ANTHROPIC_CONFIG_DIR", str(tmp_path))
    provider = AnthropicProvider(base_url=server.base_url)
    error = await fail(provider)
    assert error.kind == "auth" and "ANTHROPIC_API_KEY" in str(error)
    assert server.requests == []


# --- wiring ------------------------------------------------------------------------------


async def test_worker_providers_are_lazy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    registry = ModelRegistry.for_worker(Settings())
    anthropic_provider, name = registry.resolve("anthropic:claude-sonnet-4-5")
    assert isinstance(anthropic_provider, AnthropicProvider) and name == "claude-sonnet-4-5"
    openai_provider, name = registry.resolve("openai:gpt-4o")
    assert isinstance(openai_provider, OpenAIProvider) and name == "gpt-4o"
    assert anthropic_provider._client is None and openai_provider._client is None
    await registry.aclose()


async def test_env_configures_the_client(
    server: LLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
    server.script("anthropic/text_basic.sse")
    provider = AnthropicProvider()
    _, snap = await run(provider, request())
    assert snap.text == "Hello there!"
    assert sent_key(server.requests[0].headers) == KEY
    await provider.aclose()


def test_count_tokens_counts_text_not_json() -> None:
    provider = AnthropicProvider()
    messages = [
        user_message("x" * 700),
        Message(role="assistant", parts=[TextPart(text="y" * 350)]),
    ]
    estimate = provider.count_tokens("z" * 350, messages)
    assert estimate == int(1400 / 3.5) + 2 * 4


# --- a worker process against the local server -------------------------------------------


async def test_worker_retries_an_overloaded_step_through_temporal(
    server: LLMServer, harness: Harness
) -> None:
    """worker.py registers the provider; the SDK does not retry the 529, Temporal does."""
    server.push(Reply("anthropic/529_overloaded.json"), Reply("anthropic/text_basic.sse"))
    harness.start_worker(ANTHROPIC_BASE_URL=server.base_url, ANTHROPIC_API_KEY=KEY)
    result = await harness.send("c-anthropic", "Hello?", model="anthropic:claude-test-model")
    assert result.status == "completed" and result.text == "Hello there!"
    assert len(server.requests) == 2
    assert [m["role"] for m in server.requests[1].body["messages"]] == ["user"]
