"""cancelChat stops a model stream within a second, at the engine's default settings.

The real Anthropic SDK streams from the local wire server, which goes silent after a few
events; the time from the cancel signal to the SDK hanging up is measured at the server.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from testkit.llm_server import LLMServer, Reply
from tests.support.harness import Harness
from tests.support.probes import wait_until

KEY = "sk-ant-api03-TESTSECRETKEY0123456789abcdef"
DEFAULTS = {"TURNS_HEARTBEAT_TIMEOUT_S": "30"}


def watch_hangups(server: LLMServer) -> list[float]:
    """Record when each streamed reply ends (the client hung up, for a silent stream)."""
    ended: list[float] = []
    send = server._send

    async def timed(*args: Any) -> None:
        try:
            await send(*args)
        finally:
            ended.append(time.monotonic())

    server._send = timed  # type: ignore[method-assign]
    return ended


async def test_cancel_closes_the_provider_stream_within_a_second(
    server: LLMServer, harness: Harness
) -> None:
    harness.start_worker(ANTHROPIC_BASE_URL=server.base_url, ANTHROPIC_API_KEY=KEY, **DEFAULTS)
    ended = watch_hangups(server)
    try:
        # "Hello there" streams, then the model goes silent for a minute
        server.push(Reply("anthropic/text_basic.sse", stall_after_events=5, stall_s=60))
        conversation = harness.conv("cancel-fast")
        request = await harness.turns.submit(
            conversation, "Hello?", model="anthropic:claude-test-model"
        )
        await wait_until(lambda: server.requests)
        await asyncio.sleep(1.5)  # the step streams, then waits on the silent model
        assert not ended
        signalled = time.monotonic()
        await harness.turns.cancel(conversation)
        result = await asyncio.wait_for(harness.turns.wait(conversation, request), 60)
        assert ended, "the provider stream was closed"
        latency = ended[0] - signalled
        assert latency < 1.0, f"the stream was closed {latency:.2f}s after cancelChat"
        assert result.status == "aborted"
        [_, partial] = await (await harness.store()).messages(conversation)
        assert partial.text == "Hello there", "the partial is what had streamed by the cancel"
        assert partial.metadata["status"] == "aborted"
    finally:
        del server._send
