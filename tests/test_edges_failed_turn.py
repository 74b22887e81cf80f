"""What a failed turn keeps: the last attempt's partial reply, and nothing that never ran."""

from __future__ import annotations

import asyncio

from tests.llm_server import LLMServer, Reply
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
    await asyncio.sleep(0)
