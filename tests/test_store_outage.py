"""Issue 13, item 5: a store outage mid-turn does not fail the turn.

PostgreSQL sits behind a TCP proxy (``testkit/faultproxy.py``) that drops every
connection and refuses new ones while it is down. Old code: a model step whose store writes
failed was retried within the model's budget (about 3 s at the default settings), so a 15 s
outage failed the turn although the database came back, re-asking the model on each attempt; and once the
TurnWorkflow itself failed, ``TurnsClient.wait`` raised instead of returning a TurnResult.
"""

from __future__ import annotations

import asyncio
import uuid

from temporalio.api.enums.v1 import EventType

from durable_turns.contract import TurnResult
from testkit.faultproxy import FaultProxy
from tests.support.harness import Harness
from tests.support.probes import stored_messages, wait_until

OUTAGE_S = 15
WORDS = 40


async def _turn_state(harness: Harness, conversation: str) -> str:
    try:
        handle = harness.client.get_workflow_handle(f"{conversation}/turn-1")
        return str((await handle.query("state"))["status"])
    except Exception:
        return ""


async def test_a_store_outage_mid_turn_is_waited_out(harness: Harness) -> None:
    proxy = FaultProxy(("127.0.0.1", 5432)).start()
    schema = f"turns_test_{uuid.uuid4().hex[:12]}"
    url = f"postgresql://postgres@127.0.0.1:{proxy.port}/test?schema={schema}"
    first = " ".join(f"w{i}" for i in range(WORDS))
    second = " ".join(f"v{i}" for i in range(WORDS))
    model = harness.script(
        [  # each step streams for about 4 s
            {
                "text": first,
                "delay_ms": 100,
                "tool_calls": [{"name": "slow", "input": {"seconds": 1}}],
            },
            {"text": second, "delay_ms": 100},
        ]
    )
    try:
        # default retry settings (TURNS_MODEL_RETRIES=2); heartbeat timeout 2 s
        worker = await asyncio.to_thread(harness.start_worker, TURNS_STORE_URL=url)
        conversation = harness.conv("outage-mid-turn")
        request = await harness.turns.submit(conversation, "go", model=model)

        # 1. down while step 0 streams: the stream ends during the outage, its save waits
        await wait_until(lambda: _is(harness, conversation, "model step 0"), 30)
        await asyncio.sleep(1.0)
        proxy.refuse()
        await asyncio.sleep(OUTAGE_S)
        proxy.heal()

        # 2. down between steps: the tool's result, or step 1 before its stream, waits
        await wait_until(lambda: any(r.get("phase") == "end" for r in harness.tool_runs()), 30)
        await asyncio.sleep(0.3)
        proxy.refuse()
        await asyncio.sleep(OUTAGE_S)
        proxy.heal()

        result = await asyncio.wait_for(harness.turns.wait(conversation, request), 60)
        assert isinstance(result, TurnResult)
        assert result.status == "completed", result.error
        assert result.text.split() == [*first.split(), *second.split()]
        assert result.steps == 2

        history = await harness.client.get_workflow_handle(f"{conversation}/turn-1").fetch_history()
        names = {
            e.event_id: e.activity_task_scheduled_event_attributes.activity_type.name
            for e in history.events
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        }
        started = [
            (names[e.activity_task_started_event_attributes.scheduled_event_id], e)
            for e in history.events
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
        ]
        model_steps = [e for name, e in started if name == "model_step"]
        assert len(model_steps) == 2
        # one attempt per step: the model was asked once per step, no budget was spent
        attempts = {name: e.activity_task_started_event_attributes.attempt for name, e in started}
        assert all(e.activity_task_started_event_attributes.attempt == 1 for e in model_steps), (
            attempts
        )
        failed = [
            e
            for e in history.events
            if e.event_type
            in (
                EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED,
                EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT,
            )
        ]
        assert not failed
        assert "waiting for the store" in worker.log_tail(200_000)
        messages = await stored_messages(url.replace(f":{proxy.port}/", ":5432/"), conversation)
        assert [m.role for m in messages] == ["user", "assistant"]
    finally:
        proxy.close()


async def _is(harness: Harness, conversation: str, status: str) -> bool:
    return await _turn_state(harness, conversation) == status


async def test_wait_returns_a_typed_error_when_the_turn_workflow_itself_failed(
    harness: Harness,
) -> None:
    """Old code: TurnsClient.wait raised WorkflowFailureError."""
    harness.start_worker()
    conversation = harness.conv("wait-failed")
    model = harness.script([{"tool_calls": [{"name": "slow", "input": {"seconds": 30}}]}])
    request = await harness.turns.submit(conversation, "go", model=model)
    await wait_until(lambda: any(r.get("phase") == "start" for r in harness.tool_runs()), 30)
    await harness.client.get_workflow_handle(f"{conversation}/turn-1").terminate("test")
    result = await asyncio.wait_for(harness.turns.wait(conversation, request), 30)
    assert result.status == "error" and result.error is not None
    assert result.turn_number == 1 and result.error.type == "TerminatedError"
