"""The turn loop end to end: real dev server, real worker process, the demo provider."""

from __future__ import annotations

import asyncio

from temporalio.api.enums.v1 import EventType

from durable_turns.messages import TextPart, ToolCallPart, ToolResultPart
from tests.support.harness import Harness


async def test_one_step_turn(harness: Harness) -> None:
    harness.start_worker()
    result = await harness.send(harness.conv("c-one"), "hello there", model="demo:echo")
    assert result.status == "completed"
    assert result.text == "You said: hello there"
    assert result.steps == 1
    assert result.workflow_id == harness.conv("c-one") + "/turn-1"
    messages = await (await harness.store()).messages(harness.conv("c-one"))
    assert [m.role for m in messages] == ["user", "assistant"]
    assert messages[1].text == "You said: hello there"


async def test_multi_step_tool_loop(harness: Harness) -> None:
    harness.start_worker()
    result = await harness.send(harness.conv("c-multi"), "What's the weather in Oslo?")
    assert result.status == "completed"
    assert result.steps == 2
    assert "forecast for Oslo" in result.text
    [_user, assistant] = await (await harness.store()).messages(harness.conv("c-multi"))
    calls = [p for p in assistant.parts if isinstance(p, ToolCallPart)]
    results = [p for p in assistant.parts if isinstance(p, ToolResultPart)]
    assert [c.tool_name for c in calls] == ["get_weather"]
    assert calls[0].input == {"city": "Oslo"}
    assert len(results) == 1 and not results[0].is_error
    assert "Oslo" in results[0].output
    # the second step saw the tool result: its text quotes it
    assert results[0].output in result.text


async def test_parallel_tool_calls_run_as_parallel_activities(harness: Harness) -> None:
    harness.start_worker()
    model = harness.script(
        [
            {
                "tool_calls": [
                    {"name": "slow", "input": {"seconds": 1}},
                    {"name": "slow", "input": {"seconds": 1}},
                ]
            },
            {"text": "both done: {tool_results}"},
        ]
    )
    result = await harness.send(harness.conv("c-par"), "go", model=model)
    assert result.status == "completed"
    assert result.text.count("slept 1.0s") == 2
    history = await harness.client.get_workflow_handle(result.workflow_id).fetch_history()
    tool_events = []
    scheduled_ids = set()
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            if event.activity_task_scheduled_event_attributes.activity_type.name == "tool_call":
                scheduled_ids.add(event.event_id)
                tool_events.append("scheduled")
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            if event.activity_task_completed_event_attributes.scheduled_event_id in scheduled_ids:
                tool_events.append("completed")
    # both tool activities were scheduled before either completed
    assert tool_events[:2] == ["scheduled", "scheduled"], tool_events
    starts = [r for r in harness.tool_runs() if r["phase"] == "start"]
    assert len(starts) == 2 and len({r["id"] for r in starts}) == 2


async def test_turn_lock_serialises_turns(harness: Harness) -> None:
    harness.start_worker()
    model = harness.script([{"text": "slow reply", "delay_ms": 150}])
    first = await harness.turns.submit(harness.conv("c-lock"), "one", model=model)
    second = await harness.turns.submit(harness.conv("c-lock"), "two", model=model)
    r1, r2 = await asyncio.gather(
        harness.turns.wait(harness.conv("c-lock"), first),
        harness.turns.wait(harness.conv("c-lock"), second),
    )
    assert (r1.turn_number, r2.turn_number) == (1, 2)
    d1 = await harness.client.get_workflow_handle(r1.workflow_id).describe()
    d2 = await harness.client.get_workflow_handle(r2.workflow_id).describe()
    assert d1.close_time is not None and d2.start_time is not None
    assert d2.start_time >= d1.close_time, "turn 2 started before turn 1 finished"
    roles = [m.role for m in await (await harness.store()).messages(harness.conv("c-lock"))]
    assert roles == ["user", "assistant", "user", "assistant"]


async def test_max_steps_defaults_to_ten(harness: Harness) -> None:
    harness.start_worker()
    looping = [{"tool_calls": [{"name": "add", "input": {"a": 1, "b": 1}}]}] * 15
    result = await harness.send(harness.conv("c-max"), "loop", model=harness.script(looping))
    assert result.status == "completed"
    assert result.steps == 10
    assert len(harness.tool_runs()) == 10


async def test_max_steps_from_worker_config(harness: Harness) -> None:
    harness.start_worker(TURNS_MAX_STEPS="3")
    looping = [{"tool_calls": [{"name": "add", "input": {"a": 1, "b": 1}}]}] * 15
    result = await harness.send(harness.conv("c-max3"), "loop", model=harness.script(looping))
    assert result.steps == 3


async def test_second_turn_sees_the_first(harness: Harness) -> None:
    harness.start_worker()
    model = harness.script({"turns": [[{"text": "first answer"}], [{"text": "second answer"}]]})
    r1 = await harness.send(harness.conv("c-two"), "one", model=model)
    r2 = await harness.send(harness.conv("c-two"), "two", model=model)
    assert (r1.text, r2.text) == ("first answer", "second answer")
    assert (r1.turn_number, r2.turn_number) == (1, 2)
    messages = await (await harness.store()).messages(harness.conv("c-two"))
    assert [m.text for m in messages] == ["one", "first answer", "two", "second answer"]
    assert all(isinstance(p, TextPart) for m in messages[:1] for p in m.parts)


async def test_conversation_state_query(harness: Harness) -> None:
    harness.start_worker()
    result = await harness.send(harness.conv("c-state"), "hi", model="demo:echo")
    state = await harness.turns.state(harness.conv("c-state"))
    assert state.turn_count == 1
    assert state.running is None and state.queue == []
    assert state.last_result is not None and state.last_result.request_id == result.request_id
    assert [r.status for r in state.recent] == ["completed"]
