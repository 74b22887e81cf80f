"""What a failed turn keeps: the last attempt's partial reply, and nothing that never ran."""

from __future__ import annotations

import asyncio

from durable_turns.config import Settings
from durable_turns.contract import MAX_RESULT_TEXT_BYTES, WORKER_CRASH_LOOP
from durable_turns.messages import ToolCallPart
from testkit.llm_server import LLMServer, Reply
from tests.support.harness import Harness
from tests.support.probes import wait_until

KEY = "sk-ant-api03-TESTSECRETKEY0123456789abcdef"
HOOKS = "tests.support.hooks:RecordingHooks"


async def test_a_stream_failing_on_every_attempt_keeps_its_partial_reply(
    server: LLMServer, harness: Harness
) -> None:
    """Think: "the partial assistant message (if any) is persisted before on_chat_error"."""
    harness.start_worker(
        ANTHROPIC_BASE_URL=server.base_url,
        ANTHROPIC_API_KEY=KEY,
        TURNS_HOOKS=HOOKS,
        TURNS_HEARTBEAT_TIMEOUT_S="30",
    )
    # "Hello", then an overloaded error mid-stream: on the first attempt and both retries
    server.push(Reply("anthropic/error_overloaded_midstream.sse", times=3))
    conversation = harness.conv("fail-partial")
    result = await harness.send(conversation, "Hi?", model="anthropic:claude-test-model")
    assert result.status == "error" and len(server.requests) == 3
    [user, partial] = await (await harness.store()).messages(conversation)
    assert user.text == "Hi?"
    assert partial.text == "Hello" and partial.metadata["status"] == "error"
    assert result.message_id == partial.id
    await wait_until(lambda: any(c["hook"] == "on_chat_response" for c in harness.hook_calls()))
    hooks = [c["hook"] for c in harness.hook_calls()]
    assert hooks.index("on_chat_error") < hooks.index("on_chat_response")
    [response] = [c for c in harness.hook_calls() if c["hook"] == "on_chat_response"]
    assert response["status"] == "error" and response["message_text"] == "Hello"


async def test_a_failed_turn_shows_no_tool_call_that_never_ran(harness: Harness) -> None:
    """The tool's worker dies on each attempt, past ``TURNS_CRASH_RETRIES`` (5 retries at the
    default): the turn fails with ``WorkerCrashLoop``. The stored reply
    keeps the step's text, not a call the history says never completed (nor, so, does the
    next turn's context: a provider rejects a tool call without its result)."""
    model = harness.script(
        [
            {"text": "Looking.", "tool_calls": [{"name": "slow", "input": {"seconds": 60}}]},
            {"text": "never"},
        ]
    )
    conversation = harness.conv("fail-phantom")
    worker = harness.start_worker()  # heartbeat timeout 2 s: this is not about timeouts
    request = await harness.turns.submit(conversation, "go", model=model)
    for attempt in range(1, Settings().crash_retries + 2):
        await wait_until(
            lambda n=attempt: len([r for r in harness.tool_runs() if r["phase"] == "start"]) >= n,
            60,
        )
        worker.kill()
        worker = harness.start_worker()
    result = await asyncio.wait_for(harness.turns.wait(conversation, request), 60)
    assert result.status == "error" and result.error is not None and result.error.stage == "tool"
    assert result.error.type == WORKER_CRASH_LOOP and "tool slow:" in result.error.message
    [_, reply] = await (await harness.store()).messages(conversation)
    assert reply.text == "Looking." and reply.metadata["status"] == "error"
    assert not [p for p in reply.parts if isinstance(p, ToolCallPart)], reply.parts
    assert result.steps == 1
    after = await harness.send(conversation, "again", model="demo:echo")
    assert after.status == "completed"


async def test_a_reply_over_two_megabytes_travels_by_reference(harness: Harness) -> None:
    """TurnResult carries a bounded preview; the whole reply is the stored message."""
    harness.start_worker(TURNS_HEARTBEAT_TIMEOUT_S="30")
    word = "x" * 99
    text = " ".join([word] * 25_000)  # 2.5 MB: over Temporal's 2 MiB payload limit
    model = harness.script([{"text": word, "repeat": 25_000}])
    conversation = harness.conv("big-reply")
    result = await asyncio.wait_for(harness.send(conversation, "long", model=model), 90)
    assert result.status == "completed"
    assert result.text_truncated and len(result.text.encode()) <= MAX_RESULT_TEXT_BYTES
    assert text.startswith(result.text)
    [_, reply] = await (await harness.store()).messages(conversation)
    assert reply.id == result.message_id and reply.text == text
