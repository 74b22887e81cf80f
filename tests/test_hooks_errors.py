"""``on_chat_response``, ``on_chat_error`` and ``classify_chat_error`` at the end of a turn."""

from __future__ import annotations

import asyncio

from tests.support.harness import Harness
from tests.support.hooks import calls, start_worker, wait_for_hook


async def test_provider_error_reaches_on_chat_error_and_its_answer_is_shown(
    harness: Harness,
) -> None:
    start_worker(harness)
    script = harness.script(
        [{"text": "partial", "error": {"status": 400, "message": "bad thing", "after_chunks": 1}}]
    )
    result = await harness.send(harness.conv("err"), "hi", model=script, request_id="err-1")
    assert result.status == "error" and result.error is not None
    assert result.error.message == "Sorry, that failed (stream): bad thing"
    assert result.error.type == "ProviderError"
    [seen] = calls(harness, "on_chat_error")
    assert seen["stage"] == "stream" and seen["messages_persisted"] is True
    assert seen["classification"] is None and seen["request_id"] == "err-1"
    assert seen["error"] == "bad thing" and seen["type"] == "ProviderError"
    response = await wait_for_hook(harness, "on_chat_response", request_id="err-1")
    assert response["status"] == "error" and response["error"] == result.error.message


async def test_before_turn_raising_reaches_on_chat_error(harness: Harness) -> None:
    start_worker(harness)
    conversation = harness.conv("err-turn")
    result = await harness.send(
        conversation, "hi", model="demo:echo", body={"raise_in": "before_turn"}
    )
    assert result.status == "error" and result.error is not None
    assert result.error.type == "HookError"
    assert result.error.message == (
        "Sorry, that failed (turn): hook before_turn raised RuntimeError: before_turn exploded"
    )
    [seen] = calls(harness, "on_chat_error")
    assert seen["stage"] == "turn" and seen["messages_persisted"] is True
    assert [m.text for m in await (await harness.store()).messages(conversation)] == ["hi"]
    assert calls(harness, "before_step") == []  # nothing streamed


async def test_classify_chat_error_marks_a_context_overflow(harness: Harness) -> None:
    start_worker(harness)
    overflow = "prompt is too long: 213450 tokens > 200000 maximum"
    script = harness.script(
        [{"error": {"status": 400, "message": overflow, "kind": "invalid_request"}}]
    )
    result = await harness.send(harness.conv("overflow"), "hi", model=script)
    assert result.status == "error" and result.error is not None
    assert result.error.classification == "context_overflow"
    [classified] = calls(harness, "classify_chat_error")
    assert classified["error"] == overflow and classified["stage"] == "stream"
    [seen] = calls(harness, "on_chat_error")
    assert seen["classification"] == "context_overflow" and seen["stage"] == "stream"


async def test_classify_is_not_asked_for_transient_errors(harness: Harness) -> None:
    start_worker(harness)
    script = harness.script(
        [{"text": "ok", "error": {"status": 529, "message": "overloaded"}, "attempts": 1}]
    )
    result = await harness.send(harness.conv("transient"), "hi", model=script)
    assert result.status == "completed"
    assert calls(harness, "classify_chat_error") == []


async def test_on_chat_response_after_an_aborted_turn(harness: Harness) -> None:
    start_worker(harness)
    conversation = harness.conv("abort")
    script = harness.script([{"text": " ".join(["slow"] * 100), "delay_ms": 50}])
    request = await harness.turns.submit(conversation, "go", model=script)
    await wait_for_hook(harness, "on_chunk")
    await harness.turns.cancel(conversation)
    result = await asyncio.wait_for(harness.turns.wait(conversation, request), 30)
    assert result.status == "aborted"
    response = await wait_for_hook(harness, "on_chat_response", request_id=request)
    assert response["status"] == "aborted" and response["error"] is None


async def test_on_chat_response_can_start_a_follow_up_turn(harness: Harness) -> None:
    start_worker(harness)
    conversation = harness.conv("follow")
    body = {"follow_up": {"text": "and then?", "model": "demo:echo"}}
    first = await harness.send(conversation, "first", model="demo:echo", body=body)
    assert first.status == "completed" and first.turn_number == 1
    response = await wait_for_hook(harness, "on_chat_response", turn_number=2, within_s=30)
    assert response["status"] == "completed" and response["message_text"] == "You said: and then?"
    messages = await (await harness.store()).messages(conversation)
    assert [m.text for m in messages] == [
        "first",
        "You said: first",
        "and then?",
        "You said: and then?",
    ]
    state = await harness.turns.state(conversation)
    assert state.turn_count == 2 and state.running is None
