"""The order of the hooks, and that they fire on every entry path of a turn."""

from __future__ import annotations

import asyncio
from typing import Any

from durable_turns.contract import TurnInput, TurnResult, turn_workflow_id
from durable_turns.messages import user_message
from tests.support.harness import Harness
from tests.support.hooks import calls, start_worker, wait_for_hook


def sequence(harness: Harness) -> list[str]:
    """The hook log as labels, runs of model chunks collapsed into one ``on_chunk``."""
    labels: list[str] = []
    for call in harness.hook_calls():
        label = call["hook"]
        if label == "on_chunk" and call["type"] == "tool-result":
            label = "on_chunk(tool-result)"
        if label == "on_chunk" and labels and labels[-1] == "on_chunk":
            continue
        labels.append(label)
    return labels


def note(text: str) -> dict[str, Any]:
    return {"name": "note", "input": {"text": text}}


TOOL_STEP = [
    "before_step",
    "on_chunk",
    "before_tool_call",
    "tool",
    "on_chunk(tool-result)",
    "after_tool_call",
    "on_step_finish",
]


async def test_order_of_a_turn_with_two_sequential_tool_calls(harness: Harness) -> None:
    start_worker(harness)
    model = harness.script(
        [
            {"text": "first", "tool_calls": [note("a")]},
            {"text": "second", "tool_calls": [note("b")]},
            {"text": "done"},
        ]
    )
    result = await harness.send(harness.conv("order"), "go", model=model)
    assert result.status == "completed" and result.steps == 3
    await wait_for_hook(harness, "on_chat_response")
    assert sequence(harness) == [
        "configure_session",
        "before_turn",
        *TOOL_STEP,
        *TOOL_STEP,
        "before_step",
        "on_chunk",
        "on_step_finish",
        "on_chat_response",
    ]
    assert [c["step"] for c in calls(harness, "before_step")] == [0, 1, 2]
    assert [c["step"] for c in calls(harness, "on_step_finish")] == [0, 1, 2]
    assert [c["steps"] for c in calls(harness, "before_step")] == [[], [0], [0, 1]]


async def test_order_with_parallel_tool_calls(harness: Harness) -> None:
    start_worker(harness)
    model = harness.script([{"tool_calls": [note("a"), note("b")]}, {"text": "done"}])
    result = await harness.send(harness.conv("order-par"), "go", model=model)
    assert result.status == "completed"
    await wait_for_hook(harness, "on_chat_response")
    labels = sequence(harness)
    first_finish = labels.index("on_step_finish")
    assert labels[:4] == ["configure_session", "before_turn", "before_step", "on_chunk"]
    tools_phase = labels[4:first_finish]
    assert sorted(tools_phase) == sorted(
        ["before_tool_call", "tool", "on_chunk(tool-result)", "after_tool_call"] * 2
    )
    assert labels[first_finish:] == [
        "on_step_finish",
        "before_step",
        "on_chunk",
        "on_step_finish",
        "on_chat_response",
    ]
    log = harness.hook_calls()
    ids = {c["id"] for c in calls(harness, "before_tool_call")}
    assert len(ids) == 2
    for call_id in ids:  # each call in its own order, whatever the interleaving
        mine = [
            c["hook"]
            for c in log
            if c.get("id") == call_id and c.get("type") in (None, "tool-result")
        ]
        assert mine == ["before_tool_call", "tool", "on_chunk", "after_tool_call"], mine


async def test_hooks_fire_for_a_turn_workflow_started_directly(harness: Harness) -> None:
    start_worker(harness)
    conversation = harness.conv("direct")
    result = await harness.client.execute_workflow(
        "TurnWorkflow",
        TurnInput(
            conversation_id=conversation,
            request_id="direct-req",
            new_messages=[user_message("hi", id="direct-1")],
            model="demo:echo",
        ),
        id=turn_workflow_id(conversation, 1),
        task_queue=harness.task_queue,
        result_type=TurnResult,
    )
    assert result.status == "completed" and result.text == "You said: hi"
    response = await wait_for_hook(harness, "on_chat_response", request_id="direct-req")
    assert response["continuation"] is False and response["status"] == "completed"
    assert response["message_text"] == "You said: hi"
    [before] = calls(harness, "before_turn")
    assert before["request_id"] == "direct-req" and before["continuation"] is False


async def test_continuation_turn_fires_hooks_with_the_flag(harness: Harness) -> None:
    start_worker(harness)
    conversation = harness.conv("cont")
    model = harness.script({"turns": [[{"text": "part one"}, {"text": "part two"}]]})
    first = await harness.send(conversation, "write", model=model, request_id="first-req")
    assert first.text == "part one"
    request_id = await harness.turns.continue_last_turn(conversation, request_id="cont-req")
    second = await asyncio.wait_for(harness.turns.wait(conversation, request_id), 30)
    assert second.status == "completed" and second.continuation
    before = calls(harness, "before_turn")
    assert [(c["request_id"], c["continuation"]) for c in before] == [
        ("first-req", False),
        ("cont-req", True),
    ]
    response = await wait_for_hook(harness, "on_chat_response", request_id="cont-req")
    assert response["continuation"] is True and response["turn_number"] == 2
    assert calls(harness, "before_step", request_id="cont-req")


async def test_request_id_reaches_the_hooks(harness: Harness) -> None:
    start_worker(harness)
    result = await harness.send(harness.conv("rid"), "hi", model="demo:echo", request_id="rid-42")
    assert result.request_id == "rid-42"
    [before] = calls(harness, "before_turn")
    assert before["request_id"] == "rid-42"
    assert before["cancelled"] is False  # the cancellation observer, not cancelled
    assert calls(harness, "before_step")[0]["request_id"] == "rid-42"
    await wait_for_hook(harness, "on_chat_response", request_id="rid-42")


async def test_configure_session_runs_once_per_worker_start(harness: Harness) -> None:
    start_worker(harness)
    for i in range(2):
        await harness.send(harness.conv("sess"), f"hi {i}", model="demo:echo")
    assert len(calls(harness, "configure_session")) == 1
    start_worker(harness)
    pids = {c["pid"] for c in calls(harness, "configure_session")}
    assert len(calls(harness, "configure_session")) == 2 and len(pids) == 2
