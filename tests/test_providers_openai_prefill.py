"""The OpenAI provider going on from what a lost attempt streamed, on compatible servers that
continue a trailing assistant message (``prefill``: ``continue``, ``vllm``, ``prefix``),
through the real SDK against the local server; and, end to end, a turn whose worker is lost
or hands its step over mid-stream keeping the text the user saw (setting on) or starting the
step again (setting off, OpenAI's own API)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from durable_turns.contract import turn_workflow_id
from durable_turns.hooks.types import ToolSpec
from durable_turns.messages import (
    Message,
    TextDelta,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    user_message,
)
from durable_turns.models.openai import PREFILLS, OpenAIProvider
from durable_turns.streams.base import live_events
from testkit.llm_server import LLMServer, Reply
from tests.support.harness import Harness
from tests.support.history import activity_attempts
from tests.test_liveness import (
    WORDS,
    _chat_sse,
    _mid_stream_on_two,
    _retried_text,
    _seen,
    _went_on_from,
    _whole_once_after_one_failure,
)
from tests.test_providers_openai import KEY, fail, request, run

WEATHER = ToolSpec(
    name="get_weather",
    description="Weather for a city",
    input_schema={"type": "object", "properties": {"city": {"type": "string"}}},
)
STYLES = [s for s in PREFILLS if s != "off"]


@pytest.fixture
async def compatible(
    server: LLMServer, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[OpenAIProvider]:
    """A provider for a compatible server, with no prefill of its own (the tests set it)."""
    monkeypatch.delenv("TURNS_OPENAI_PREFILL", raising=False)
    p = OpenAIProvider(api_key=KEY, base_url=server.openai_base_url, api="chat", timeout=30)
    yield p
    await p.aclose()


@pytest.mark.parametrize("style", STYLES)
async def test_each_style_sends_the_prefill_and_streams_the_rest(
    server: LLMServer, compatible: OpenAIProvider, style: str
) -> None:
    """The kept text goes last, without its trailing white space, as an assistant message in
    the server's style (as it is; with vLLM's ``continue_final_message`` and no generation
    prompt; marked ``"prefix": true``); a server of that style streams only what follows."""
    server.openai_prefill = style
    server.push(Reply("openai/chat_text.sse", times=2))
    _, whole = await run(compatible, request())
    options = {"openai": {"prefill": style}}
    req = request(continue_text="I'm unable to ", provider_options=options)
    assert compatible.continues(req)
    parts, snap = await run(compatible, req)
    assert snap.text == whole.text[len("I'm unable to") :] and snap.text.startswith(" provide")
    assert next(p.text for p in parts if isinstance(p, TextDelta)) == " provide"
    body = server.requests[-1].body
    expected: dict[str, Any] = {"role": "assistant", "content": "I'm unable to"}
    if style == "prefix":
        expected["prefix"] = True
    assert body["messages"] == [{"role": "user", "content": "Hi"}, expected]
    vllm = {k: body[k] for k in ("continue_final_message", "add_generation_prompt") if k in body}
    assert vllm == (
        {"continue_final_message": True, "add_generation_prompt": False} if style == "vllm" else {}
    )
    assert "prefill" not in body, "the setting is the provider's, not a body field"


async def test_a_server_of_another_style_answers_anew(
    server: LLMServer, compatible: OpenAIProvider
) -> None:
    """The local server is strict: a trailing assistant message that is not in its style is a
    finished turn (as OpenAI's own API takes one), and the reply comes whole."""
    server.openai_prefill = "prefix"
    server.script("openai/chat_text.sse")
    options = {"openai": {"prefill": "continue"}}
    _, snap = await run(compatible, request(continue_text="Well,", provider_options=options))
    assert snap.text.startswith("I'm unable to provide")
    assert server.requests[-1].body["messages"][-1] == {"role": "assistant", "content": "Well,"}


async def test_a_prefill_streamed_back_is_left_out(
    server: LLMServer, compatible: OpenAIProvider
) -> None:
    """A server that streams the prefix back before what it adds (Mistral's answer to a
    ``"prefix": true`` message starts with it; here the local server sends the scripted
    reply whole, which starts with the prefill): the step streams only what follows it,
    the deltas that could be the prefill held until they are known not to be."""
    server.push(Reply("openai/chat_text.sse", times=3))
    _, whole = await run(compatible, request())
    options = {"openai": {"prefill": "prefix"}}
    parts, snap = await run(
        compatible, request(continue_text="I'm unable", provider_options=options)
    )
    texts = [p.text for p in parts if isinstance(p, TextDelta)]
    assert snap.text == whole.text[len("I'm unable") :] and texts[:2] == [" to", " provide"]
    # a start of the prefill that goes elsewhere is the model's own text, sent as it came
    parts, snap = await run(compatible, request(continue_text="I'm able", provider_options=options))
    assert snap.text == whole.text
    assert [p.text for p in parts if isinstance(p, TextDelta)][:2] == ["I'm", " unable"]


def test_what_rules_a_prefill_out(
    server: LLMServer, compatible: OpenAIProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As Anthropic's: a forced tool, structured output, reasoning settings, a conversation
    that does not end with the user or a tool result; and OpenAI's own: the setting off (the
    default), the Responses API, OpenAI's own API, an unknown style."""
    on = OpenAIProvider(api_key=KEY, base_url=server.openai_base_url, prefill="continue")
    assert not compatible.continues(request()), "off by default"
    assert on.continues(request())
    assert on.continues(request(tools=[WEATHER], tool_choice="auto"))
    assert not on.continues(request(tools=[WEATHER], tool_choice="required"))
    assert not on.continues(request(tools=[WEATHER], tool_choice={"tool_name": "get_weather"}))
    assert not on.continues(request(output_schema={"type": "object"}))
    json_mode = {"openai": {"response_format": {"type": "json_object"}}}
    assert not on.continues(request(provider_options=json_mode))
    assert not on.continues(request(provider_options={"openai": {"reasoning_effort": "low"}}))
    thinking = {"openai": {"chat_template_kwargs": {"enable_thinking": True}}}
    assert not on.continues(request(provider_options=thinking))
    ended = Message(role="assistant", parts=[TextPart(text="done")])
    assert not on.continues(request(user_message("Hi"), ended))
    called = Message(
        role="assistant",
        parts=[
            ToolCallPart(tool_call_id="c1", tool_name="get_weather", input={"city": "Oslo"}),
            ToolResultPart(tool_call_id="c1", tool_name="get_weather", output={"temp": 3}),
        ],
    )
    assert on.continues(request(user_message("Oslo?"), called)), "after a tool result"
    assert not on.continues(request(model="gpt-test@responses"))
    assert not on.continues(request(provider_options={"openai": {"prefill": "off"}}))
    assert not on.continues(request(provider_options={"openai": {"prefill": "echo"}}))
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    for base_url in (None, "https://api.openai.com/v1"):
        assert not OpenAIProvider(api_key=KEY, base_url=base_url, prefill="vllm").continues(
            request()
        ), "OpenAI's own API has no prefill"
    monkeypatch.setenv("TURNS_OPENAI_PREFILL", "vllm")  # per worker
    assert compatible.continues(request())


async def test_an_unknown_style_is_an_invalid_request(compatible: OpenAIProvider) -> None:
    error = await fail(compatible, request(provider_options={"openai": {"prefill": "echo"}}))
    assert error.kind == "invalid_request" and "continue, vllm, prefix" in str(error)


@pytest.mark.parametrize(("style", "lost"), [("vllm", "kill"), ("prefix", "term"), (None, "kill")])
async def test_a_lost_openai_step_goes_on_from_what_was_streamed(
    harness: Harness, style: str | None, lost: str
) -> None:
    """A worker streaming an OpenAI-compatible reply is SIGKILLed (or SIGTERMed, handing
    its step over) mid-stream. With ``TURNS_OPENAI_PREFILL`` set, the next attempt sends
    what the user saw as the trailing assistant message in that style and streams only the
    rest: its first chunk is the kept text (no rewind), and the reply is stored whole, once.
    Unset, the step starts again from the reply's first word, against the same server."""
    server = LLMServer(openai_prefill=style or "continue").start()
    server.push(Reply(body=_chat_sse(40), first_token_s=0.1, tokens_per_s=10, times=2))
    env = {
        "OPENAI_BASE_URL": server.openai_base_url,
        "OPENAI_API_KEY": "sk-test",
        "TURNS_SHUTDOWN_GRACE_S": "300",
        **({"TURNS_OPENAI_PREFILL": style} if style else {}),
    }
    victim, conversation, request_id, streams = await _mid_stream_on_two(
        harness, f"prefill-{style}-{lost}", model="openai:gpt-test", **env
    )
    workflow_id = turn_workflow_id(conversation, 1)
    try:
        seen = await _seen(streams, workflow_id)
        if lost == "kill":
            victim.kill()
        else:
            victim.terminate()
        failed = await _whole_once_after_one_failure(harness, conversation, request_id, workflow_id)
        assert failed.application_failure_info.type == (
            "WorkerLost" if lost == "kill" else "WorkerShutdown"
        )
        assert await activity_attempts(harness, workflow_id, "model_step") == [1, 2]
        events = await streams.read(workflow_id)
        text = "".join(e.data.get("text", "") for e in live_events(events) if e.type == "chunk")
        assert text == WORDS + " ", "what a reader ends with: the reply, once"
        messages = await (await harness.store()).messages(conversation)
        assert [m.role for m in messages] == ["user", "assistant"]
        assert messages[1].text == WORDS + " ", "stored: kept text + continuation, once"
        first, last = (r.body for r in server.requests[-2:])
        assert first["messages"][-1] == {"role": "user", "content": "count"}
        if style is None:  # from scratch: the next attempt's first chunk is the first word
            assert last["messages"] == first["messages"]
            assert _retried_text(events)[0] == "w0 "
            return
        kept = _went_on_from(events, seen)
        assert len(kept.split()) >= 5, "the lost attempt's text, kept"
        prefill: dict[str, Any] = {"role": "assistant", "content": kept}
        if style == "prefix":
            prefill["prefix"] = True
        assert last["messages"] == [*first["messages"], prefill]
        assert last.get("continue_final_message") is (True if style == "vllm" else None)
        # the rest streamed after the kept text: no word of it twice
        assert "".join(_retried_text(events)) == WORDS + " "
    finally:
        await streams.close()
        server.stop()
