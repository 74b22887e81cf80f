"""A deploy (SIGTERM) or a lost worker never leaves a truncated reply behind.

Only a user's cancelChat may end a model step with a partial reply; every other
interruption (worker shutdown, heartbeat timeout, a lost server) re-runs the step in full.
These run at the engine's default heartbeat timeout (30 s), as production does.
"""

from __future__ import annotations

import asyncio
import signal
import time

from tests.support.harness import Harness
from tests.support.history import activity_attempts
from tests.support.probes import turn_status, wait_until

DEFAULTS = {"TURNS_HEARTBEAT_TIMEOUT_S": "30"}


async def _streaming(harness: Harness, conversation: str) -> bool:
    return await turn_status(harness, conversation) == "model step 0"


async def test_sigterm_mid_stream_keeps_the_whole_reply(harness: Harness) -> None:
    """The deploy's SIGTERM lets the running step finish (graceful shutdown)."""
    first = harness.start_worker(**DEFAULTS)
    text = " ".join(f"word{i}" for i in range(30))
    model = harness.script([{"text": text, "delay_ms": 100}])  # ~3 s of streaming
    conversation = harness.conv("deploy-finish")
    request = await harness.turns.submit(conversation, "tell me", model=model)
    await wait_until(lambda: _streaming(harness, conversation))
    await asyncio.sleep(0.8)  # mid-stream
    first.proc.send_signal(signal.SIGTERM)  # what every deploy sends
    harness.start_worker(**DEFAULTS)
    result = await asyncio.wait_for(harness.turns.wait(conversation, request), 60)
    assert result.status == "completed"
    assert result.text == text, "the reply is whole, not what had streamed at SIGTERM"
    messages = await (await harness.store()).messages(conversation)
    assert [(m.role, m.text) for m in messages] == [("user", "tell me"), ("assistant", text)]


async def test_sigterm_past_the_grace_hands_the_step_over_whole(harness: Harness) -> None:
    """A step longer than the shutdown grace is handed over and re-run in full."""
    first = harness.start_worker(**DEFAULTS, TURNS_SHUTDOWN_GRACE_S="1")
    text = " ".join(f"word{i}" for i in range(40))
    model = harness.script([{"text": text, "delay_ms": 150}])  # ~6 s of streaming
    conversation = harness.conv("deploy-handover")
    request = await harness.turns.submit(conversation, "tell me", model=model)
    await wait_until(lambda: _streaming(harness, conversation))
    await asyncio.sleep(0.8)
    first.proc.send_signal(signal.SIGTERM)
    harness.start_worker(**DEFAULTS)
    result = await asyncio.wait_for(harness.turns.wait(conversation, request), 90)
    assert result.status == "completed"
    assert result.text == text, "the step was re-run in full, not ended with its partial"
    messages = await (await harness.store()).messages(conversation)
    assert [(m.role, m.text) for m in messages] == [("user", "tell me"), ("assistant", text)]
    assert await activity_attempts(harness, result.workflow_id, "model_step") == [1, 2]
    assert first.proc.wait(20) == 0, "the worker left cleanly"


async def test_a_killed_worker_is_replaced_within_the_default_heartbeat_timeout(
    harness: Harness,
) -> None:
    """SIGKILL mid-stream at the defaults: the server notices at the heartbeat timeout
    (30 s) and the step re-runs in full on another worker, a few seconds later at most."""
    first = harness.start_worker(**DEFAULTS)
    text = " ".join(f"word{i}" for i in range(30))
    model = harness.script([{"text": text, "delay_ms": 100}])  # ~3 s of streaming
    conversation = harness.conv("deploy-kill")
    request = await harness.turns.submit(conversation, "tell me", model=model)
    await wait_until(lambda: _streaming(harness, conversation))
    await asyncio.sleep(0.8)
    killed = time.monotonic()
    first.kill()
    harness.start_worker(**DEFAULTS)
    result = await asyncio.wait_for(harness.turns.wait(conversation, request), 90)
    recovered_s = time.monotonic() - killed
    assert result.status == "completed" and result.text == text
    assert await activity_attempts(harness, result.workflow_id, "model_step") == [1, 2]
    # heartbeat timeout 30 s, then ~3 s of streaming again; well under a minute
    assert recovered_s < 30 + 15, f"the turn finished {recovered_s:.1f}s after the kill"


async def test_a_client_waiting_through_a_deploy_with_no_worker_gets_its_result(
    harness: Harness,
) -> None:
    """``wait`` polls the conversation with a query, which needs a worker: with none running for
    longer than the server holds a query (30 s, then ``CANCELLED``), it asks again, and the
    first worker to start answers it."""
    conversation = harness.conv("deploy-no-worker")
    request = await harness.turns.submit(conversation, "anyone?", model="demo:echo")
    waiting = asyncio.create_task(harness.turns.wait(conversation, request, poll_s=0.5))
    await asyncio.sleep(32)  # past the server's hold on the first query
    assert not waiting.done(), waiting
    harness.start_worker()
    result = await asyncio.wait_for(waiting, 60)
    assert result.status == "completed" and result.text, result
