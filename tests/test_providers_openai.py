"""The OpenAI provider, driven through the real SDK against recorded Chat Completions and
Responses streams (both APIs; Chat Completions is also what compatible servers speak)."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import AsyncIterator

import pytest

from durable_turns.activities.streaming import StepSnapshot, StreamStalled, consume
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
from durable_turns.models.base import ModelRequest, ProviderError
from durable_turns.models.openai import (
    PLACEHOLDER_KEY,
    OpenAIProvider,
    chat_body,
    responses_body,
    to_responses_input,
)
from testkit.llm_server import LLMServer, Reply
from tests.support.harness import Harness

KEY = "sk-proj-TESTSECRETKEY0123456789abcdefghij"
WEATHER = ToolSpec(
    name="get_weather",
    description="Weather for a city",
    input_schema={"type": "object", "properties": {"city": {"type": "string"}}},
)


@pytest.fixture
async def chat(server: LLMServer) -> AsyncIterator[OpenAIProvider]:
    p = OpenAIProvider(api_key=KEY, base_url=server.openai_base_url, api="chat", timeout=30)
    yield p
    await p.aclose()


@pytest.fixture
async def responses(server: LLMServer) -> AsyncIterator[OpenAIProvider]:
    p = OpenAIProvider(api_key=KEY, base_url=server.openai_base_url, api="responses", timeout=30)
    yield p
    await p.aclose()


def request(*messages: Message, **settings: object) -> ModelRequest:
    settings.setdefault("model", "gpt-test")
    return ModelRequest(
        messages=list(messages) or [user_message("Hi")],
        **settings,  # type: ignore[arg-type]
    )


async def run(
    provider: OpenAIProvider, req: ModelRequest, stall_timeout_ms: int = 0
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
    return parts, snap


async def fail(provider: OpenAIProvider, req: ModelRequest | None = None) -> ProviderError:
    with pytest.raises(ProviderError) as info:
        await run(provider, req or request())
    return info.value


# --- Chat Completions --------------------------------------------------------------------


async def test_chat_text_and_request(server: LLMServer, chat: OpenAIProvider) -> None:
    server.script("openai/chat_text.sse")
    req = request(
        system="Be brief.",
        temperature=0.3,
        seed=1,
        stop_sequences=["END"],
        max_output_tokens=100,
        headers={"x-trace": "abc"},
    )
    parts, snap = await run(chat, req)
    assert snap.text.startswith("I'm unable to provide real-time weather updates.")
    assert len([p for p in parts if isinstance(p, TextDelta)]) > 10
    finish = snap.finish
    assert finish is not None
    assert (finish.finish_reason, finish.raw_finish_reason) == ("stop", "stop")
    assert (finish.usage.input_tokens, finish.usage.output_tokens, finish.usage.total_tokens) == (
        14,
        30,
        44,
    )
    assert finish.response == {
        "id": "chatcmpl-ABfw031mOJeYCSHe4yI2ZjOA6kMJL",
        "model": "gpt-4o-2024-08-06",
    }

    [sent] = server.requests
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert sent.headers["x-trace"] == "abc"
    assert sent.headers["x-stainless-retry-count"] == "0"
    body = sent.body
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
    ]
    # A custom base URL is a compatible server: max_tokens, which they all accept.
    assert (body["max_tokens"], body["temperature"], body["seed"], body["stop"]) == (
        100,
        0.3,
        1,
        ["END"],
    )


async def test_chat_tool_call_incremental_json(server: LLMServer, chat: OpenAIProvider) -> None:
    server.script("openai/chat_tool_call.sse")
    parts, snap = await run(chat, request(tools=[WEATHER], tool_choice="required"))
    start = next(p for p in parts if isinstance(p, ToolInputStart))
    assert (start.tool_call_id, start.tool_name) == ("call_4XzlGBLtUe9dy3GVNV4jhq7h", "get_weather")
    deltas = [p.delta for p in parts if isinstance(p, ToolInputDelta)]
    assert len(deltas) > 3 and "".join(deltas) == '{"city":"New York City"}'
    [call] = [p for p in parts if isinstance(p, ToolCallChunk)]
    assert call.input == {"city": "New York City"}
    assert snap.finish is not None and snap.finish.finish_reason == "tool-calls"
    assert (snap.finish.usage.input_tokens, snap.finish.usage.output_tokens) == (44, 16)

    body = server.requests[0].body
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather for a city",
                "parameters": WEATHER.input_schema,
            },
        }
    ]
    assert body["tool_choice"] == "required"


async def test_chat_parallel_tool_calls(server: LLMServer, chat: OpenAIProvider) -> None:
    server.script("openai/chat_parallel_tool_calls.sse")
    _, snap = await run(
        chat, request(tools=[WEATHER], tool_choice={"type": "tool", "tool_name": "get_weather"})
    )
    assert [(c.tool_call_id, c.tool_name, c.input) for c in snap.tool_calls] == [
        (
            "call_JMW1whyEaYG438VE1OIflxA2",
            "GetWeatherArgs",
            {"city": "Edinburgh", "country": "GB", "units": "c"},
        ),
        (
            "call_DNYTawLBoN8fj3KN6qU9N1Ou",
            "get_stock_price",
            {"ticker": "AAPL", "exchange": "NASDAQ"},
        ),
    ]
    assert snap.finish is not None and snap.finish.usage.total_tokens == 209
    assert server.requests[0].body["tool_choice"] == {
        "type": "function",
        "function": {"name": "get_weather"},
    }


async def test_chat_reasoning_content(server: LLMServer, chat: OpenAIProvider) -> None:
    # Synthetic (no recording was available): the vLLM / DeepSeek ``reasoning_content`` shape.
    def chunk(delta: dict[str, object], finish: str | None = None) -> str:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        data = {
            "id": "chatcmpl-local",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "qwen3",
            "choices": [choice],
        }
        return f"data: {json.dumps(data)}\n\n"

    usage = {
        "prompt_tokens": 5,
        "completion_tokens": 7,
        "total_tokens": 12,
        "completion_tokens_details": {"reasoning_tokens": 4},
    }
    tail = {
        "id": "chatcmpl-local",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "qwen3",
        "choices": [],
        "usage": usage,
    }
    body = (
        chunk({"role": "assistant", "reasoning_content": "Think"})
        + chunk({"reasoning_content": " hard."})
        + chunk({"content": "Answer."})
        + chunk({}, "stop")
        + f"data: {json.dumps(tail)}\n\ndata: [DONE]\n\n"
    )
    server.push(Reply(body=body))
    parts, snap = await run(chat, request())
    assert parts[:3] == [
        ReasoningDelta(text="Think"),
        ReasoningDelta(text=" hard."),
        ReasoningEnd(),
    ]
    assert snap.parts == [ReasoningPart(text="Think hard."), TextPart(text="Answer.")]
    assert snap.finish is not None and snap.finish.usage.reasoning_tokens == 4


async def test_chat_history_translation(server: LLMServer, chat: OpenAIProvider) -> None:
    server.script("openai/chat_text.sse")
    history = [
        user_message("Weather in Paris and Oslo?"),
        Message(
            role="assistant",
            parts=[
                StepStartPart(),
                ReasoningPart(text="not sent back", signature="sig"),
                TextPart(text="Checking."),
                ToolCallPart(tool_call_id="c1", tool_name="get_weather", input={"city": "Paris"}),
                ToolCallPart(tool_call_id="c2", tool_name="get_weather", input={"city": "Oslo"}),
                ToolResultPart(tool_call_id="c1", tool_name="get_weather", output={"temp": 21}),
                ToolResultPart(
                    tool_call_id="c2", tool_name="get_weather", output="down", is_error=True
                ),
                StepStartPart(),
                TextPart(text="Paris is 21."),
            ],
        ),
        user_message("Thanks"),
    ]
    await run(chat, request(*history))
    assert server.requests[0].body["messages"] == [
        {"role": "user", "content": "Weather in Paris and Oslo?"},
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                },
                {
                    "id": "c2",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": '{"temp": 21}'},
        {"role": "tool", "tool_call_id": "c2", "content": "Error: down"},
        {"role": "assistant", "content": "Paris is 21."},
        {"role": "user", "content": "Thanks"},
    ]


async def test_chat_structured_output_and_options(server: LLMServer, chat: OpenAIProvider) -> None:
    server.script("openai/chat_text.sse")
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}}
    options = {
        "openai": {"parallel_tool_calls": False},
        "anthropic": {"thinking": {}},
        "structured_output": "tool",
        "user": "u1",
    }
    await run(chat, request(output_schema=schema, provider_options=options))
    body = server.requests[0].body
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "response", "schema": schema, "strict": False},
    }
    assert body["parallel_tool_calls"] is False and body["user"] == "u1"
    assert "thinking" not in body and "anthropic" not in body and "openai" not in body
    assert "structured_output" not in body


def test_chat_body_for_openai_itself_uses_max_completion_tokens() -> None:
    body, warnings = chat_body(request(max_output_tokens=50, top_k=3), custom_server=False)
    assert body["max_completion_tokens"] == 50 and "max_tokens" not in body
    assert "top_k" not in body
    assert warnings == ["top_k is not supported by the OpenAI Chat Completions API; it was ignored"]


async def test_chat_stall_mid_stream(server: LLMServer, chat: OpenAIProvider) -> None:
    server.push(Reply("openai/chat_text.sse", stall_after_events=3, stall_s=20))
    with pytest.raises(StreamStalled) as info:
        await run(chat, request(), stall_timeout_ms=300)
    assert info.value.chunks == 2  # the role chunk carries no text; two text chunks came


async def test_chat_dropped_connection_is_transient(
    server: LLMServer, chat: OpenAIProvider
) -> None:
    server.push(Reply("openai/chat_text.sse", drop_after_events=5))
    error = await fail(chat)
    assert error.kind == "transient"


# --- Responses ---------------------------------------------------------------------------


async def test_responses_text(server: LLMServer, responses: OpenAIProvider) -> None:
    server.script("openai/responses_text.sse")
    _, snap = await run(
        responses, request(system="Be brief.", max_output_tokens=64, temperature=0.5)
    )
    assert snap.text == "The capital of PotatoLand is **Potato City**."
    finish = snap.finish
    assert finish is not None
    assert (finish.finish_reason, finish.raw_finish_reason) == ("stop", "completed")
    assert (finish.usage.input_tokens, finish.usage.output_tokens, finish.usage.total_tokens) == (
        147,
        16,
        163,
    )
    assert finish.response["model"] == "gpt-5.5-2026-04-23"
    sent = server.requests[0]
    assert sent.path == "/v1/responses"
    assert sent.body["instructions"] == "Be brief."
    assert sent.body["input"] == [
        {"role": "user", "content": [{"type": "input_text", "text": "Hi"}]}
    ]
    assert (sent.body["max_output_tokens"], sent.body["temperature"]) == (64, 0.5)


async def test_responses_function_call_and_reasoning_tokens(
    server: LLMServer, responses: OpenAIProvider
) -> None:
    server.script("openai/responses_function_call.sse")
    parts, snap = await run(
        responses,
        request(tools=[WEATHER], tool_choice={"type": "tool", "tool_name": "get_weather"}),
    )
    # The reasoning item (no summary) becomes an empty part carrying its id and content.
    assert [type(p).__name__ for p in parts][:4] == [
        "ReasoningDelta",
        "ReasoningEnd",
        "ToolInputStart",
        "ToolInputDelta",
    ]
    [reasoning] = [p for p in snap.parts if isinstance(p, ReasoningPart)]
    meta = (reasoning.provider_metadata or {})["openai"]
    assert (reasoning.text, meta["item_id"]) == (
        "",
        "rs_0050471a34b36ae60068c97bac4dcc819595fd0f80d6b3c405",
    )
    assert meta["encrypted_content"].startswith("gAAAAA")
    assert "".join(p.delta for p in parts if isinstance(p, ToolInputDelta)) == '{"result":6666}'
    [call] = snap.tool_calls
    assert (call.tool_call_id, call.tool_name, call.input) == (
        "call_CWXgs68YprAjp6t0371hiPOI",
        "final_result",
        {"result": 6666},
    )
    finish = snap.finish
    assert finish is not None and finish.finish_reason == "tool-calls"
    assert (finish.usage.reasoning_tokens, finish.usage.output_tokens) == (448, 469)
    body = server.requests[0].body
    assert body["tools"] == [
        {
            "type": "function",
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": WEATHER.input_schema,
            "strict": False,
        }
    ]
    assert body["tool_choice"] == {"type": "function", "name": "get_weather"}


async def test_responses_text_then_function_call(
    server: LLMServer, responses: OpenAIProvider
) -> None:
    server.script("openai/responses_reasoning_text_function_call.sse")
    _, snap = await run(responses, request())
    assert snap.text == "I’ll check the capital lookup tool for “PotatoLand.”"
    assert [(c.tool_name, c.input) for c in snap.tool_calls] == [
        ("get_capital", {"country": "PotatoLand"})
    ]
    assert snap.finish is not None and snap.finish.usage.reasoning_tokens == 26


async def test_responses_reasoning_summary_keeps_the_item(
    server: LLMServer, responses: OpenAIProvider
) -> None:
    """A summarised reasoning item is one part: its summary, its id and encrypted content."""
    server.script("openai/responses_calculator.1.sse")
    parts, snap = await run(responses, request())
    [reasoning] = [p for p in snap.parts if isinstance(p, ReasoningPart)]
    assert reasoning.text.startswith("**Calculating step-by-step using calculator**")
    meta = (reasoning.provider_metadata or {})["openai"]
    assert meta["item_id"] == "rs_01830d662ab3856501693c321405c88190be3ab04d5782d5f9"
    assert meta["encrypted_content"].startswith("gAAAAA")
    tagged = [p for p in parts if isinstance(p, ReasoningDelta) and p.provider_metadata]
    assert len(tagged) == 2  # the first delta (the id) and the item's end (the content)
    assert [type(p) for p in snap.parts] == [ReasoningPart, ToolCallPart]


def openai_reasoning(text: str, item_id: str, encrypted: str | None = None) -> ReasoningPart:
    meta: dict[str, object] = {"item_id": item_id}
    if encrypted:
        meta["encrypted_content"] = encrypted
    return ReasoningPart(text=text, provider_metadata={"openai": meta})


def reasoning_turn(*reasoning: ReasoningPart) -> list[Message]:
    """A user message, then a turn in progress: reasoning, commentary, a call and its result."""
    return [
        user_message("Capital of PotatoLand?"),
        Message(
            role="assistant",
            parts=[
                StepStartPart(),
                *reasoning,
                TextPart(text="Looking it up."),
                ToolCallPart(tool_call_id="c1", tool_name="get_capital", input={"country": "P"}),
                ToolResultPart(tool_call_id="c1", tool_name="get_capital", output="Potato City"),
            ],
        ),
    ]


CALL_ITEMS = [
    {"role": "assistant", "content": "Looking it up."},
    {
        "type": "function_call",
        "call_id": "c1",
        "name": "get_capital",
        "arguments": '{"country": "P"}',
    },
    {"type": "function_call_output", "call_id": "c1", "output": "Potato City"},
]


def test_responses_input_sends_the_turns_reasoning_item_first() -> None:
    """Summary parts of one item join into one item, sent before what followed it; the
    encrypted content comes from whichever part has it."""
    messages = reasoning_turn(
        openai_reasoning("First.", "rs_1"), openai_reasoning("Second.", "rs_1", "enc")
    )
    assert to_responses_input(messages)[1:] == [
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [
                {"type": "summary_text", "text": "First."},
                {"type": "summary_text", "text": "Second."},
            ],
            "encrypted_content": "enc",
        },
        *CALL_ITEMS,
    ]
    assert to_responses_input(messages, send_reasoning=False)[1:] == CALL_ITEMS


def test_responses_input_skips_reasoning_it_cannot_send() -> None:
    anthropic = ReasoningPart(text="thinking", signature="sig")  # after a provider switch
    chat = ReasoningPart(text="vLLM reasoning")  # Chat Completions: no item
    messages = reasoning_turn(anthropic, chat)
    assert to_responses_input(messages)[1:] == CALL_ITEMS
    # With store false an item without its encrypted content cannot be looked up.
    only_id = reasoning_turn(openai_reasoning("", "rs_1"))
    assert to_responses_input(only_id, store=False)[1:] == CALL_ITEMS
    assert to_responses_input(only_id)[1] == {"type": "reasoning", "id": "rs_1", "summary": []}
    # An earlier turn's reasoning stays behind (the model ignores it; stored items expire).
    later = [*reasoning_turn(openai_reasoning("Old.", "rs_0", "enc")), user_message("And?")]
    assert items_of_type(to_responses_input(later), "reasoning") == []


def items_of_type(items: list[dict[str, object]], kind: str) -> list[dict[str, object]]:
    return [i for i in items if i.get("type") == kind]


def test_responses_body_asks_for_encrypted_reasoning_only_when_it_is_safe() -> None:
    def body(**options: object) -> dict[str, object]:
        return responses_body(request(provider_options={"openai": options}))[0]

    assert "include" not in body()  # stored: the id is enough
    assert "include" not in body(store=False)  # non-reasoning models reject the include
    reasoning = {"effort": "low"}
    assert "include" not in body(reasoning=reasoning)
    assert body(store=False, reasoning=reasoning)["include"] == ["reasoning.encrypted_content"]
    mine = body(store=False, reasoning=reasoning, include=["message.output_text.logprobs"])
    assert mine["include"] == ["message.output_text.logprobs", "reasoning.encrypted_content"]
    kept = body(store=False, include=["reasoning.encrypted_content"])
    assert kept["include"] == ["reasoning.encrypted_content"]


async def test_responses_legacy_events_without_sequence_numbers(
    server: LLMServer, responses: OpenAIProvider
) -> None:
    server.script("openai/responses_function_call_legacy_no_seq.sse")
    _, snap = await run(responses, request())
    assert [(c.tool_call_id, c.input) for c in snap.tool_calls] == [
        ("call_kL0PCQV7M2WMoVX8V8OtYSAL", {"country": "France"})
    ]
    assert snap.finish is not None and snap.finish.usage.input_tokens == 255


async def test_responses_history_and_structured_output(
    server: LLMServer, responses: OpenAIProvider
) -> None:
    server.script("openai/responses_text.sse")
    history = [
        user_message("Capital of PotatoLand?"),
        Message(
            role="assistant",
            parts=[
                StepStartPart(),
                TextPart(text="Looking it up."),
                ToolCallPart(
                    tool_call_id="c1", tool_name="get_capital", input={"country": "PotatoLand"}
                ),
                ToolResultPart(tool_call_id="c1", tool_name="get_capital", output="Potato City"),
            ],
        ),
        user_message("Say it as JSON"),
    ]
    schema = {"type": "object", "properties": {"capital": {"type": "string"}}}
    await run(responses, request(*history, output_schema=schema))
    body = server.requests[0].body
    assert body["input"] == [
        {"role": "user", "content": [{"type": "input_text", "text": "Capital of PotatoLand?"}]},
        {"role": "assistant", "content": "Looking it up."},
        {
            "type": "function_call",
            "call_id": "c1",
            "name": "get_capital",
            "arguments": '{"country": "PotatoLand"}',
        },
        {"type": "function_call_output", "call_id": "c1", "output": "Potato City"},
        {"role": "user", "content": [{"type": "input_text", "text": "Say it as JSON"}]},
    ]
    assert body["text"] == {
        "format": {"type": "json_schema", "name": "response", "schema": schema, "strict": False}
    }


async def test_responses_error_event_insufficient_quota_is_fatal(
    server: LLMServer, responses: OpenAIProvider
) -> None:
    server.script("openai/responses_error_insufficient_quota.sse")
    error = await fail(responses)
    assert error.kind == "fatal" and not error.retryable
    assert "billing" in str(error) and "insufficient_quota" in str(error)


# --- API selection -----------------------------------------------------------------------


async def test_api_selection(server: LLMServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TURNS_OPENAI_API", raising=False)
    provider = OpenAIProvider(api_key=KEY, base_url=server.openai_base_url)
    server.push(Reply("openai/chat_text.sse"), Reply("openai/responses_text.sse", times=3))
    await run(provider, request())  # the default: Chat Completions
    await run(provider, request(model="gpt-5@responses"))
    await run(provider, request(provider_options={"api": "responses"}))
    monkeypatch.setenv("TURNS_OPENAI_API", "responses")
    await run(provider, request())
    paths = [r.path for r in server.requests]
    assert paths == ["/v1/chat/completions"] + ["/v1/responses"] * 3
    assert server.requests[1].body["model"] == "gpt-5"
    assert "api" not in server.requests[2].body
    error = await fail(provider, request(provider_options={"api": "completions"}))
    assert error.kind == "invalid_request"
    await provider.aclose()


async def test_base_url_from_env_needs_no_key(
    server: LLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_BASE_URL", server.openai_base_url)
    server.script("openai/chat_text.sse")
    provider = OpenAIProvider()
    _, snap = await run(provider, request())
    assert snap.finish is not None
    assert server.requests[0].headers["authorization"] == f"Bearer {PLACEHOLDER_KEY}"
    await provider.aclose()


async def test_no_key_and_no_base_url_is_auth(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    error = await fail(OpenAIProvider())
    assert error.kind == "auth" and "OPENAI_API_KEY" in str(error)


# --- errors ------------------------------------------------------------------------------


async def test_rate_limit_is_transient_with_retry_after(
    server: LLMServer, chat: OpenAIProvider
) -> None:
    server.push(
        Reply("openai/429_rate_limit.json", headers={"retry-after": "6", "x-should-retry": "true"})
    )
    error = await fail(chat)
    assert (error.kind, error.status, error.retry_after) == ("transient", 429, 6.0)
    assert "rate_limit_exceeded" in str(error)
    assert len(server.requests) == 1  # the SDK did not retry: Temporal does


async def test_insufficient_quota_429_is_fatal(server: LLMServer, chat: OpenAIProvider) -> None:
    server.push(
        Reply("openai/429_insufficient_quota.json", status=429, headers={"retry-after": "20"})
    )
    error = await fail(chat)
    assert (error.kind, error.status, error.retry_after) == ("fatal", 429, None)
    assert "billing" in str(error)


@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_context_length_exceeded_is_context_overflow(server: LLMServer, api: str) -> None:
    provider = OpenAIProvider(api_key=KEY, base_url=server.openai_base_url, api=api)
    server.script("openai/400_context_length_exceeded.json")
    error = await fail(provider)
    assert (error.kind, error.status) == ("context_overflow", 400)
    assert "maximum context length is 4097 tokens" in str(error)
    await provider.aclose()


async def test_401_is_auth_and_never_shows_the_key(server: LLMServer, chat: OpenAIProvider) -> None:
    # A hostile body that echoes the whole key: the message must still not carry it.
    body = {
        "error": {
            "message": f"Incorrect API key provided: {KEY}.",
            "type": "invalid_request_error",
            "code": "invalid_api_key",
        }
    }
    server.push(Reply(body=json.dumps(body), status=401))
    error = await fail(chat)
    assert (error.kind, error.status) == ("auth", 401)
    assert "OPENAI_API_KEY" in str(error)
    assert KEY not in str(error) and KEY[12:] not in str(error)
    assert error.__cause__ is None


@pytest.mark.parametrize(
    ("status", "headers", "kind", "retry_after"),
    [
        (503, {"retry-after-ms": "250"}, "transient", 0.25),
        (500, {"x-should-retry": "false"}, "fatal", None),
        (408, {}, "transient", None),
        (404, {}, "invalid_request", None),
        (403, {}, "auth", None),
    ],
)
async def test_status_mapping(
    server: LLMServer,
    chat: OpenAIProvider,
    status: int,
    headers: dict[str, str],
    kind: str,
    retry_after: float | None,
) -> None:
    body = {"error": {"message": "something", "type": "server_error", "code": None}}
    server.push(Reply(body=json.dumps(body), status=status, headers=headers))
    error = await fail(chat)
    assert (error.kind, error.status, error.retry_after) == (kind, status, retry_after)


def test_count_tokens() -> None:
    provider = OpenAIProvider()
    messages = [
        user_message("x" * 400),
        Message(
            role="assistant", parts=[ToolCallPart(tool_call_id="a", tool_name="get", input={})]
        ),
    ]
    assert provider.count_tokens("", messages) == int((400 + 3 + 2) / 4) + 2 * 4


# --- a worker process against the local server -------------------------------------------


async def test_worker_runs_a_tool_turn_against_a_compatible_server(
    server: LLMServer, harness: Harness
) -> None:
    """worker.py registers the providers; a two-step turn goes through OPENAI_BASE_URL."""
    server.push(Reply("openai/chat_tool_call.sse"), Reply("openai/chat_text.sse"))
    harness.start_worker(
        OPENAI_BASE_URL=server.openai_base_url,
        OPENAI_API_KEY=KEY,
        TURNS_TOOLS="tests.support.tools,tests.support.weather_tools",  # the demo one is not offered
    )
    result = await harness.send("c-openai", "Weather in New York City?", model="openai:gpt-test")
    assert result.status == "completed" and result.steps == 2
    assert result.text.startswith("I'm unable to provide real-time weather updates.")
    second = server.requests[1].body["messages"]
    assert second[-2]["tool_calls"][0]["function"]["name"] == "get_weather"
    tool = second[-1]
    assert tool["role"] == "tool" and tool["tool_call_id"] == "call_4XzlGBLtUe9dy3GVNV4jhq7h"
    assert "New York City" in tool["content"]


async def test_control_api_scripts_the_server_over_http(
    server: LLMServer, chat: OpenAIProvider
) -> None:
    """What a process without the server object uses: script, read requests, reset."""
    base = server.base_url

    def call(path: str, payload: object = None) -> object:
        data = None if payload is None else json.dumps(payload).encode()
        method = "GET" if payload is None else "POST"
        req = urllib.request.Request(base + path, data=data, method=method)
        with urllib.request.urlopen(req, timeout=5) as response:
            return json.loads(response.read())

    answer = await asyncio.to_thread(
        call, "/_control/script", [{"fixture": "openai/chat_text.sse", "times": 2}]
    )
    assert answer == {"ok": True, "pending": 2}
    await run(chat, request())
    await run(chat, request())
    recorded = await asyncio.to_thread(call, "/_control/requests")
    assert (
        isinstance(recorded, list) and [r["path"] for r in recorded] == ["/v1/chat/completions"] * 2
    )
    assert server.pending() == 0
