"""Crashes at every boundary, the stall watchdog, continueLastTurn and cancel."""

from __future__ import annotations

import asyncio
import time

import pytest
from temporalio.api.enums.v1 import EventType

from tests.support.harness import Harness
from tests.support.history import activity_attempts
from tests.support.probes import chunk_backend, wait_until

SLOW = "tests.support.slow_hooks:SlowHooks"
WEATHER = [
    {"text": "Looking.", "tool_calls": [{"name": "get_weather", "input": {"city": "Lima"}}]},
    {"text": "Forecast: {tool_result}."},
]


def marks(harness: Harness, hook: str) -> list[dict]:
    return [c for c in harness.hook_calls() if c.get("hook") == hook]


@pytest.mark.parametrize(
    ("slow", "activity"),
    [
        ("before_turn", "begin_turn"),
        ("before_step", "model_step"),
        ("on_step_finish", "finish_turn"),
    ],
    ids=["while-beginning", "between-steps", "while-finishing"],
)
async def test_kill_at_a_boundary(harness: Harness, slow: str, activity: str) -> None:
    first = harness.start_worker(TURNS_HOOKS=SLOW, TEST_SLOW_HOOK=f"{slow}:30")
    conversation = harness.conv(f"boundary-{slow}")
    model = harness.script(WEATHER)
    request = await harness.turns.submit(conversation, "weather?", model=model)
    await wait_until(
        lambda: any(
            m["pid"] == first.proc.pid and m.get("step", 1) >= 1 for m in marks(harness, slow)
        )
    )
    killed = time.monotonic()
    first.kill()
    harness.start_worker(TURNS_HOOKS=SLOW)
    result = await asyncio.wait_for(harness.turns.wait(conversation, request), 90)
    recovered_s = time.monotonic() - killed
    assert result.status == "completed"
    assert "Forecast: " in result.text and "in Lima." in result.text
    messages = await (await harness.store()).messages(conversation)
    assert [m.role for m in messages] == ["user", "assistant"]
    attempts = await activity_attempts(harness, result.workflow_id, activity)
    if activity in ("begin_turn", "finish_turn"):
        # Local activities: the killed worker's attempt left no trace in history; the next
        # workflow task ran the activity again, on the new worker, and recorded it once.
        assert len(attempts) == 1
        assert len({m["pid"] for m in marks(harness, slow)}) == 2, "the hook ran again"
        # noticed at the turn's workflow task timeout (TURN_TASK_TIMEOUT_S, 2.5 s; the harness
        # lowers only the heartbeat timeout, which a local activity does not have)
        assert recovered_s < 10 + 15, f"the turn finished {recovered_s:.1f}s after the kill"
    else:
        assert max(attempts) == 2
    # the live stream says the turn recovered, at the stage that ran again
    streams = await chunk_backend(harness)
    events = await streams.read(result.workflow_id)
    await streams.close()
    [recovering] = [e for e in events if e.type == "recovering"]
    stage = {"begin_turn": "turn", "model_step": "stream", "finish_turn": "persist"}[activity]
    assert recovering.data["stage"] == stage and recovering.data["reason"] == "worker_lost"
    assert recovering.data["deaths"] == 1
    if slow == "before_step":
        # step 0's output was stored: only step 1 was asked again, never step 0
        steps = [m["step"] for m in marks(harness, "before_step")]
        assert steps.count(0) == 1 and steps.count(1) == 2


async def test_stall_before_the_first_chunk_is_retried_and_keeps_the_user_message(
    harness: Harness,
) -> None:
    harness.start_worker(TURNS_STALL_TIMEOUT_MS="500")
    model = harness.script([{"text": "finally here", "stall_s": 30, "attempts": 1}])
    conversation = harness.conv("stall-first")
    result = await harness.send(conversation, "hello?", model=model)
    assert result.status == "completed" and result.text == "finally here"
    messages = await (await harness.store()).messages(conversation)
    assert [m.text for m in messages] == ["hello?", "finally here"]
    # the workflow schedules each attempt: the first one's failure is in the history
    assert await activity_attempts(harness, result.workflow_id, "model_step") == [1, 2]
    history = await harness.client.get_workflow_handle(result.workflow_id).fetch_history()
    failures = [
        e.activity_task_failed_event_attributes.failure.message
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED
    ]
    assert any("no activity for 500ms (before the first chunk)" in f for f in failures)


async def test_stall_mid_stream_then_budget_spent_ends_the_turn_clearly(harness: Harness) -> None:
    harness.start_worker(TURNS_STALL_TIMEOUT_MS="400", TURNS_MODEL_RETRIES="1")
    model = harness.script([{"text": "one two three four", "stall_s": 30, "stall_after_chunks": 2}])
    conversation = harness.conv("stall-spent")
    result = await harness.send(conversation, "hello?", model=model)
    assert result.status == "error"
    assert result.error is not None and result.error.type == "StreamStalled"
    assert "Chat stream stalled: no activity for 400ms (after 2 chunks)" in result.error.message
    assert await activity_attempts(harness, result.workflow_id, "model_step") == [1, 2]
    messages = await (await harness.store()).messages(conversation)
    assert messages[0].text == "hello?", "the user's message is never lost"
    # the last attempt's partial reply is kept, marked error (tests/test_edges_failed_turn.py)
    assert [(m.text.split(), m.metadata.get("status")) for m in messages[1:]] == [
        (["one", "two"], "error")
    ]


async def test_slow_but_steady_stream_never_trips(harness: Harness) -> None:
    # 12 chunks 300 ms apart: 3.6 s in all, longer than the 2 s heartbeat timeout and far
    # longer than the 1 s stall timeout, but never silent for either.
    harness.start_worker(TURNS_STALL_TIMEOUT_MS="1000")
    text = " ".join(f"t{i}" for i in range(12))
    model = harness.script([{"text": text, "delay_ms": 300}])
    result = await harness.send(harness.conv("steady"), "go", model=model)
    assert result.status == "completed" and result.text == text
    assert await activity_attempts(harness, result.workflow_id, "model_step") == [1]


async def test_stall_timeout_zero_disables_the_watchdog(harness: Harness) -> None:
    harness.start_worker(TURNS_STALL_TIMEOUT_MS="0")
    model = harness.script([{"text": "late but fine", "stall_s": 1.5, "attempts": 1}])
    result = await harness.send(harness.conv("no-watchdog"), "go", model=model)
    assert result.status == "completed"
    assert await activity_attempts(harness, result.workflow_id, "model_step") == [1]


async def test_continue_last_turn(harness: Harness) -> None:
    harness.start_worker()
    model = harness.script([{"text": "part one"}, {"text": "part two"}])
    conversation = harness.conv("continue")
    first = await harness.send(conversation, "write", model=model, body={"mode": "essay"})
    assert first.text == "part one"
    request = await harness.turns.continue_last_turn(conversation)
    second = await harness.turns.wait(conversation, request)
    assert second.status == "completed" and second.continuation
    assert second.text == "part two"
    messages = await (await harness.store()).messages(conversation)
    assert [(m.role, m.text) for m in messages] == [
        ("user", "write"),
        ("assistant", "part one"),
        ("assistant", "part two"),
    ], "the ephemeral continue prompt is never persisted"
    assert messages[2].metadata["continuation"] is True
    turn = await (await harness.store()).get_turn(f"{conversation}/turn-2")
    assert turn is not None and turn.body == {"mode": "essay"}, (
        "body defaults to the last request's"
    )


async def test_continue_after_a_failed_turn_answers_the_message_or_fails_typed(
    harness: Harness,
) -> None:
    harness.start_worker()
    conversation = harness.conv("continue-failed")
    failed = await harness.send(conversation, "hi", model="nosuch:model")
    assert failed.status == "error"
    # the user's message is last: continueLastTurn answers it (with the last request's
    # model, which fails the same way: a typed error, never a silent skip)
    request = await harness.turns.continue_last_turn(conversation)
    again = await harness.turns.wait(conversation, request)
    assert again.status == "error" and again.error is not None
    assert again.error.type == failed.error.type == "InvalidModel"
    await wait_until(lambda: _recorded(harness, conversation, 2))
    state = await harness.turns.state(conversation)
    assert [r.status for r in state.recent] == ["error", "error"]
    messages = await (await harness.store()).messages(conversation)
    assert [m.role for m in messages] == ["user"]


async def test_continue_with_nothing_to_continue_or_answer_is_skipped(harness: Harness) -> None:
    harness.start_worker()
    conversation = harness.conv("continue-skip")
    request = await harness.turns.continue_last_turn(conversation)
    skipped = await harness.turns.wait(conversation, request)
    assert skipped.status == "skipped"
    await wait_until(lambda: _recorded(harness, conversation, 1))
    state = await harness.turns.state(conversation)
    assert [r.status for r in state.recent] == ["skipped"]
    assert await (await harness.store()).messages(conversation) == []


async def test_cancel_a_queued_request_it_never_runs(harness: Harness) -> None:
    harness.start_worker()
    slow = harness.script([{"text": "a b c d e f g h", "delay_ms": 150}])
    conversation = harness.conv("cancel-queued")
    first = await harness.turns.submit(conversation, "first", model=slow)
    second = await harness.turns.submit(conversation, "second", model=slow)
    await harness.turns.cancel(conversation, second)
    r1 = await harness.turns.wait(conversation, first)
    r2 = await harness.turns.wait(conversation, second)
    assert r1.status == "completed" and r2.status == "aborted"
    messages = await (await harness.store()).messages(conversation)
    assert [m.text for m in messages] == ["first", "a b c d e f g h"]
    state = await harness.turns.state(conversation)
    assert state.turn_count == 1


async def test_cancel_the_running_turn(harness: Harness) -> None:
    harness.start_worker(TURNS_HOOKS="tests.support.hooks:RecordingHooks")
    slow = harness.script([{"text": " ".join(["word"] * 60), "delay_ms": 100}])
    conversation = harness.conv("cancel-running")
    request = await harness.turns.submit(conversation, "go", model=slow)
    await wait_until(lambda: _running(harness, conversation))
    await asyncio.sleep(0.5)
    await harness.turns.cancel(conversation)
    result = await asyncio.wait_for(harness.turns.wait(conversation, request), 30)
    assert result.status == "aborted"
    # the partial assistant message is persisted, marked aborted
    [_, partial] = await (await harness.store()).messages(conversation)
    assert partial.metadata["status"] == "aborted"
    assert 0 < len(partial.text.split()) < 60 and set(partial.text.split()) == {"word"}
    assert result.text == partial.text.strip()
    await wait_until(lambda: any(c["hook"] == "on_chat_response" for c in harness.hook_calls()))
    [response] = [c for c in harness.hook_calls() if c["hook"] == "on_chat_response"]
    assert response["status"] == "aborted"
    # the conversation goes on
    after = await harness.send(conversation, "again", model="demo:echo")
    assert after.status == "completed" and after.turn_number == 2


async def _recorded(harness: Harness, conversation: str, count: int) -> bool:
    return len((await harness.turns.state(conversation)).recent) >= count


async def _running(harness: Harness, conversation: str) -> bool:
    try:
        state = await harness.turns.state(conversation)
    except Exception:
        return False
    return state.running is not None
