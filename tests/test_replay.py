"""Determinism guard: recorded histories replay against the current workflow code.

``tests/histories/*.json`` were recorded from an earlier version of the workflows by
``python -m tests.record_histories``. Never regenerate them to make this test pass: a change
to workflow code that breaks them would break turns in flight, so guard it with
``workflow.patched`` instead; add new recordings beside the old ones.
"""

from __future__ import annotations

import json
from pathlib import Path

from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from durable_turns.runtime import WORKFLOWS
from durable_turns.sandbox import sandbox_runner
from tests.support.harness import Harness

HISTORIES = Path(__file__).parent / "histories"


def replayer() -> Replayer:
    return Replayer(
        workflows=WORKFLOWS,
        data_converter=pydantic_data_converter,
        workflow_runner=sandbox_runner(w.__module__ for w in WORKFLOWS),
    )


async def record(harness: Harness, conversation: str) -> list[WorkflowHistory]:
    """A conversation exercising every workflow path worth replaying."""
    model = harness.script(
        [
            {
                "text": "Looking.",
                "tool_calls": [
                    {"name": "get_weather", "input": {"city": "Nice"}},
                    {"name": "add", "input": {"a": 1, "b": 2}},
                ],
            },
            {"text": "Done: {tool_results}."},
        ]
    )
    await harness.send(conversation, "weather?", model=model)
    await harness.send(
        conversation,
        "bad tool",
        model=harness.script([{"tool_calls": [{"name": "nope", "input": {}}]}, {"text": "ok"}]),
    )
    request = await harness.turns.continue_last_turn(conversation)
    await harness.turns.wait(conversation, request)
    await harness.send(conversation, "fails", model="nosuch:model")
    await harness.client.get_workflow_handle(conversation).signal("submitMessages", {"bad": True})
    await harness.send(conversation, "after", model="demo:echo")
    # a provider's transient error on the first attempt: the workflow's own retry, a timer
    overloaded = {"message": "overloaded", "status": 529, "kind": "transient"}
    await harness.send(
        conversation,
        "retry",
        model=harness.script([{"text": "recovered", "error": overloaded, "attempts": 1}]),
    )
    # a regeneration of the last reply, and one naming no message (a typed error)
    await harness.turns.regenerate(conversation)
    await harness.turns.regenerate(conversation, f"{conversation}/turn-99/assistant")
    histories = [await harness.client.get_workflow_handle(conversation).fetch_history()]
    turns = (await harness.turns.state(conversation)).turn_count
    for n in range(1, turns + 1):
        histories.append(
            await harness.client.get_workflow_handle(f"{conversation}/turn-{n}").fetch_history()
        )
    return histories


async def test_fresh_histories_replay(harness: Harness) -> None:
    harness.start_worker()
    histories = await record(harness, harness.conv("replay"))
    for history in histories:
        await replayer().replay_workflow(history)


async def test_recorded_histories_replay() -> None:
    files = sorted(HISTORIES.rglob("*.json"))
    assert files, "recorded histories are missing"
    for path in files:
        history = WorkflowHistory.from_json(
            path.stem.replace("__", "/"), json.loads(path.read_text())
        )
        await replayer().replay_workflow(history)
