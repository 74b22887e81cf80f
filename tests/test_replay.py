"""Determinism guard: recorded histories replay against the current workflow code.

``tests/histories/**/*.json`` were recorded by the compatibility baseline (1.0.0, CHANGELOG.md)
with ``python -m tests.record_histories``: the conversation and its turns, sub-agents
(``subagents``) and a sub-agent's client tool (``subagents-client``). Never regenerate them to
make this test pass: a change to workflow code that breaks them would break turns in flight,
so make it with ``workflow.patched`` (and its retirement rule, docs/deployment.md) instead, and
add a recording of the new release beside them. A set is removed only by the retirement rule.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Replayer, UnsandboxedWorkflowRunner, Worker

from durable_turns import DurableTurnsPlugin, Settings
from tests.support.harness import Harness
from tests.support.hooks import HOOK_TOOLS

HISTORIES = Path(__file__).parent / "histories"


RUNNERS = ("sandboxed", "plain")
"""Every history replays under both of the worker's runners (``TURNS_WORKFLOW_SANDBOX``): the
sandbox's restrictions catch a non-deterministic call on a recorded path, the plain runner is
the one workers run by default."""


def replayer(runner: str = "sandboxed") -> Replayer:
    """A ``Replayer`` with the engine's plugin (its converter, workflows and runner), as a team
    replays the engine's histories."""
    settings = dataclasses.replace(Settings.from_env(), workflow_sandbox=runner == "sandboxed")
    return Replayer(workflows=[], plugins=[DurableTurnsPlugin(settings)])


REPLAY_WORKER = {"TURNS_HOOKS": "tests.support.hooks:RecordingHooks", "TURNS_TOOLS": HOOK_TOOLS}
"""The worker that records (and freshly replays) the histories: the test hooks, so a turn
can repair a tool call."""


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
    first_run = (await harness.client.get_workflow_handle(conversation).describe()).run_id
    await harness.send(
        conversation,
        "bad tool",
        model=harness.script([{"tool_calls": [{"name": "nope", "input": {}}]}, {"text": "ok"}]),
    )
    request = await harness.turns.continue_last_turn(conversation)
    await harness.turns.wait(conversation, request)
    await harness.send(conversation, "fails", model="nosuch:model")
    await harness.client.get_workflow_handle(conversation).signal("submitMessages", {"bad": True})
    await harness.turns.add_messages(conversation, "a note, no turn")
    # message concurrency: two requests merged behind a running turn, one debounced
    handle = harness.client.get_workflow_handle(conversation)
    await harness.turns.submit(conversation, "busy", model="demo:echo")
    for rid, mode in (("merged-1", "merge"), ("merged-2", "merge"), ("quiet", "debounce")):
        await handle.signal(
            "submitMessages",
            {
                "request_id": rid,
                "messages": [{"role": "user", "content": rid}],
                "model": "demo:echo",
                "message_concurrency": mode,
                "debounce_ms": 200,
            },
        )
    await harness.turns.wait(conversation, "quiet")
    await harness.send(conversation, "after", model="demo:echo")
    # a provider's transient error on the first attempt: the workflow's own retry, a timer
    overloaded = {"message": "overloaded", "status": 529, "kind": "transient"}
    await harness.send(
        conversation,
        "retry",
        model=harness.script([{"text": "recovered", "error": overloaded, "attempts": 1}]),
    )
    # a stall after the first chunk: the step's next attempt is a recovery, which
    # on_chat_recovery lets go on, then one it stops (the turn ends aborted with "late")
    for answer in ("continue", "stop"):
        stalled = await harness.send(
            conversation,
            f"stall, {answer}",
            model=harness.script(
                [{"text": "late reply", "stall_s": 30, "stall_after_chunks": 1, "attempts": 1}]
            ),
            body={"turn_config": {"chat_stream_stall_timeout_ms": 500}, "on_recovery": answer},
        )
        assert stalled.status == ("completed" if answer == "continue" else "aborted"), stalled
    # a regeneration of the last reply, and one naming no message (a typed error)
    await harness.turns.regenerate(conversation)
    await harness.turns.regenerate(conversation, f"{conversation}/turn-99/assistant")
    # a repaired tool call (repair_tool_call, in its model step) and per-turn metadata,
    # carried by a continuation (REPLAY_WORKER's hooks repair what the body asks)
    repaired = [
        {"tool_calls": [{"name": "ad", "input": {"a": 1, "b": "two"}, "id": "call_r"}]},
        {"text": "sum: {tool_result}"},
    ]
    meta = {"user": "u-1", "trace": ["t", 1]}
    result = await harness.send(
        conversation,
        "repair",
        model=harness.script(repaired),
        body={"repairs": {"ad": {"tool_name": "add", "input": {"a": 1, "b": 2}}}},
        metadata=meta,
    )
    assert result.text == "sum: 3" and result.metadata == meta, result
    request = await harness.turns.continue_last_turn(conversation)
    last = await harness.turns.wait(conversation, request)
    assert last.continuation and last.metadata == meta
    # the first run whole (the tests' server suggests continue-as-new at 60 events, so it
    # may have handed over), and the last one once it has run a workflow task of its own
    histories = [
        await harness.client.get_workflow_handle(conversation, run_id=first_run).fetch_history()
    ]
    latest_run = await settled_history(harness, conversation)
    if latest_run.run_id != first_run:
        histories.append(latest_run)
    for n in range(1, last.turn_number + 1):
        histories.append(
            await harness.client.get_workflow_handle(f"{conversation}/turn-{n}").fetch_history()
        )
    return histories


async def settled_history(harness: Harness, workflow_id: str) -> WorkflowHistory:
    """The workflow's history once its current run has completed a workflow task: a
    conversation that has just continued as new has a run of one event, which the replayer
    waits on forever."""
    handle = harness.client.get_workflow_handle(workflow_id)
    for _ in range(200):
        history = await handle.fetch_history()
        if any(
            e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED for e in history.events
        ):
            return history
        await asyncio.sleep(0.05)
    raise AssertionError(f"{workflow_id} completed no workflow task within 10 s")


async def test_fresh_histories_replay(harness: Harness) -> None:
    """Recorded by a worker of the default (plain) runner, replayed under both."""
    harness.start_worker(**REPLAY_WORKER)
    histories = await record(harness, harness.conv("replay"))
    for runner in RUNNERS:
        for history in histories:
            await replayer(runner).replay_workflow(history)
    for history in histories:  # the baseline asks no patch: a later change adds its own
        assert patch_markers(history) == {}, history.workflow_id


def patch_markers(history: WorkflowHistory) -> dict[int, list[str]]:
    """The patch markers of a run, by the workflow task whose completion recorded them."""
    found: dict[int, list[str]] = {}
    task = 0
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            task += 1
        elif event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED:
            marker = event.marker_recorded_event_attributes
            if marker.marker_name == "core_patch":
                patch_id = json.loads(marker.details["patch-data"].payloads[0].data)["id"]
                found.setdefault(task, []).append(patch_id)
    return found


@pytest.mark.parametrize("runner", RUNNERS)
async def test_recorded_histories_replay(runner: str) -> None:
    files = sorted(HISTORIES.rglob("*.json"))
    assert files, "recorded histories are missing"
    for path in files:
        history = WorkflowHistory.from_json(
            path.stem.replace("__", "/"), json.loads(path.read_text())
        )
        await replayer(runner).replay_workflow(history)


_WAIT_S = [1.0]


@workflow.defn(name="ReplayTimerDuration")
class _Sleeper:
    @workflow.run
    async def run(self) -> None:
        await workflow.sleep(timedelta(seconds=_WAIT_S[0]), summary="retry: worker died (1)")


async def test_a_timers_duration_is_not_what_a_replay_checks(client: Client) -> None:
    """``options.death_wait`` changed how long a retry after a death waits, with no patch:
    a replay matches a timer by its place, not its duration. Should a temporalio release
    check durations, this fails, and such a change needs a patch."""
    queue = f"replay-timer-{uuid.uuid4().hex[:8]}"
    _WAIT_S[0] = 0.05
    async with Worker(
        client, task_queue=queue, workflows=[_Sleeper], workflow_runner=UnsandboxedWorkflowRunner()
    ):
        handle = await client.start_workflow(_Sleeper.run, id=queue, task_queue=queue)
        await handle.result()
    history = await handle.fetch_history()
    for wait_s in (0.05, 1.0, 10.0):
        _WAIT_S[0] = wait_s
        result = await Replayer(
            workflows=[_Sleeper], workflow_runner=UnsandboxedWorkflowRunner()
        ).replay_workflow(history, raise_on_replay_failure=False)
        assert result.replay_failure is None, (wait_s, result.replay_failure)
