"""What a turn costs in Temporal Cloud's billable actions (``bench.actions``' rules), on a real
dev server and worker: the last model step finishes the turn when no user code runs in
``finish_turn``, and ``TurnModel`` costs no upsert of its own (docs/costs.md)."""

from __future__ import annotations

from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory

from bench.actions import billable_actions
from durable_turns.contract import TURN_MODEL, TURN_STATUS
from tests.support.harness import Harness
from tests.test_replay import RUNNERS, replayer

E = EventType


def upserts(history: WorkflowHistory) -> list[set[str]]:
    """The search attributes each upsert of the history sets."""
    return [
        set(e.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields)
        for e in history.events
        if e.event_type == E.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES
    ]


def started_attributes(history: WorkflowHistory) -> set[str]:
    first = history.events[0].workflow_execution_started_event_attributes
    return set(first.search_attributes.indexed_fields)


async def turn(harness: Harness, conversation: str, **kw: Any) -> tuple[Any, list[Any]]:
    """A turn of ``conversation``: its result, and the events it added to the conversation's
    history and its own."""
    handle = harness.client.get_workflow_handle(conversation)
    try:
        last = max(e.event_id for e in (await handle.fetch_history()).events)
    except Exception:  # the conversation's first turn
        last = 0
    result = await harness.send(conversation, "hi", **kw)
    assert result.status == "completed", result.error
    events = [e for e in (await handle.fetch_history()).events if e.event_id > last]
    own = await harness.client.get_workflow_handle(result.workflow_id).fetch_history()
    return result, [*events, *own.events]


async def test_a_one_step_turn_costs_six_actions(harness: Harness) -> None:
    harness.start_worker(TURNS_MODEL="demo:echo")
    conversation = harness.conv("actions")
    await turn(harness, conversation)  # the conversation opens: its start is not the turn's
    # the worker's default model: unknown at the start, set in the turn's one upsert
    result, events = await turn(harness, conversation)
    assert billable_actions(events) == {
        "update": 1,
        "child workflow": 2,
        "local activities": 1,  # begin_turn; the model step finished the turn
        "activity": 1,
        "search attributes": 1,
    }
    history = await harness.client.get_workflow_handle(result.workflow_id).fetch_history()
    assert TURN_MODEL.name not in started_attributes(history)
    assert upserts(history) == [{TURN_STATUS.name, TURN_MODEL.name}]
    described = await harness.client.get_workflow_handle(result.workflow_id).describe()
    assert described.typed_search_attributes.get(TURN_STATUS) == "completed"
    assert described.typed_search_attributes.get(TURN_MODEL) == "demo:echo"
    assert result.text == "You said: hi"
    [*_, reply] = await (await harness.store()).messages(conversation)
    assert reply.role == "assistant" and reply.text == "You said: hi"

    # a model the request names: set at the start, free; the end upserts TurnStatus alone
    result, events = await turn(harness, conversation, model="demo:echo")
    assert sum(billable_actions(events).values()) == 6
    history = await harness.client.get_workflow_handle(result.workflow_id).fetch_history()
    assert TURN_MODEL.name in started_attributes(history)
    assert upserts(history) == [{TURN_STATUS.name}]
    described = await harness.client.get_workflow_handle(result.workflow_id).describe()
    assert described.typed_search_attributes.get(TURN_MODEL) == "demo:echo"
    # the new branches replay (the recorded sets' worker runs an on_step_finish: it never
    # takes the first one)
    for n in (2, 3):
        history = await harness.client.get_workflow_handle(
            f"{conversation}/turn-{n}"
        ).fetch_history()
        for runner in RUNNERS:
            await replayer(runner).replay_workflow(history)


async def test_a_user_on_step_finish_keeps_its_finish_turn(harness: Harness) -> None:
    """The last ``on_step_finish`` runs in ``finish_turn``, a local activity of its own, as
    docs/hooks.md says: one more workflow task records a marker."""
    harness.start_worker(TURNS_HOOKS="tests.support.slow_hooks:SlowHooks")
    conversation = harness.conv("actions-hooked")
    result, _ = await turn(harness, conversation, model="demo:echo")
    history = await harness.client.get_workflow_handle(result.workflow_id).fetch_history()
    tasks = {
        e.marker_recorded_event_attributes.workflow_task_completed_event_id
        for e in history.events
        if e.event_type == E.EVENT_TYPE_MARKER_RECORDED
    }
    assert len(tasks) == 2, "begin_turn and finish_turn, each in a workflow task of its own"
    assert billable_actions(history.events)["local activities"] == 2
    [*_, reply] = await (await harness.store()).messages(conversation)
    assert reply.role == "assistant" and reply.text == "You said: hi"
