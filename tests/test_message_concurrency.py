"""Message concurrency (Think's ``messageConcurrency``): what a message does that arrives while
a turn runs or waits, per conversation, per request and per worker."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from temporalio.client import WorkflowUpdateFailedError

from durable_turns.contract import CONVERSATION_WORKFLOW, ConversationInput
from tests.support.harness import Harness
from tests.support.probes import wait_until

SLOW = [{"text": " ".join(f"w{i}" for i in range(30)), "delay_ms": 100}]  # ~3 s of streaming


async def _open(harness: Harness, name: str, **settings: Any) -> str:
    conversation = harness.conv(name)
    await harness.client.start_workflow(
        CONVERSATION_WORKFLOW,
        ConversationInput(**settings),
        id=conversation,
        task_queue=harness.task_queue,
    )
    return conversation


async def _running(harness: Harness, conversation: str) -> bool:
    state = await harness.turns.state(conversation)
    return state.running is not None and state.running.turn_number is not None


def _request(rid: str, text: str, **extra: Any) -> dict[str, Any]:
    return {
        "request_id": rid,
        "messages": [{"role": "user", "content": text}],
        "model": "demo:echo",
    } | extra


async def _signal_all(harness: Harness, conversation: str, *requests: dict[str, Any]) -> None:
    handle = harness.client.get_workflow_handle(conversation)
    for request in requests:
        await handle.signal("submitMessages", request)


async def test_merge_answers_the_messages_waiting_behind_a_turn_in_one_turn(
    harness: Harness,
) -> None:
    harness.start_worker()
    conversation = await _open(harness, "merge", message_concurrency="merge")
    first = await harness.turns.submit(conversation, "first", model=harness.script(SLOW))
    await wait_until(lambda: _running(harness, conversation), 30)
    await _signal_all(
        harness, conversation, _request("a", "one"), _request("b", "two"), _request("c", "three")
    )
    results = {r: await harness.turns.wait(conversation, r) for r in (first, "a", "b", "c")}
    assert results[first].status == "completed" and results[first].turn_number == 1
    assert {results[r].turn_number for r in "abc"} == {2}  # one turn for the three
    assert all(results[r].status == "completed" for r in "abc")
    state = await harness.turns.state(conversation)
    assert state.turn_count == 2 and state.message_concurrency == "merge"
    merged = {r.request_id: r.merged_into for r in state.recent}
    assert merged["b"] == "a" and merged["c"] == "a"
    messages = await (await harness.store()).messages(conversation)
    assert [m.text for m in messages if m.role == "user"] == ["first", "one", "two", "three"]
    assert messages[-1].text == "You said: three"  # the turn answered the newest last


async def test_latest_cancels_the_running_turn_and_answers_the_newest(harness: Harness) -> None:
    harness.start_worker()
    conversation = await _open(harness, "latest")
    first = await harness.turns.submit(conversation, "long one", model=harness.script(SLOW))
    await wait_until(lambda: _running(harness, conversation), 30)
    await asyncio.sleep(0.5)  # something streamed: the partial is kept
    await _signal_all(
        harness, conversation, _request("now", "this instead", message_concurrency="latest")
    )
    interrupted = await harness.turns.wait(conversation, first)
    assert interrupted.status == "aborted"
    assert interrupted.text and interrupted.text != " ".join(f"w{i}" for i in range(30))
    newest = await harness.turns.wait(conversation, "now")
    assert newest.status == "completed" and newest.text == "You said: this instead"
    assert newest.turn_number == 2


async def test_drop_refuses_a_message_while_a_turn_runs_and_takes_it_when_idle(
    harness: Harness,
) -> None:
    harness.start_worker()
    conversation = await _open(harness, "drop", message_concurrency="drop")
    first = await harness.turns.submit(conversation, "busy", model=harness.script(SLOW))
    await wait_until(lambda: _running(harness, conversation), 30)
    await _signal_all(harness, conversation, _request("dropped", "hello?"))
    with pytest.raises(WorkflowUpdateFailedError) as info:
        await harness.client.get_workflow_handle(conversation).execute_update(
            "sendMessage", _request("dropped-update", "hello??")
        )
    assert "ConversationBusy" in repr(info.value.cause) or "drop" in str(info.value.cause)
    assert (await harness.turns.wait(conversation, first)).status == "completed"
    state = await harness.turns.state(conversation)
    [rejected] = [r for r in state.recent if r.request_id == "dropped"]
    assert rejected.status == "rejected" and rejected.error is not None
    assert rejected.error.type == "ConversationBusy"
    after = await harness.send(conversation, "idle now", model="demo:echo")
    assert after.status == "completed" and after.turn_number == 2


async def test_debounce_waits_for_quiet_and_answers_a_burst_in_one_turn(harness: Harness) -> None:
    harness.start_worker()
    conversation = await _open(
        harness, "debounce", message_concurrency="debounce", debounce_ms=1500
    )
    for i, text in enumerate(("typing", "still typing", "done")):
        await _signal_all(harness, conversation, _request(f"d{i}", text))
        await asyncio.sleep(0.4)
    results = [await harness.turns.wait(conversation, f"d{i}") for i in range(3)]
    assert {r.turn_number for r in results} == {1}
    assert results[-1].text == "You said: done"
    state = await harness.turns.state(conversation)
    assert state.turn_count == 1


async def test_the_worker_default_applies_and_a_request_overrides_it(harness: Harness) -> None:
    harness.start_worker(TURNS_MESSAGE_CONCURRENCY="drop")
    conversation = harness.conv("worker-default")
    first = await harness.turns.submit(conversation, "busy", model=harness.script(SLOW))
    await wait_until(lambda: _running(harness, conversation), 30)
    assert (await harness.turns.state(conversation)).message_concurrency == "drop"
    await _signal_all(
        harness,
        conversation,
        _request("refused", "x"),
        _request("kept", "y", message_concurrency="queue"),
    )
    assert (await harness.turns.wait(conversation, first)).status == "completed"
    kept = await harness.turns.wait(conversation, "kept")
    assert kept.status == "completed" and kept.turn_number == 2
    state = await harness.turns.state(conversation)
    [refused] = [r for r in state.recent if r.request_id == "refused"]
    assert refused.error is not None and refused.error.type == "ConversationBusy"


def test_a_worker_setting_out_of_its_set_is_refused() -> None:
    from durable_turns.config import Settings

    with pytest.raises(ValueError, match="TURNS_MESSAGE_CONCURRENCY"):
        Settings(message_concurrency="sometimes")
    with pytest.raises(ValueError, match="TURNS_DEBOUNCE_MS"):
        Settings(debounce_ms=120_000)


async def test_merged_requests_survive_a_worker_killed_mid_turn(harness: Harness) -> None:
    """The merge is the conversation's state, not the worker's: a worker SIGKILLed while the
    merged turn streams is replaced, and every merged request gets that turn's answer."""
    first_worker = harness.start_worker()
    conversation = await _open(harness, "merge-crash", message_concurrency="merge")
    first = await harness.turns.submit(conversation, "first", model=harness.script(SLOW))
    await wait_until(lambda: _running(harness, conversation), 30)
    slow = harness.script(SLOW)
    await _signal_all(
        harness,
        conversation,
        _request("m1", "one", model=slow),
        _request("m2", "two", model=slow),
    )
    assert (await harness.turns.wait(conversation, first)).status == "completed"
    await wait_until(
        lambda: _turn_number_running(harness, conversation, 2), 30
    )  # the merged turn streams
    first_worker.kill()
    harness.start_worker()
    results = [
        await asyncio.wait_for(harness.turns.wait(conversation, r), 90) for r in ("m1", "m2")
    ]
    assert [r.status for r in results] == ["completed", "completed"]
    assert {r.turn_number for r in results} == {2}
    messages = await (await harness.store()).messages(conversation)
    assert [m.text for m in messages if m.role == "user"] == ["first", "one", "two"]
    assert sum(1 for m in messages if m.role == "assistant") == 2  # one reply per turn


async def _turn_number_running(harness: Harness, conversation: str, number: int) -> bool:
    state = await harness.turns.state(conversation)
    return state.running is not None and state.running.turn_number == number
